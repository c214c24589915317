"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The op gets two discardable attributes: `whilst.role` ("forward" | "gradient" |
"linear") and `whilst.name`. Constants are captured from the enclosing region
rather than carried, so stacks read by a gradient While are never loop-carried
buffers.

Each `stablehlo.while` iteration runs up to k loop steps (unrolling), which
amortises IREE's per-iteration host cost (about 2 us). With k steps the emitted
loop is, as plain Python::

    i, go = 0, 0 < bound and cond(0, x)
    while go:
        x = body(i, x); steps = 1           # the step the loop test admitted
        for s in range(1, k):               # predicated steps, no branches
            p = i + s < bound and cond(i + s, x)
            x = body(i + s, x) if p else x  # an elementwise `select`
            steps += p
        i += k
        go = steps == k and i < bound and cond(i, x)
    return i - k + steps, x

so the counter, the carry and the gradients are those of k = 1 for every trip
count, and the index a step sees is `i + s`, computed from the carried `i`
without reading anything back from the device. k comes from `unroll_factor`.

A cond that reads the carry is evaluated at the end of the body and carried as
a boolean (the cond region only returns it): IREE 3.13 crashes
(ScfWhileOpConversion) on loops whose cond region reads a value the body
computed from a tensor, the usual shape of convergence tests. Loops whose cond
reads only the counter (gradient Whiles, bounds) keep the plain shape.
"""
from __future__ import annotations

import numpy as np

from jax._src import core
from jax._src.interpreters import mlir, partial_eval as pe
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

from whilst.ir import (checkpointed_linear_while_p, expand_checkpointed_linear_while,
                       expand_linear_while, functional_while_p, linear_while_p,
                       split_operands, uninitialized_p)

UNINITIALIZED_ATTR = "whilst.uninitialized"
ROLE_ATTR = "whilst.role"
NAME_ATTR = "whilst.name"
UNROLL_ATTR = "whilst.unroll"
MAX_UNROLL = 64
WORK_PER_ITERATION = 16384  # elements of work one emitted iteration aims for
LARGE_CARRY_BYTES = 64 * 1024
# Unrolled bodies that index at a computed position fail in iree-compile 3.13:
# writes segfault or leave unresolved materializations; reads (an unrolled
# gradient While) compile for some programs, 2x faster, and fail with "failed to
# solve for timepoint coverage" for others (the Newton sample's jacrev).
DYNAMIC_INDEXING = frozenset({"dynamic_slice", "dynamic_update_slice", "gather", "scatter",
                              "scatter-add", "scatter_add", "scatter-mul", "scatter_mul",
                              "scatter-min", "scatter_min", "scatter-max", "scatter_max"})


def unroll_factor(cond_jaxpr, body_jaxpr, unroll) -> int:
    """Loop steps per `stablehlo.while` iteration: `unroll` if given, else automatic.

    Automatic: 1 for bodies with effects (an inactive step would run them),
    with a carry over 64 KiB (the predicated steps select whole carries), or
    with a read or write at a computed index (pushes and pops of residual
    stacks included: iree-compile 3.13 crashes or fails on such bodies
    unrolled, see `DYNAMIC_INDEXING`); otherwise as many steps as fit in about 16384 elements of work, at most 64
    (tiny bodies unroll more).
    """
    if unroll is not None:
        return unroll
    if cond_jaxpr.effects or body_jaxpr.effects:
        return 1
    if _indexes_at_computed_position(body_jaxpr.jaxpr):
        return 1
    if not all(core.is_constant_shape(v.aval.shape) for j in (cond_jaxpr, body_jaxpr)
               for v in _all_vars(j.jaxpr)):
        return 1  # symbolic shapes: sizes unknown
    if any(_nbytes(a) > LARGE_CARRY_BYTES for a in body_jaxpr.out_avals):
        return 1
    work = _work(body_jaxpr.jaxpr) + _work(cond_jaxpr.jaxpr)
    return max(1, min(MAX_UNROLL, WORK_PER_ITERATION // max(work, 1)))


def _all_vars(jaxpr: core.Jaxpr):
    yield from jaxpr.invars
    for eqn in jaxpr.eqns:
        yield from eqn.outvars
        for sub in core.jaxprs_in_params(eqn.params):
            yield from _all_vars(sub)


def _indexes_at_computed_position(jaxpr: core.Jaxpr) -> bool:
    """Whether `jaxpr` has a `DYNAMIC_INDEXING` op whose position is not a literal."""
    for eqn in jaxpr.eqns:
        first_index = 2 if eqn.primitive.name == "dynamic_update_slice" else 1
        if eqn.primitive.name in DYNAMIC_INDEXING and not all(
                isinstance(v, core.Literal) for v in eqn.invars[first_index:]):
            return True
        if any(map(_indexes_at_computed_position, core.jaxprs_in_params(eqn.params))):
            return True
    return False


def _nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


def _work(jaxpr: core.Jaxpr) -> int:
    """Elements produced by `jaxpr`'s equations (a dot counts its multiply-adds);
    a nested loop counts as a full iteration's budget."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive is functional_while_p:
            return WORK_PER_ITERATION
        subs = list(core.jaxprs_in_params(eqn.params))
        if subs:
            total += sum(map(_work, subs))
            continue
        out = sum(int(np.prod(v.aval.shape, dtype=np.int64)) for v in eqn.outvars)
        if eqn.primitive.name == "dynamic_update_slice":  # in place: the update's size
            out = int(np.prod(eqn.invars[1].aval.shape, dtype=np.int64))
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            out *= int(np.prod([lhs_shape[d] for d in contract], dtype=np.int64))
        total += out
    return total


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
    del static_bound, accumulators, checkpoints
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    name_stack = ctx.name_stack.extend(name)
    k = unroll_factor(cond_jaxpr, body_jaxpr, unroll)
    i32 = mlir.aval_to_ir_type(ctx.module_context, core.ShapedArray((), np.int32))
    i1 = mlir.aval_to_ir_type(ctx.module_context, core.ShapedArray((), np.bool_))

    def const(value):
        return mlir.ir_constant(np.int32(value))

    def predicate(i, xs):
        in_bound = hlo.compare(i, bound, hlo.ComparisonDirectionAttr.get("LT"),
                               compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        (pred,) = _subcomp(ctx, cond_jaxpr, name_stack.extend("cond"), *cond_consts, i, *xs)
        return hlo.and_(in_bound, pred)

    def step(i, xs):
        return _subcomp(ctx, body_jaxpr, name_stack.extend("body"), *body_consts, i, *xs)

    # Carried: (i, [pred, steps], *carry). With k > 1, i advances by k (so row
    # indices stay host-computable) and `steps` counts the steps the last
    # iteration took; the loop only goes on after an iteration of k steps.
    rotated = k > 1 or _reads_carry(cond_jaxpr, cond_nconsts)
    extra_types = ([i1] if rotated else []) + ([i32] if k > 1 else [])
    types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    loop_types = [types[0], *extra_types, *types[1:]]
    extra_init = ([predicate(const(0), carry)] if rotated else []) + (
        [const(k)] if k > 1 else [])
    while_op = hlo.WhileOp(loop_types, [const(0), *extra_init, *carry])
    while_op.attributes[ROLE_ATTR] = ir.StringAttr.get(role)
    while_op.attributes[NAME_ATTR] = ir.StringAttr.get(name)
    while_op.attributes[UNROLL_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), k)

    cond_block = while_op.regions[0].blocks.append(*loop_types)
    with ir.InsertionPoint(cond_block):
        i, *xs = cond_block.arguments
        hlo.return_([xs[0] if rotated else predicate(i, xs)])

    body_block = while_op.regions[1].blocks.append(*loop_types)
    with ir.InsertionPoint(body_block):
        i, *xs = body_block.arguments
        old_xs = xs = xs[len(extra_types):]
        xs = step(i, xs)
        steps = const(1)
        for s in range(1, k):
            index = hlo.add(i, const(s))
            active = predicate(index, xs)
            new = step(index, xs)
            xs = [hlo.select(_broadcast(active, n.type), n, x) for n, x in zip(new, xs)]
            steps = hlo.add(steps, hlo.convert(i32, active))
        xs = _read_every_carry(body_jaxpr, body_nconsts, i, old_xs, xs)
        new_i = hlo.add(i, const(k))
        extra = []
        if rotated:
            pred = predicate(new_i, xs)
            if k > 1:
                full = hlo.compare(steps, const(k), hlo.ComparisonDirectionAttr.get("EQ"),
                                   compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
                pred = hlo.and_(pred, full)
            extra.append(pred)
        if k > 1:
            extra.append(steps)
        hlo.return_([new_i, *extra, *xs])
    i, *results = while_op.results
    if k > 1:
        i = hlo.add(hlo.subtract(i, const(k)), results[1])
    return [i, *results[len(extra_types):]]


def _broadcast(pred, like_type):
    """A scalar i1 broadcast to `like_type`'s shape: an elementwise select fuses into
    the step's dispatch, where IREE turns a scalar-predicate select of tensors into
    a branch that reads the predicate back to the host."""
    shape = ir.RankedTensorType(like_type).shape
    if not shape:
        return pred
    i1 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(1))
    return hlo.broadcast_in_dim(i1, pred, ir.DenseI64ArrayAttr.get([]))


