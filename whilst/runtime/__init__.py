"""The embedded runtime: load `.vmfb` modules and call them with pytrees of numpy
arrays (or of `DeviceArray`s, results left on the device). Imports only numpy and
`iree.runtime` (no JAX, no compiler).

Public submodules shared with the compiler: `signature` (the metadata format),
`seal` (the integrity checksum) and `targets` (targets and drivers)."""
from whilst.runtime._errors import LoadError
from whilst.runtime._loader import Function, Module, RunError, load
from whilst.runtime._module_file import ModuleInfo, describe
from whilst.runtime._transfer import DeviceArray
from whilst.runtime.targets import DRIVERS

__all__ = ["DRIVERS", "DeviceArray", "Function", "LoadError", "Module", "ModuleInfo", "RunError",
           "describe", "load"]
