"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The emitted loop carries `(i, *carry)`; constants are captured from the
enclosing region rather than carried, so stacks read by a gradient While are
never loop-carried buffers.

A cond that reads the carry is evaluated at the end of the body and carried as
a boolean (`(i, pred, *carry)`, the cond region only returns `pred`): IREE 3.13
crashes (ScfWhileOpConversion) on loops whose cond region reads a value the
body computed from a tensor, the usual shape of convergence tests. Loops whose
cond reads only the counter (gradient Whiles, `i < n` bounds) keep the plain
shape, which IREE evaluates on the host. The op gets two discardable attributes:
`whilst.role` ("forward" | "gradient" | "linear") and `whilst.name`.
"""
from __future__ import annotations

import numpy as np

from jax._src import core
from jax._src.interpreters import mlir, partial_eval as pe
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

from whilst.ir import (checkpointed_linear_while_p, expand_checkpointed_linear_while,
                       expand_linear_while, functional_while_p, linear_while_p,
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
                               unroll, checkpoints):
    del static_bound, accumulators, unroll, checkpoints
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    name_stack = ctx.name_stack.extend(name)

    def predicate(i, xs):
        in_bound = hlo.compare(i, bound, hlo.ComparisonDirectionAttr.get("LT"),
                               compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        (pred,) = _subcomp(ctx, cond_jaxpr, name_stack.extend("cond"), *cond_consts, i, *xs)
        return hlo.and_(in_bound, pred)

    rotated = _reads_carry(cond_jaxpr, cond_nconsts)
    types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    pred_types = [mlir.aval_to_ir_type(ctx.module_context, core.ShapedArray((), np.bool_))]
    loop_types = [types[0], *(pred_types if rotated else []), *types[1:]]
    zero = mlir.ir_constant(np.int32(0))
    one = mlir.ir_constant(np.int32(1))
    init = [zero, *([predicate(zero, carry)] if rotated else []), *carry]
    while_op = hlo.WhileOp(loop_types, init)
    while_op.attributes[ROLE_ATTR] = ir.StringAttr.get(role)
    while_op.attributes[NAME_ATTR] = ir.StringAttr.get(name)

    cond_block = while_op.regions[0].blocks.append(*loop_types)
    with ir.InsertionPoint(cond_block):
        if rotated:
            hlo.return_([cond_block.arguments[1]])
        else:
            i, *xs = cond_block.arguments
            hlo.return_([predicate(i, xs)])

    body_block = while_op.regions[1].blocks.append(*loop_types)
    with ir.InsertionPoint(body_block):
        i, *xs = body_block.arguments
        if rotated:
            xs = xs[1:]
        new_xs = _subcomp(ctx, body_jaxpr, name_stack.extend("body"), *body_consts, i, *xs)
        new_xs = _read_every_carry(body_jaxpr, body_nconsts, xs, new_xs)
        new_i = hlo.add(i, one)
        hlo.return_([new_i, *([predicate(new_i, new_xs)] if rotated else []), *new_xs])
    results = list(while_op.results)
    return [results[0], *results[2 if rotated else 1:]]


def _read_every_carry(body_jaxpr, body_nconsts, xs, new_xs):
    """Make the body read each carry it overwrites without reading:
    `new if opaque_zero == 0 else old`, with `opaque_zero` hidden from folding
    by an optimization barrier.

    IREE 3.13 crashes (ScfWhileOpConversion) on a loop that produces a carry the
    body never reads, once the carry is also tested by the cond (e.g. a residual
    norm recomputed from scratch every step)."""
    _, used = pe.dce_jaxpr(body_jaxpr.jaxpr, [True] * len(body_jaxpr.out_avals))
    unread = [not u for u in used[body_nconsts + 1:]]
    if not any(unread):
        return new_xs
    zero = mlir.ir_constant(np.int32(0))
    (opaque,) = hlo.OptimizationBarrierOp([zero]).results
    keep_new = hlo.compare(opaque, zero, hlo.ComparisonDirectionAttr.get("EQ"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
    return [hlo.select(_broadcast(keep_new, new.type), new, old) if u else new
            for u, new, old in zip(unread, new_xs, xs)]


def _broadcast(pred, like_type):
    shape = ir.RankedTensorType(like_type).shape
    if not shape:
        return pred
    i1 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(1))
    return hlo.broadcast_in_dim(i1, pred, ir.DenseI64ArrayAttr.get([]))


def _reads_carry(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads the carry (not only the counter and its constants)."""
    _, used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    return any(used[cond_nconsts + 1:])


mlir.register_lowering(functional_while_p, _functional_while_lowering)
mlir.register_lowering(linear_while_p,
                       mlir.lower_fun(expand_linear_while, multiple_results=True))
mlir.register_lowering(checkpointed_linear_while_p,
                       mlir.lower_fun(expand_checkpointed_linear_while, multiple_results=True))