def _reads_carry(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads the carry (not only the counter and its constants)."""
    _, used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    return any(used[cond_nconsts + 1:])


def _read_every_carry(body_jaxpr, body_nconsts, i, xs, new_xs):
    """Make the emitted body read each carry that `body` overwrites without reading:
    `new if opaque_i >= 0 else old`, with the loop counter `i` (never negative)
    hidden from folding by an optimization barrier.

    IREE 3.13 crashes (ScfWhileOpConversion) on a loop that produces a carry the
    body never reads, once the cond tests it (e.g. a residual norm recomputed
    from scratch every step). The barrier must not hold a constant: IREE 3.13
    packs the loop's constant initial values into one allocation, and a barrier
    on one of them inside the loop makes it bind one buffer to several loop
    results, a module that fails on every call (bench/iree_limits/
    barrier_on_constant_init.mlir)."""
    _, used = pe.dce_jaxpr(body_jaxpr.jaxpr, [True] * len(body_jaxpr.out_avals))
    unread = [not u for u in used[body_nconsts + 1:]]
    if not any(unread):
        return new_xs
    (opaque,) = hlo.OptimizationBarrierOp([i]).results
    keep_new = hlo.compare(opaque, mlir.ir_constant(np.int32(0)),
                           hlo.ComparisonDirectionAttr.get("GE"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
    return [hlo.select(_broadcast(keep_new, new.type), new, old) if u else new
            for u, new, old in zip(unread, new_xs, xs)]


def _uninitialized_lowering(ctx, *, shape, dtype):
    """Zeros, tagged so that the IREE preparation can make them `tensor.empty`."""
    (aval,) = ctx.avals_out
    out = mlir.broadcast_in_dim(ctx, mlir.ir_constant(np.zeros((), dtype)), aval,
                                broadcast_dimensions=[])
    out.owner.attributes[UNINITIALIZED_ATTR] = ir.UnitAttr.get()
    return [out]


mlir.register_lowering(functional_while_p, _functional_while_lowering)
mlir.register_lowering(uninitialized_p, _uninitialized_lowering)
mlir.register_lowering(linear_while_p,
                       mlir.lower_fun(expand_linear_while, multiple_results=True))
mlir.register_lowering(checkpointed_linear_while_p,
                       mlir.lower_fun(expand_checkpointed_linear_while, multiple_results=True))
