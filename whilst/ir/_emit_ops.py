"""Small StableHLO building blocks of the While lowering."""
from __future__ import annotations

import numpy as np
from jax.extend.core import ClosedJaxpr
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from whilst._jax_compat import ir_consts


def const(value):
    """An int32 scalar constant."""
    return mlir.ir_constant(np.int32(value))


def subcomp(ctx, jaxpr: ClosedJaxpr, name_stack, *args):
    """The values `jaxpr(*args)` computes, emitted at the insertion point."""
    outs, _ = mlir.jaxpr_subcomp(
        ctx.module_context, jaxpr.jaxpr, name_stack, mlir.TokenSet(),
        ir_consts(jaxpr.consts, [v.aval for v in jaxpr.jaxpr.constvars]),
        *args, dim_var_values=ctx.dim_var_values, const_lowering=ctx.const_lowering,
        outer_traceback=ctx.traceback)
    return outs


def less(a, b):
    """`a < b` for int32 scalars."""
    return hlo.compare(a, b, hlo.ComparisonDirectionAttr.get("LT"),
                       compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))


def broadcast_scalar(pred, like_type):
    """A scalar i1 broadcast to `like_type`'s shape: an elementwise select fuses into
    the step's dispatch, where IREE turns a scalar-predicate select of tensors into
    a branch that reads the predicate back to the host."""
    shape = ir.RankedTensorType(like_type).shape
    if not shape:
        return pred
    i1 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(1))
    return hlo.broadcast_in_dim(i1, pred, ir.DenseI64ArrayAttr.get([]))
