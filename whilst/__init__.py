"""whilst: data-dependent loops that are differentiable and deployable.

`while_loop` has the semantics of `tf.compat.v1.while_loop` with jax.numpy
bodies, `whilst.lax.while_loop` / `fori_loop` those of `jax.lax`'s; `export`
and `compile` turn functions that use them into StableHLO and IREE modules; `whilst.runtime.load` runs those modules without JAX.

The public names are imported eagerly by plain import statements (so IDEs and
type checkers see them), and importing them registers every rule of the
primitives. Only where JAX cannot be imported (a runtime-only install) are
they left out: `import whilst.runtime`, `whilst run` and `whilst inspect` then
still work, and touching any other public name raises an ImportError that says
how to install the compiler.
"""
import importlib.metadata

from whilst import runtime

try:
    __version__ = importlib.metadata.version("whilst")
except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "CompileError", "Compiled", "Exported", "ResidualReport", "TensorArray",
           "compile", "export", "lax", "residual_report", "runtime", "trace", "while_loop"]

try:
    import jax as _jax  # noqa: F401
except ImportError as _error:
    def __getattr__(name, _error=_error):
        if name in __all__:
            raise ImportError(
                f"whilst.{name} needs JAX, which could not be imported ({_error}); only "
                f"whilst.runtime works without it. Install the compiler: "
                f"pip install 'whilst[compile]'") from _error
        raise AttributeError(f"module 'whilst' has no attribute {name!r}")
else:
    from whilst import lax
    from whilst._compile import Compiled, compile
    from whilst.frontend import TensorArray, while_loop
    from whilst.ir import ResidualReport, residual_report, trace
    from whilst.lowering import CompileError, Exported, export
