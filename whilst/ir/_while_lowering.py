"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The op gets two discardable attributes: `whilst.role` ("forward" | "gradient" |
"linear") and `whilst.name`. Constants are captured from the enclosing region
rather than carried, so stacks read by a gradient While are never loop-carried
buffers.

Each `stablehlo.while` iteration runs up to k loop steps (unrolling), which
amortises IREE's per-iteration host cost (about 2 us). Loops run their k steps
**unpredicated** where they can: a select between steps would keep IREE from
fusing them (sin 10k steps: 23 dispatches per iteration, against 10).

A **counted** loop (its test is the trip count: gradient and linear Whiles, and
loops tested `i < n` on a counter stepped by 1, which `_trip_count.py` bounds by
their trip count) runs its full iterations and then its last steps; IREE 3.13
keeps the counter of a loop tested `i < bound` on the host, so such a loop reads
nothing back. As plain Python::

    i = 0
    while i < bound - (k - 1):              # the steps all run: they fuse
        for s in range(k):
            x = body(i + s, x)
        i += k
    xs = [x] + [x := body(i + s, x) for s in range(k)]  # fewer than k steps left
    steps = bound - i
    return bound, xs[steps]                 # a one-hot pick, bit for bit

A loop whose test reads at most one scalar of the carry (`err > tol`) and that
pops no residual rows runs on: an iteration that runs past the loop's end is
undone, and the steps left after the last full iteration run once after the
loop, unpredicated too, keeping the carry after those that pass::

    i, count, go = 0, 0, 0 < bound and cond(0, x)
    while go:
        x0 = x
        for s in range(k):                  # no test between steps: they fuse
            x = body(i + s, x)
        full = all(i + s < bound and cond(i + s, x_s) for s in range(1, k))
        go = full and i + k < bound and cond(i + k, x)
        if not full:                        # an elementwise `select`
            x = x0
        count += k if full else 0
        i += k
    i = count                               # fewer than k steps left:
    xs = [x] + [x := body(i + s, x) for s in range(k)]  # unpredicated again
    steps = min([s for s in range(k) if not (i + s < bound and cond(i + s, xs[s]))] + [k])
    return count + steps, xs[steps]         # a one-hot pick, bit for bit

where `x_s` is the carry step `i + s` sees; the tests of `full` and of the last
steps each run as one test vectorized over the steps (`_passes`). A loop of
either form that would pick among k + 1 scalars (a scalar carry other than a
counter, whose value after s steps is computed instead) runs its last steps
predicated, in fenced groups (EPILOGUE_GROUP_CARRIES); a counted one predicates
every step, as the loops below do. Other loops (loops that pop rows and are not
counted; tests that read more of the carry, not yet measured unpredicated)
predicate every step after the first::

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

Every form gives the counter, the carry and the gradients of k = 1 for every
trip count, and the index a step sees is `i + s`, computed from the
carried `i` without reading anything back from the device. k comes from
`unroll_factor`; an exported body's reads and writes of small arrays at
computed positions become one-hot selects first (`_onehot.py`), so that such
bodies unroll too. (`count` is carried, and read by the body, rather than
recomputed after the loop: iree-compile 3.13 crashes (ScfWhileOpConversion)
when a result the body overwrites without reading is used after the loop. A
counted loop needs neither `count` nor `go`: its test is on i and the bound,
in the cond region, and its counter min(i, bound) or the bound.)

