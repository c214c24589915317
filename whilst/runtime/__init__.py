"""The embedded runtime: load `.vmfb` modules and call them with pytrees of numpy
arrays. Imports only numpy and `iree.runtime` (no JAX, no compiler)."""
from whilst.runtime._loader import DRIVERS, Function, LoadError, Module, load

__all__ = ["DRIVERS", "Function", "LoadError", "Module", "load"]
