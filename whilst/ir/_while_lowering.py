"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The op gets two discardable attributes: `whilst.role` ("forward" | "gradient" |
"linear") and `whilst.name`. Constants are captured from the enclosing region
rather than carried, so stacks read by a gradient While are never loop-carried
buffers.

Each `stablehlo.while` iteration runs up to k loop steps (unrolling), which
amortises IREE's per-iteration host cost (about 2 us). With k steps the emitted
loop is, as plain Python::

    i, count, go = 0, 0, 0 < bound and cond(0, x)
    while go:
        x = body(i, x); steps = 1           # the step the loop test admitted
        for s in range(1, k):               # predicated steps, no branches
            p = i + s < bound and cond(i + s, x)
            x = body(i + s, x) if p else x  # an elementwise `select`
            steps += p
        i += k
        count += steps
        go = steps == k and i < bound and cond(i, x)
    return count, x

so the counter, the carry and the gradients are those of k = 1 for every trip
count, and the index a step sees is `i + s`, computed from the carried `i`
without reading anything back from the device. k comes from `unroll_factor`;
an exported body's reads and writes of small arrays at computed positions
become one-hot selects first (`_onehot.py`), so that such bodies unroll too.
(`count` is carried, and read by the body, rather than recomputed from the
last iteration's `steps`: iree-compile 3.13 crashes (ScfWhileOpConversion)
when a result the body overwrites without reading is used after the loop.)

Residual stacks (`whilst.ir._stacks`) move k rows per iteration: the rows the
k steps push are concatenated into one `[k, *row]` chunk written with one
`dynamic_update_slice` at `row_offset + i`, and the rows they pop are static
slices of one chunk read at `top - i - (k-1)`. Rows of inactive steps land past
the loop's last row, where nothing reads them. Rows of symbolic shape move one
by one, in the forms of `_symbolic_indexing.py` (a scatter or gather each).

A cond that reads the carry is evaluated at the end of the body and carried as
a boolean (the cond region only returns it; see VULKAN_BOOLEANS): IREE 3.13 crashes
(ScfWhileOpConversion) on loops whose cond region reads a value the body
computed from a tensor, the usual shape of convergence tests. Loops whose cond
reads only the counter (gradient Whiles, bounds) keep the plain shape.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np
from jax.core import ShapedArray
from jax.extend.core import ClosedJaxpr, Literal
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir, partial_eval as pe

from whilst._jax_compat import (
    dynamic_slice, dynamic_update_slice, ir_consts, reshape, slice_op, split_list)
from whilst.ir._export_forms import export_forms
from whilst.ir._buffers import uninitialized_value
from whilst.ir._functional_while import functional_while_p, split_operands
from whilst.ir._onehot import onehot_indexing
from whilst.ir._stacks import pushed_rows, split_pops
from whilst.ir._symbolic_indexing import has_symbolic_rows, read_row, write_row
from whilst.ir._tracing import COUNTER_AVAL
from whilst.ir._unroll import unroll_factor, unrolled_scans

ROLE_ATTR = "whilst.role"
NAME_ATTR = "whilst.name"
UNROLL_ATTR = "whilst.unroll"
# Exports for Vulkan carry the booleans of their loops (the loop test, boolean
# carries, residual stacks of booleans) as int32 0 or 1: with loop-carried i1
# tensors the SPIR-V code of IREE 3.13 reads wrong values (loops stopped after 0-2
# steps whatever their data; the LSTM sample's boolean residuals came back wrong),
# and int8 storage fails too (bench/iree_limits/carried_booleans.py). Other
# exports keep i1, the form all other targets were tested with: when every export
# carried an int32 loop test (commit 1c4c2ff), IREE 3.13's llvm-cpu module of a
# gradient of a gradient through a loop past its memory budget failed at run time
# ("indirect buffer reference slot 0 is out range"; tests/test_iree.py
# test_grad_of_grad_of_a_loop_without_bound_runs). The final code's int32 storage
# runs that program right; what set the failure off was not pinned down. Stacks
# of booleans take 4 bytes per element in Vulkan exports; `gradient_memory`
# counts 1.
VULKAN_BOOLEANS = np.int32
_carried_booleans = contextvars.ContextVar("whilst_carried_booleans", default=np.bool_)


@contextlib.contextmanager
def booleans_carried_as(dtype):
    """Within the block, exported loops carry their booleans as `dtype`."""
    token = _carried_booleans.set(dtype)
    try:
        yield
    finally:
        _carried_booleans.reset(token)