Residual stacks (`whilst.ir._stacks`) move k rows per iteration: the rows the
k steps push are concatenated into one `[k, *row]` chunk written at
`row_offset + i` with one `dynamic_update_slice` (counted loops, whose `i`
IREE keeps on the host) or one scatter of k rows (other loops: IREE would read
`i` back for the `dynamic_update_slice`), and the rows they pop are static
slices of one chunk read at `bound - 1 + pop_pad - i - (k-1)`. Rows of inactive steps land past
the loop's last row, where nothing reads them; the last steps' chunk is written
only if one of them runs (it may start past the stacks' end). Rows of symbolic
shape move one by one, in the forms of `_symbolic_indexing.py` (a scatter or
gather each).

A cond that reads the carry is evaluated at the end of the body and carried as
a boolean (the cond region only returns it; see VULKAN_BOOLEANS): IREE 3.13 crashes
(ScfWhileOpConversion) on loops whose cond region reads a value the body
computed from a tensor, the usual shape of convergence tests. Loops whose cond
reads only the counter (gradient Whiles, bounds) keep the plain shape.
"""
from __future__ import annotations

import contextlib
import contextvars
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import ClosedJaxpr, Literal
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir, partial_eval as pe

from whilst._jax_compat import (
    dynamic_slice, dynamic_update_slice, ir_consts, reshape, slice_op, split_list)
from whilst.ir._device_indexing import device_indexing, scatter_rows
from whilst.ir._export_forms import export_forms
from whilst.ir._buffers import uninitialized_values
from whilst.ir._functional_while import functional_while_p, split_operands
from whilst.ir._onehot import onehot_indexing, pick, selectable
from whilst.ir._stacks import pushed_rows, split_pops
from whilst.ir._symbolic_indexing import has_symbolic_rows, read_row, write_row
from whilst.ir._tracing import COUNTER_AVAL, always_true, call, trace_closed
from whilst.ir._trip_count import counter_trips, integer_strides
from whilst.ir._unroll import unroll_factor, unrolled_scans

ROLE_ATTR = "whilst.role"
NAME_ATTR = "whilst.name"
UNROLL_ATTR = "whilst.unroll"
# Predicated steps after the loop are fenced off in groups of at most this many
# carries (steps times carries): IREE 3.13 fuses a longer chain into one dispatch
# with a result per step and carry, past the 32 bindings its runtime accepts
# (iree_limits/wide_scalar_dispatch.mlir).
EPILOGUE_GROUP_CARRIES = 16
# Exports for Vulkan carry the booleans of their loops (the loop test, boolean
# carries, residual stacks of booleans) as int32 0 or 1: with loop-carried i1
# tensors the SPIR-V code of IREE 3.13 reads wrong values (loops stopped after 0-2
# steps whatever their data; the LSTM sample's boolean residuals came back wrong),
# and int8 storage fails too (iree_limits/carried_booleans.py). Other
# exports keep i1, the form all other targets were tested with: when every export
# carried an int32 loop test (commit 1c4c2ff), IREE 3.13's llvm-cpu module of a
# gradient of a gradient through a loop past its memory budget failed at run time
# ("indirect buffer reference slot 0 is out range"; tests/iree/test_iree.py
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
    consts, popped = split_pops(body_consts, pops)
    ncarry = len(carry)
    name_stack = ctx.name_stack.extend(name)
    cond_jaxpr, body_jaxpr, forms_k = _unrolled(ctx, cond_jaxpr, body_jaxpr, unroll)
    k = forms_k  # the forms are chosen for forms_k steps; k may be lowered below
    if static_bound is not None:
        k = max(1, min(k, static_bound))  # more steps than the loop may take never run
    if pops:
        k = min(k, pop_pad + 1)  # chunk reads must not start below row 0
    while accumulators and pushed_rows(static_bound, k, row_offset) > stack_rows:
        k -= 1  # the last chunk of pushes must fit the stacks, and be less than them
    i32 = mlir.aval_to_ir_type(ctx.module_context, ShapedArray((), np.int32))
    carry_avals, stack_avals = split_list(ctx.avals_out[1:], [ncarry])
    pop_avals = ctx.avals_in[cond_nconsts + body_nconsts - pops:][:pops]

    def const(value):
        return mlir.ir_constant(np.int32(value))

    counted = _always_true(cond_jaxpr)
    trips = None if counted or pops else counter_trips(cond_jaxpr, cond_nconsts, body_jaxpr,
                                                         len(consts))
    if trips is not None:  # `i < n` on a stepped counter: bounded by its trip count
        (steps_to_go,) = _subcomp(ctx, trips, name_stack.extend("trips"), *cond_consts, *carry)
        bound, counted = hlo.minimum(bound, steps_to_go), True
    if ctx.module_context.lowering_parameters.for_export:
        cond_jaxpr, body_jaxpr = _indexing_forms(cond_jaxpr, body_jaxpr, forms_k,
                                                 body_nconsts if counted else None)

    def predicate(i, xs):
        in_bound = _less(i, bound)
        if counted:
            return in_bound
        (pred,) = _subcomp(ctx, cond_jaxpr, name_stack.extend("cond"), *cond_consts, i, *xs)
        return hlo.and_(in_bound, pred)

    def counted_tests(i):
        """`i + arange(k) < bound`, one vector compare (IREE 3.13 computes the
        k scalar tests of a counted loop on the host and fills a buffer with each)."""
        vec = ir.RankedTensorType.get([k], ir.IntegerType.get_signless(32))
        offsets = mlir.ir_constant(np.arange(k, dtype=np.int32))
        at = hlo.add(hlo.broadcast_in_dim(vec, i, []), offsets)
        return hlo.compare(at, hlo.broadcast_in_dim(vec, bound, []),
                           hlo.ComparisonDirectionAttr.get("LT"),
                           compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))

    def step(i, xs, rows_in):
        outs = _subcomp(ctx, body_jaxpr, name_stack.extend("body"), *consts, *rows_in, i, *xs)
        return outs[:ncarry], outs[ncarry:]

    def steps(i, xs, popped_rows, first_predicated, fenced=False):
        """k steps from step `i`, those from `first_predicated` on predicated on their
        own test: `(xs, pushed chunks, steps taken (i32), seen)`, where `seen[s]` is
        the carry step i + s sees (s = 0 .. k; unpredicated steps only). `fenced`:
        in groups of EPILOGUE_GROUP_CARRIES carries."""
        pushed = [[] for _ in stack_avals]
        taken, seen = const(min(first_predicated, k)), [xs]
        group = max(1, EPILOGUE_GROUP_CARRIES // (ncarry + 1))
        lanes = counted_tests(i) if counted and k > 1 else None
        for s in range(k):
            index = i if s == 0 else hlo.add(i, const(s))
            rows_in = [rows[k - 1 - s] for rows in popped_rows]
            if s >= first_predicated:
                active = (predicate(index, xs) if lanes is None else
                          hlo.reshape(ir.RankedTensorType.get([], ir.IntegerType.get_signless(1)),
                                      hlo.slice(lanes, [s], [s + 1], [1])))
                new, rows = step(index, xs, rows_in)
                xs = [hlo.select(_broadcast(active, n.type), n, x) for n, x in zip(new, xs)]
                taken = hlo.add(taken, hlo.convert(i32, active))
            else:
                xs, rows = step(index, xs, rows_in)
                seen.append(xs)
            for chunk, r in zip(pushed, rows):
                chunk.append(r)
            if fenced and s % group == group - 1 < k - 1:
                xs = list(hlo.OptimizationBarrierOp([*xs, taken]).results)
                xs, taken = xs[:-1], xs[-1]
        return xs, pushed, taken, seen

    def read_popped(i):
        """The k rows of each popped stack that steps i .. i + k - 1 pop
        (bound - 1 + pop_pad - i - s), at a position computed from the loop's
        bound (`loop_bound`: IREE 3.13 reads other values back every iteration)."""
        if not pops:
            return []
        start = (hlo.add(hlo.subtract(loop_bound, i), const(pop_pad - 1)) if exact else
                 hlo.add(hlo.subtract(bound, hlo.add(i, const(k - 1))), const(pop_pad - 1)))
        return [_read_rows(ctx, p, a, start, k) for p, a in zip(popped, pop_avals)]

    def write_pushed(stacks, pushed, i, guard=None):
        """`stacks` with the rows of steps i .. i + k - 1 written; with `guard`, the
        rows are written only where `guard` holds (else the rows there are kept).
        Within the loop of a loop with a test of its own, IREE 3.13 keeps `i` on the
        device: its rows are scattered (`_write_rows`; not rows of unsigned
        integers, whose scatters iree-compile 3.13 fails on,
        `iree_limits/unsigned_scatter.mlir`)."""
        at = hlo.add(i, const(row_offset))
        out = []
        for st, a, rs in zip(stacks, stack_avals, pushed):
            stored = _stored(a, storage)
            rows = _to_storage(ctx, rs, [a.update(shape=a.shape[1:])] * len(rs), storage)
            scatter = (guard is None and not counted
                       and not np.issubdtype(stored.dtype, np.unsignedinteger))
            out.append(_write_rows(ctx, st, stored, rows, at, guard, scatter))
        return out

    # Carried: (i, [pred, count], *carry, *stacks). With k > 1, i advances by k (so
    # row indices stay host-computable) and `count` counts the steps taken. A loop
    # bounded only by its trip count (cond always true: gradient and linear Whiles,
    # or a counter test turned into the bound) needs neither: its test is on i and
    # the bound, in the cond region.
    strides = integer_strides(body_jaxpr, len(consts) + pops)
    # Picking among k + 1 scalars makes IREE 3.13 fuse them all into one dispatch,
    # past its runtime's 32 bindings: such loops run their last steps predicated.
    picks_scalars = any(d is None and not a.shape for d, a in zip(strides, carry_avals))
    # Unpredicated steps (see the module docstring): a counted loop runs its full
    # iterations (test `i < bound - (k - 1)`) and then its last steps; other loops
    # whose test reads one scalar run on and undo the iteration that ran past the end.
    exact = k > 1 and counted and not picks_scalars
    speculative = k > 1 and not counted and not pops and _tests_one_scalar(cond_jaxpr,
                                                                            cond_nconsts)
    if speculative:
        all_pass = _all_pass(cond_jaxpr, cond_nconsts, k, strides)
    if exact or (speculative and not picks_scalars):
        last_steps = _last_steps(always_true(cond_jaxpr.in_avals) if exact else cond_jaxpr,
                                 cond_nconsts, k, strides)
    # (a traced maximum_iterations may be negative: no step runs, nothing wraps)
    loop_bound = (hlo.subtract(hlo.maximum(bound, const(0)), const(k - 1)) if exact
                  else bound)
    rotated = not counted and (k > 1 or _reads_carry(cond_jaxpr, cond_nconsts))
    count_carried = k > 1 and not counted
    storage = (_carried_booleans.get() if ctx.module_context.lowering_parameters.for_export
               else np.bool_)
    stacks0 = uninitialized_values(ctx, [_stored(a, storage) for a in stack_avals])
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
                     else _less(i, loop_bound) if exact
                     else predicate(i, _from_storage(ctx, xs[:ncarry], carry_avals, storage))])

    body_block = while_op.regions[1].blocks.append(*loop_types)
    with ir.InsertionPoint(body_block):
        i, *xs = body_block.arguments
        xs, stacks = split_list(xs[len(extra_types):], [ncarry])
        xs = old_xs = _from_storage(ctx, xs, carry_avals, storage)
        xs, pushed, taken, seen = steps(i, xs, read_popped(i),
                                        k if speculative or exact else 1)
        if speculative:
            all_active, = _subcomp(ctx, all_pass, name_stack.extend("cond"), *cond_consts, i,
                                   bound, *(x for xs_s in seen[1:k] for x in xs_s))
        xs = _read_every_carry(body_jaxpr, len(consts) + pops, i, old_xs, xs)
        new_i = hlo.add(i, const(k))
        if rotated:
            go_on = predicate(new_i, xs)
        if speculative:  # an iteration that ran past the loop's end is undone
            xs = [hlo.select(_broadcast(all_active, n.type), n, x) for n, x in zip(xs, old_xs)]
            taken = hlo.multiply(hlo.convert(i32, all_active), const(k))
        stacks = write_pushed(stacks, pushed, i)
        extra = []
        if rotated:
            # AND-ed with the carried predicate (true whenever the body runs), so
            # that the body reads it: otherwise IREE 3.13's stream conversion fails
            # on the loop ("'scf.while' op ... region branch point has 6 operands,
            # but region successor needs 8 inputs") unless its loop-invariant code
            # motion happens to find code to hoist out of the body
            # (iree_limits/unread_loop_predicate.mlir).
            carried, = _from_storage(ctx, body_block.arguments[1:2], [pred_aval], storage)
            pred = hlo.and_(go_on, carried)
            if k > 1:
                full = (all_active if speculative else
                        hlo.compare(taken, const(k), hlo.ComparisonDirectionAttr.get("EQ"),
                                    compare_type=hlo.ComparisonTypeAttr.get("SIGNED")))
                pred = hlo.and_(pred, full)
            extra.extend(_to_storage(ctx, [pred], [pred_aval], storage))
        if count_carried:
            extra.append(hlo.add(body_block.arguments[len(extra_types)], taken))
        hlo.return_([new_i, *extra, *_to_storage(ctx, xs, carry_avals, storage), *stacks])
    i, *results = while_op.results
    results, stacks = split_list(results[len(extra_types):], [ncarry])
    results = _from_storage(ctx, results, carry_avals, storage)
    if count_carried:
        i = while_op.results[len(extra_types)]
    if speculative or exact:
        # The steps after the last full iteration (fewer than k): predicated, or
        # unpredicated and then the carry after those that pass.
        if picks_scalars:
            results, pushed, taken, _ = steps(i, results, [], 0, fenced=True)
        else:
            _, pushed, _, seen = steps(i, results, read_popped(i), k)
            taken, *results = _subcomp(ctx, last_steps, name_stack.extend("cond"),
                                       *cond_consts, i, bound,
                                       *(x for xs_s in seen for x in xs_s))
        ran = hlo.compare(taken, const(0), hlo.ComparisonDirectionAttr.get("GT"),
                          compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
        stacks = write_pushed(stacks, pushed, i, guard=ran)
        i = hlo.add(i, taken)
    elif k > 1 and not count_carried:
        i = hlo.minimum(i, bound)
    return [i, *results, *_from_storage(ctx, stacks, stack_avals, storage)]


def _all_pass(cond_jaxpr, cond_nconsts, k, strides) -> ClosedJaxpr:
    """`all_pass(*cond_consts, i, bound, *xs_1, ..., *xs_(k-1))`: whether steps
    i + 1 .. i + k - 1 all pass the loop test, `xs_s` being the carry step i + s
    sees (`_passes`)."""
    nconsts, avals = cond_nconsts, cond_jaxpr.in_avals

    def all_pass(*args):
        consts, (i, bound), flat = split_list(args, [nconsts, 2])
        return [jnp.all(_passes(cond_jaxpr, consts, strides, i, bound, 1, k - 1, flat))]

    return trace_closed(all_pass, [*avals[:nconsts], COUNTER_AVAL, COUNTER_AVAL,
                                   *avals[nconsts + 1:] * (k - 1)], "all_pass")


def _last_steps(cond_jaxpr, cond_nconsts, k, strides) -> ClosedJaxpr:
    """`last_steps(*cond_consts, i, bound, *xs_0, ..., *xs_k) -> (steps, *x)`: how
    many of steps i .. i + k - 1 pass the loop test, each admitted by those before
    it (`_passes`; the first that fails, or k), and `x = xs_steps`, picked bit for
    bit by one-hot reductions over the k + 1 carries (`_pick_step`)."""
    nconsts, avals = cond_nconsts, cond_jaxpr.in_avals
    ncarry = len(avals) - nconsts - 1

    def last_steps(*args):
        consts, (i, bound), flat = split_list(args, [nconsts, 2])
        passes = _passes(cond_jaxpr, consts, strides, i, bound, 0, k, flat[:k * ncarry])
        s = jnp.arange(k, dtype=np.int32)
        # Fenced: with aggressive fusion, iree-compile 3.13 fuses the reduction into
        # one of its users and fails on the others ("operand #0 does not dominate
        # this use", iree_limits/reproduce.py aggressive_fusion_dominance).
        steps = lax.optimization_barrier(jnp.min(jnp.where(passes, np.int32(k), s)))
        per_step = [flat[s * ncarry:(s + 1) * ncarry] for s in range(k + 1)]
        return [steps, *(_pick_step(column, steps, d)
                         for d, column in zip(strides, zip(*per_step)))]

    return trace_closed(last_steps, [*avals[:nconsts], COUNTER_AVAL, COUNTER_AVAL,
                                     *avals[nconsts + 1:] * (k + 1)], "last_steps")


def _passes(cond_jaxpr, consts, strides, i, bound, first, m, flat):
    """`[i + s < bound and cond(i + s, xs_s) for s in first .. first + m - 1]` for
    the carries `flat = [*xs_first, ..., *xs_(first+m-1)]`. The test runs once,
    vectorized over the m steps (`jax.vmap`): one test per step costs IREE 3.13 a
    dozen small dispatches per emitted iteration. A read carry with an integer
    stride d (`integer_strides`) is tested at `xs_first + d * [0, ..., m - 1]`
    (in its dtype's wrapping arithmetic, as the steps compute it), not at the m
    scalars the steps computed: IREE 3.13 gives stacking those scalars several
    dispatches per emitted iteration (sin 10k steps: 10 dispatches per emitted
    iteration, against 1)."""
    read = _carries_read(cond_jaxpr, len(consts))
    ncarry = len(read)
    per_step = [flat[s * ncarry:(s + 1) * ncarry] for s in range(m)]
    # Carries the test does not read are passed once, unbatched.
    columns = [column[0] if not r else jnp.stack(column) if d is None else
               column[0] + _multiples(d, m, column[0].dtype)
               for r, d, column in zip(read, strides, zip(*per_step))]
    s = jnp.arange(first, first + m, dtype=np.int32)
    tests = jax.vmap(lambda index, *xs: call(cond_jaxpr, *consts, index, *xs)[0],
                     in_axes=(0, *(0 if r else None for r in read)))(i + s, *columns)
    return jnp.logical_and(s < bound - i, tests)


def _pick_step(column, steps, stride):
    """`column[steps]`, bit for bit: `column[0] + stride * steps` for a carry with
    an integer stride, else a one-hot reduction (`_onehot.pick`; a chain of
    selects where that takes no such dtype)."""
    if stride is not None:
        dtype = column[0].dtype
        return column[0] + steps.astype(dtype) * _multiples(stride, 2, dtype)[1]
    if not selectable(column[0].dtype):
        chosen = column[0]
        for s, x in enumerate(column[1:], 1):
            chosen = jnp.where(steps == s, x, chosen)
        return chosen
    stacked = lax.optimization_barrier(jnp.stack(column))
    return pick(stacked, lax.broadcasted_iota(np.int32, stacked.shape, 0) == steps, 0)[0]


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
    iteration, `exported_loop_forms` before its indexing forms) and 1 under
    `jax.jit` (XLA gains little and compiles longer)."""
    if not ctx.module_context.lowering_parameters.for_export:
        return cond_jaxpr, body_jaxpr, 1 if unroll is None else unroll
    return _loop_forms(cond_jaxpr, body_jaxpr, unroll)


def exported_loop_forms(cond_jaxpr, body_jaxpr, unroll):
    """`(cond_jaxpr, body_jaxpr, k)` as an exported loop emits them: the bodies
    with their `lax.scan`s unrolled (`unrolled_scans`), in the forms IREE 3.13
    compiles and runs as XLA does (`export_forms`), and k = `unroll_factor`; then
    their indexing forms (`_indexing_forms`)."""
    cond_jaxpr, body_jaxpr, k = _loop_forms(cond_jaxpr, body_jaxpr, unroll)
    return (*_indexing_forms(cond_jaxpr, body_jaxpr, k), k)


def _loop_forms(cond_jaxpr, body_jaxpr, unroll):
    cond_jaxpr, body_jaxpr = (export_forms(unrolled_scans(j)) for j in (cond_jaxpr, body_jaxpr))
    return cond_jaxpr, body_jaxpr, unroll_factor(cond_jaxpr, body_jaxpr, unroll)


def _indexing_forms(cond_jaxpr, body_jaxpr, k, counter=None):
    """Bodies that run k > 1 steps read and write small arrays at computed
    positions by one-hot selects (`_onehot.py`), which IREE 3.13 compiles
    unrolled; those that run one step read and write rows there by gathers and
    scatters (`_device_indexing.py`), which IREE 3.13 indexes without a
    readback, except at positions computed from the body's input `counter`
    (a counted loop's counter, which IREE keeps on the host)."""
    if k == 1:
        return (device_indexing(cond_jaxpr),
                device_indexing(body_jaxpr, () if counter is None else (counter,)))
    return onehot_indexing(cond_jaxpr), onehot_indexing(body_jaxpr)


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


def _write_rows(ctx, stack, stack_aval, rows, at, guard=None, scatter=False):
    """`stack[at:at + len(rows)] = rows`: one `dynamic_update_slice`, or one scatter
    per row for rows of symbolic shape; with `guard`, the rows there are kept where
    `guard` is false (one select of the whole chunk). With `scatter` (and rows of
    static shape, in bounds), one scatter of single rows
    (`_device_indexing.scatter_rows`): IREE 3.13 runs it as a dispatch that reads
    `at` on the device, where it turns a `dynamic_update_slice` (or a scatter of
    one window) into a copy at an offset read back to the host, one readback per
    emitted iteration (tests/ir/test_unroll.py counts them)."""
    row_aval = stack_aval.update(shape=stack_aval.shape[1:])
    if has_symbolic_rows(stack_aval.shape):
        if guard is not None:
            old = _read_rows(ctx, stack, stack_aval, at, len(rows))
            rows = [hlo.select(_broadcast(guard, r.type), r, o) for r, o in zip(rows, old)]
        write = mlir.lower_fun(write_row, multiple_results=False)
        rows_ctx = ctx.replace(avals_in=[stack_aval, COUNTER_AVAL, row_aval],
                               avals_out=[stack_aval])
        for s, r in enumerate(rows):
            (stack,) = write(rows_ctx, stack, hlo.add(at, mlir.ir_constant(np.int32(s))), r)
        return stack
    one_aval = stack_aval.update(shape=(1, *stack_aval.shape[1:]))
    chunk_aval = stack_aval.update(shape=(len(rows), *stack_aval.shape[1:]))
    rows = [reshape(ctx, r, one_aval) for r in rows]
    chunk = rows[0] if len(rows) == 1 else hlo.concatenate(rows, 0)
    if guard is not None:
        old = dynamic_slice(ctx, chunk_aval, stack,
                            start_indices=_row_start(ctx, at, stack_aval.ndim))
        chunk = hlo.select(_broadcast(guard, chunk.type), chunk, old)
    if scatter:
        rows_ctx = ctx.replace(avals_in=[stack_aval, chunk_aval, COUNTER_AVAL],
                               avals_out=[stack_aval])
        return mlir.lower_fun(partial(scatter_rows, clip=False), multiple_results=False)(
            rows_ctx, stack, chunk, at)[0]
    return dynamic_update_slice(ctx, stack_aval, stack, chunk,
                                start_indices=_row_start(ctx, at, stack_aval.ndim))


def _less(a, b):
    """`a < b` for int32 scalars."""
    return hlo.compare(a, b, hlo.ComparisonDirectionAttr.get("LT"),
                       compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))


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


def _carries_read(cond_jaxpr, cond_nconsts) -> list[bool]:
    """For each carry, whether cond reads it."""
    _, used = pe.dce_jaxpr(cond_jaxpr.jaxpr, [True])
    return used[cond_nconsts + 1:]


def _reads_carry(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads the carry (not only the counter and its constants)."""
    return any(_carries_read(cond_jaxpr, cond_nconsts))


def _tests_one_scalar(cond_jaxpr, cond_nconsts) -> bool:
    """Whether cond reads at most one carry, a scalar: the tests that the
    unpredicated form takes (it was measured on those only: sin, the test corpus)."""
    read = [a for a, r in zip(cond_jaxpr.in_avals[cond_nconsts + 1:],
                              _carries_read(cond_jaxpr, cond_nconsts)) if r]
    return len(read) <= 1 and all(a.shape == () for a in read)


def _multiples(d: int, m: int, dtype) -> np.ndarray:
    """`[0, d, ..., (m - 1) d]` in integer `dtype`, wrapped as its arithmetic wraps."""
    bits = np.iinfo(dtype).bits
    return np.array([s * d % 2 ** bits for s in range(m)], np.uint64).astype(dtype)


def _read_every_carry(body_jaxpr, n_inputs_before_counter, i, xs, new_xs):
    """Make the emitted body read each carry that `body` overwrites without reading:
    `new if opaque_i >= 0 else old`, with the loop counter `i` (never negative)
    hidden from folding by an optimization barrier.

    IREE 3.13 crashes (ScfWhileOpConversion) on a loop that produces a carry the
    body never reads, once the cond tests it (e.g. a residual norm recomputed
    from scratch every step). The barrier must not hold a constant: IREE 3.13
    packs the loop's constant initial values into one allocation, and a barrier
    on one of them inside the loop makes it bind one buffer to several loop
    results, a module that fails on every call (iree_limits/
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
