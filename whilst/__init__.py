"""whilst: data-dependent loops that are differentiable and deployable.

`while_loop` has the semantics of `tf.compat.v1.while_loop` with jax.numpy
bodies; `export` and `compile` turn functions that use it into StableHLO and
IREE modules; `whilst.runtime.load` runs those modules without JAX.
"""
from whilst import runtime
from whilst._compile import Compiled, compile
from whilst.frontend import while_loop
from whilst.ir import ResidualReport, residual_report, trace
from whilst.lowering import CompileError, Exported, export

__all__ = ["CompileError", "Compiled", "Exported", "ResidualReport", "compile", "export",
           "residual_report", "runtime", "trace", "while_loop"]