def _subcomp(ctx, jaxpr: ClosedJaxpr, name_stack, *args):
    outs, _ = mlir.jaxpr_subcomp(
        ctx.module_context, jaxpr.jaxpr, name_stack, mlir.TokenSet(),
        ir_consts(jaxpr.consts, [v.aval for v in jaxpr.jaxpr.constvars]),
        *args, dim_var_values=ctx.dim_var_values, const_lowering=ctx.const_lowering,
        outer_traceback=ctx.traceback)
    return outs


def _functional_while_lowering(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts,
                               body_nconsts, static_bound, name, role, unroll, checkpoints,
                               gradient_memory, accumulators, stack_rows, row_offset, pops,
                               pop_pad):
    del checkpoints, gradient_memory  # reverse mode's, chosen before lowering
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    consts, top, popped = split_pops(body_consts, pops)
    ncarry = len(carry)
    name_stack = ctx.name_stack.extend(name)
    cond_jaxpr, body_jaxpr, k = _unrolled(ctx, cond_jaxpr, body_jaxpr, unroll)
    if pops:
        k = min(k, pop_pad + 1)  # chunk reads must not start below row 0
    while accumulators and pushed_rows(static_bound, k, row_offset) > stack_rows:
        k -= 1  # the last chunk of pushes must fit the stacks, and be less than them
    i32 = mlir.aval_to_ir_type(ctx.module_context, ShapedArray((), np.int32))
    carry_avals, stack_avals = split_list(ctx.avals_out[1:], [ncarry])
    pop_avals = ctx.avals_in[cond_nconsts + body_nconsts - pops:][:pops]

    def const(value):
        return mlir.ir_constant(np.int32(value))

    def predicate(i, xs):
        in_bound = hlo.compare(i, bound, hlo.ComparisonDirectionAttr.get("LT"),
                               compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        (pred,) = _subcomp(ctx, cond_jaxpr, name_stack.extend("cond"), *cond_consts, i, *xs)
        return hlo.and_(in_bound, pred)

    def step(i, xs, rows_in):
        outs = _subcomp(ctx, body_jaxpr, name_stack.extend("body"), *consts, *rows_in, i, *xs)
        return outs[:ncarry], outs[ncarry:]

    # Carried: (i, [pred, count], *carry, *stacks). With k > 1, i advances by k (so
    # row indices stay host-computable) and `count` counts the steps taken; the
    # loop only goes on after an iteration of k steps. A loop bounded only by its
    # trip count (cond always true: gradient and linear Whiles) needs neither:
    # `i < bound` is tested in the cond region and the counter is min(i, bound).
    counted = _always_true(cond_jaxpr)
    rotated = not counted and (k > 1 or _reads_carry(cond_jaxpr, cond_nconsts))
    count_carried = k > 1 and not counted
    storage = (_carried_booleans.get() if ctx.module_context.lowering_parameters.for_export
               else np.bool_)
    stacks0 = [uninitialized_value(ctx, _stored(a, storage)) for a in stack_avals]
    pred_aval = ShapedArray((), np.bool_)
    pred_type = mlir.aval_to_ir_type(ctx.module_context, _stored(pred_aval, storage))
    extra_types = ([pred_type] if rotated else []) + ([i32] if count_carried else [])
    loop_types = [i32, *extra_types, *(mlir.aval_to_ir_type(ctx.module_context,
                                                            _stored(a, storage))
                                       for a in ctx.avals_out[1:])]
    extra_init = (_to_storage(ctx, [predicate(const(0), carry)], [pred_aval], storage)
                  if rotated else []) + (
        [const(0)] if count_carried else [])
    while_op = hlo.WhileOp(loop_types, [const(0), *extra_init,
                                        *_to_storage(ctx, carry, carry_avals, storage),
                                        *stacks0])
    while_op.attributes[ROLE_ATTR] = ir.StringAttr.get(role)
    while_op.attributes[NAME_ATTR] = ir.StringAttr.get(name)
    while_op.attributes[UNROLL_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), k)

    cond_block = while_op.regions[0].blocks.append(*loop_types)
    with ir.InsertionPoint(cond_block):
        i, *xs = cond_block.arguments
        hlo.return_([_from_storage(ctx, xs[:1], [pred_aval], storage)[0] if rotated
                     else predicate(i, _from_storage(ctx, xs[:ncarry], carry_avals, storage))])

    body_block = while_op.regions[1].blocks.append(*loop_types)
    with ir.InsertionPoint(body_block):
        i, *xs = body_block.arguments
        xs, stacks = split_list(xs[len(extra_types):], [ncarry])
        xs = old_xs = _from_storage(ctx, xs, carry_avals, storage)
        # Popped rows top - i - s for s in range(k): one chunk, read backwards.
        start = hlo.subtract(top, hlo.add(i, const(k - 1))) if pops else None
        popped_rows = [_read_rows(ctx, p, a, start, k) for p, a in zip(popped, pop_avals)]

        def rows_in(s):
            return [rows[k - 1 - s] for rows in popped_rows]
        xs, rows = step(i, xs, rows_in(0))
        pushed = [[r] for r in rows]
        steps = const(1)
        for s in range(1, k):
            index = hlo.add(i, const(s))
            active = predicate(index, xs)
            new, rows = step(index, xs, rows_in(s))
            xs = [hlo.select(_broadcast(active, n.type), n, x) for n, x in zip(new, xs)]
            for chunk, r in zip(pushed, rows):
                chunk.append(r)
            if count_carried:
                steps = hlo.add(steps, hlo.convert(i32, active))
        xs = _read_every_carry(body_jaxpr, len(consts) + pops, i, old_xs, xs)
        at = hlo.add(i, const(row_offset))
        stacks = [_write_rows(ctx, st, _stored(a, storage),
                              _to_storage(ctx, rs, [a.update(shape=a.shape[1:])] * len(rs),
                                          storage), at)
                  for st, a, rs in zip(stacks, stack_avals, pushed)]
        new_i = hlo.add(i, const(k))
        extra = []
        if rotated:
            # AND-ed with the carried predicate (true whenever the body runs), so
            # that the body reads it: otherwise IREE 3.13's stream conversion fails
            # on the loop ("'scf.while' op ... region branch point has 6 operands,
            # but region successor needs 8 inputs") unless its loop-invariant code
            # motion happens to find code to hoist out of the body
            # (bench/iree_limits/unread_loop_predicate.mlir).
            carried, = _from_storage(ctx, body_block.arguments[1:2], [pred_aval], storage)
            pred = hlo.and_(predicate(new_i, xs), carried)
            if k > 1:
                full = hlo.compare(steps, const(k), hlo.ComparisonDirectionAttr.get("EQ"),
                                   compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
                pred = hlo.and_(pred, full)
            extra.extend(_to_storage(ctx, [pred], [pred_aval], storage))
        if count_carried:
            extra.append(hlo.add(body_block.arguments[len(extra_types)], steps))
        hlo.return_([new_i, *extra, *_to_storage(ctx, xs, carry_avals, storage), *stacks])
    i, *results = while_op.results
    if count_carried:
        i = results[len(extra_types) - 1]
    elif k > 1:
        i = hlo.minimum(i, bound)
    return [i, *_from_storage(ctx, results[len(extra_types):], ctx.avals_out[1:], storage)]


def _stored(aval, storage):
    """The aval a `stablehlo.while` carries for `aval`: booleans as `storage`."""
    return aval.update(dtype=storage) if aval.dtype == np.bool_ else aval


def _to_storage(ctx, values, avals, storage):
    """`values` (of `avals`) as the loop carries them: booleans converted to
    `storage` (0 or 1)."""
    return [hlo.convert(mlir.aval_to_ir_type(ctx.module_context, _stored(a, storage)), v)
            if a.dtype == np.bool_ and storage != np.bool_ else v
            for v, a in zip(values, avals)]


def _from_storage(ctx, values, avals, storage):
    """Inverse of `_to_storage`: `stored != 0` for booleans."""
    return [hlo.convert(mlir.aval_to_ir_type(ctx.module_context, a), v)
            if a.dtype == np.bool_ and storage != np.bool_ else v
            for v, a in zip(values, avals)]


def _unrolled(ctx, cond_jaxpr, body_jaxpr, unroll):
    """`(cond_jaxpr, body_jaxpr, k)`: k loop steps per emitted iteration, `unroll`
    if given; otherwise automatic when exporting (for IREE, which pays per
    iteration, `exported_loop_forms`) and 1 under `jax.jit` (XLA gains little
    and compiles longer)."""
    if not ctx.module_context.lowering_parameters.for_export:
        return cond_jaxpr, body_jaxpr, 1 if unroll is None else unroll
    return exported_loop_forms(cond_jaxpr, body_jaxpr, unroll)


def exported_loop_forms(cond_jaxpr, body_jaxpr, unroll):
    """`(cond_jaxpr, body_jaxpr, k)` as an exported loop emits them: the bodies
    with their `lax.scan`s unrolled (`unrolled_scans`), in the forms IREE 3.13
    compiles and runs as XLA does (`export_forms`), and k = `unroll_factor`; those
    that run k > 1 steps read and write small arrays at computed positions by
    one-hot selects (`_onehot.py`), which IREE 3.13 compiles unrolled."""
    cond_jaxpr, body_jaxpr = (export_forms(unrolled_scans(j)) for j in (cond_jaxpr, body_jaxpr))
    k = unroll_factor(cond_jaxpr, body_jaxpr, unroll)
    if k == 1:
        return cond_jaxpr, body_jaxpr, 1
    return onehot_indexing(cond_jaxpr), onehot_indexing(body_jaxpr), k


def _row_start(ctx, row, ndim):
    zero = mlir.ir_constant(np.int32(0))
    return [row, *[zero] * (ndim - 1)]


def _read_rows(ctx, stack, stack_aval, start, k):
    """`[stack[start + s] for s in range(k)]`: static slices of one k-row
    `dynamic_slice`, or one gather per row for rows of symbolic shape."""
    row_aval = stack_aval.update(shape=stack_aval.shape[1:])
    if has_symbolic_rows(stack_aval.shape):
        read = mlir.lower_fun(read_row, multiple_results=False)
        rows_ctx = ctx.replace(avals_in=[stack_aval, COUNTER_AVAL], avals_out=[row_aval])
        return [read(rows_ctx, stack, hlo.add(start, mlir.ir_constant(np.int32(s))))[0]
                for s in range(k)]
    chunk_aval = stack_aval.update(shape=(k, *stack_aval.shape[1:]))
    chunk = dynamic_slice(ctx, chunk_aval, stack,
                          start_indices=_row_start(ctx, start, stack_aval.ndim))
    one_aval = stack_aval.update(shape=(1, *stack_aval.shape[1:]))
    zeros = [0] * (stack_aval.ndim - 1)
    return [reshape(ctx, slice_op(ctx, chunk, one_aval, start_indices=[s, *zeros],
                                  limit_indices=[s + 1, *stack_aval.shape[1:]],
                                  strides=[1] * stack_aval.ndim), row_aval)
            for s in range(k)]


def _write_rows(ctx, stack, stack_aval, rows, at):
    """`stack[at:at + len(rows)] = rows`: one `dynamic_update_slice`, or one scatter
    per row for rows of symbolic shape."""
    row_aval = stack_aval.update(shape=stack_aval.shape[1:])
    if has_symbolic_rows(stack_aval.shape):
        write = mlir.lower_fun(write_row, multiple_results=False)
        rows_ctx = ctx.replace(avals_in=[stack_aval, COUNTER_AVAL, row_aval],
                               avals_out=[stack_aval])
        for s, r in enumerate(rows):
            (stack,) = write(rows_ctx, stack, hlo.add(at, mlir.ir_constant(np.int32(s))), r)
        return stack
    one_aval = stack_aval.update(shape=(1, *stack_aval.shape[1:]))
    rows = [reshape(ctx, r, one_aval) for r in rows]
    chunk = rows[0] if len(rows) == 1 else hlo.concatenate(rows, 0)
    return dynamic_update_slice(ctx, stack_aval, stack, chunk,
                                start_indices=_row_start(ctx, at, stack_aval.ndim))


def _broadcast(pred, like_type):
    """A scalar i1 broadcast to `like_type`'s shape: an elementwise select fuses into
    the step's dispatch, where IREE turns a scalar-predicate select of tensors into
    a branch that reads the predicate back to the host."""
    shape = ir.RankedTensorType(like_type).shape
    if not shape:
        return pred
    i1 = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(1))
    return hlo.broadcast_in_dim(i1, pred, ir.DenseI64ArrayAttr.get([]))


def _always_true(cond_jaxpr) -> bool:
    """Whether cond returns the literal True (loops bounded by their trip count)."""
    (out,) = cond_jaxpr.jaxpr.outvars
    return isinstance(out, Literal) and bool(out.val)


def _reads_carry(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads the carry (not only the counter and its constants)."""
    _, used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    return any(used[cond_nconsts + 1:])


def _read_every_carry(body_jaxpr, n_inputs_before_counter, i, xs, new_xs):
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
    unread = [not u for u in used[n_inputs_before_counter + 1:]]
    if not any(unread):
        return new_xs
    (opaque,) = hlo.OptimizationBarrierOp([i]).results
    keep_new = hlo.compare(opaque, mlir.ir_constant(np.int32(0)),
                           hlo.ComparisonDirectionAttr.get("GE"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
    return [hlo.select(_broadcast(keep_new, new.type), new, old) if u else new
            for u, new, old in zip(unread, new_xs, xs)]


mlir.register_lowering(functional_while_p, _functional_while_lowering)
