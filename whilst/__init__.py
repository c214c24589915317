"""whilst: data-dependent loops that are differentiable and deployable.

`while_loop` has the semantics of `tf.compat.v1.while_loop` with jax.numpy
bodies; `export` and `compile` turn functions that use it into StableHLO and
IREE modules; `whilst.runtime.load` runs those modules without JAX.

Everything but `whilst.runtime` is imported on first use of any of it (all
together, so the lowering rules are registered once a loop can be built), so
that `import whilst.runtime` (and `whilst run`) works where JAX is not installed.
"""
import importlib
import importlib.metadata

from whilst import runtime

try:
    __version__ = importlib.metadata.version("whilst")
except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

_LAZY = {
    "Compiled": "whilst._compile", "compile": "whilst._compile",
    "while_loop": "whilst.frontend",
    "ResidualReport": "whilst.ir", "residual_report": "whilst.ir", "trace": "whilst.ir",
    "CompileError": "whilst.lowering", "Exported": "whilst.lowering", "export": "whilst.lowering",
}

__all__ = ["__version__", "CompileError", "Compiled", "Exported", "ResidualReport", "compile",
           "export", "residual_report", "runtime", "trace", "while_loop"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'whilst' has no attribute {name!r}")
    for attr, module in _LAZY.items():
        globals()[attr] = getattr(importlib.import_module(module), attr)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))
