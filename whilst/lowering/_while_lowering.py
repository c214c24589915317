"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The emitted loop carries `(i, *carry)`; constants are captured from the
enclosing region rather than carried, so stacks read by a gradient While are
never loop-carried buffers. The op gets two discardable attributes:
`whilst.role` ("forward" | "gradient" | "linear") and `whilst.name`.
"""
from __future__ import annotations

import numpy as np

from jax._src import core
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

from whilst.ir import (expand_linear_while, functional_while_p, linear_while_p,
                       split_operands)

ROLE_ATTR = "whilst.role"
NAME_ATTR = "whilst.name"


def _subcomp(ctx, jaxpr: core.ClosedJaxpr, name_stack, *args):
    outs, _ = mlir.jaxpr_subcomp(
        ctx.module_context, jaxpr.jaxpr, name_stack, mlir.TokenSet(),
        mlir.ir_consts(jaxpr.consts, [v.aval for v in jaxpr.jaxpr.constvars]),
        *args, dim_var_values=ctx.dim_var_values, const_lowering=ctx.const_lowering,
        outer_traceback=ctx.traceback)
    return outs


def _functional_while_lowering(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts,
                               body_nconsts, static_bound, name, role, accumulators,
                               unroll):
    del static_bound, accumulators, unroll
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    zero = mlir.ir_constant(np.int32(0))
    one = mlir.ir_constant(np.int32(1))
    while_op = hlo.WhileOp(types, [zero, *carry])
    while_op.attributes[ROLE_ATTR] = ir.StringAttr.get(role)
    while_op.attributes[NAME_ATTR] = ir.StringAttr.get(name)
    name_stack = ctx.name_stack.extend(name)

    cond_block = while_op.regions[0].blocks.append(*types)
    with ir.InsertionPoint(cond_block):
        i, *xs = cond_block.arguments
        in_bound = hlo.compare(i, bound, hlo.ComparisonDirectionAttr.get("LT"),
                               compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        (pred,) = _subcomp(ctx, cond_jaxpr, name_stack.extend("cond"), *cond_consts, i, *xs)
        hlo.return_([hlo.and_(in_bound, pred)])

    body_block = while_op.regions[1].blocks.append(*types)
    with ir.InsertionPoint(body_block):
        i, *xs = body_block.arguments
        new_xs = _subcomp(ctx, body_jaxpr, name_stack.extend("body"), *body_consts, i, *xs)
        hlo.return_([hlo.add(i, one), *new_xs])
    return list(while_op.results)


mlir.register_lowering(functional_while_p, _functional_while_lowering)
mlir.register_lowering(linear_while_p,
                       mlir.lower_fun(expand_linear_while, multiple_results=True))
