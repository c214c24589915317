"""The embedded runtime: load `.vmfb` modules and call them with pytrees of numpy
arrays. Imports only numpy and `iree.runtime` (no JAX, no compiler)."""
from whilst.runtime._loader import DRIVERS, Function, Module, RunError, load
from whilst.runtime._module_file import LoadError, ModuleInfo, describe

__all__ = ["DRIVERS", "Function", "LoadError", "Module", "ModuleInfo", "RunError", "describe",
           "load"]
