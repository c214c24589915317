"""MLIR lowering of `functional_while_p` to exactly one `stablehlo.while`.

The op gets the discardable attributes `whilst.role` ("forward" | "gradient" |
"linear"), `whilst.name` and `whilst.unroll`, and `whilst.over_chunks` where it is a
While over a budget's chunks. Constants are captured from the
enclosing region rather than carried, so stacks read by a gradient While are never
loop-carried buffers.

Each `stablehlo.while` iteration runs up to k loop steps (unrolling), which
amortises IREE's per-iteration host cost (about 2 us on a CPU). A **counted** loop
(its test is the trip count: gradient and linear Whiles, and loops tested `i < n`
on a counter stepped by 1, which `_trip_count.py` bounds by their trip count) tests
only `i < bound`. The loop's form (`_loop_forms.py`: one iteration, counted,
speculative or predicated) says which steps run unpredicated; the shared emitter
(`_loop_emitter.py`) builds the op. An exported body's reads and writes of small
arrays at computed positions become one-hot selects first (`iree_forms/_onehot.py`),
so that such bodies unroll too.

Residual stacks (`whilst.ir._stacks`) move k rows per iteration: the rows the k
steps push are concatenated into one `[k, *row]` chunk written at `row_offset + i`
with one `dynamic_update_slice` (counted loops, whose `i` IREE keeps on the host) or
one scatter of k rows (other loops: IREE would read `i` back for the
`dynamic_update_slice`), and the rows they pop are static slices of one chunk read
at `bound - 1 + pop_pad - i - (k-1)`; where the body runs a loop, a step past the
loop's end (predicated, or after a counted loop) pops zeros instead of the unwritten
rows below row `pop_pad`. Rows of inactive steps land past the loop's last row,
where nothing reads them; the last steps' chunk is written only if one of them runs
(it may start past the stacks' end). Rows of symbolic shape move one by one, in the
forms of `iree_forms/_symbolic_indexing.py` (a scatter or gather each).

Exported, a cond that reads the carry is evaluated at the end of the body and
carried as a boolean (the cond region only returns it): IREE 3.13 crashes
(ScfWhileOpConversion) on loops whose cond region reads a value the body computed
from a tensor, the usual shape of convergence tests. Loops whose cond reads only
the counter (gradient Whiles, bounds), and every loop of one step per iteration
under `jax.jit`, keep the plain shape: XLA's search for a loop's induction
variable, which several of its passes run, follows a carried boolean through the
whole body (nested loops included) each time.
"""
from __future__ import annotations

from jax.extend.core import Literal
from jax.extend.mlir.dialects import stablehlo as hlo

from whilst.ir._counted_loops import counted_loops_unrolled
from whilst.ir._emit_ops import subcomp
from whilst.ir._functional_while import split_operands
from whilst.ir._loop_forms import loop_form
from whilst.ir._stacks import pushed_rows, split_pops
from whilst.ir._tracing import holds_a_loop
from whilst.ir.reverse._policy import Checkpointed, over_chunks
from whilst.ir._trip_count import counter_trips, integer_strides
from whilst.ir._unroll import MAX_UNROLL, unroll_factor, unrolled_scans
from whilst.ir.iree_forms._device_indexing import device_indexing
from whilst.ir.iree_forms._export_forms import export_forms
from whilst.ir.iree_forms._onehot import onehot_indexing


def functional_while_lowering(ctx, *args, cond_jaxpr, body_jaxpr, cond_nconsts,
                              body_nconsts, static_bound, name, role, unroll, gradient,
                              accumulators, stack_rows, row_offset, pops, pop_pad):
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    consts, popped = split_pops(body_consts, pops)
    name_stack = ctx.name_stack.extend(name)
    # (reverse mode's policy is chosen before lowering; it only says whether the
    # loop may be a checkpointed gradient's forward: see `_loop_forms`)
    plain = role == "forward" and not (accumulators or pops or isinstance(gradient,
                                                                      Checkpointed))
    cond_jaxpr, body_jaxpr, forms_k = _unrolled(ctx, cond_jaxpr, body_jaxpr, unroll,
                                                plain=plain)
    k = forms_k  # the forms are chosen for forms_k steps; k may be lowered below
    if static_bound is not None:
        k = max(1, min(k, static_bound))  # more steps than the loop may take never run
    if pops:
        k = min(k, pop_pad + 1)  # chunk reads must not start below row 0
    while accumulators and pushed_rows(static_bound, k, row_offset) > stack_rows:
        k -= 1  # the last chunk of pushes must fit the stacks, and be less than them
    counted = _always_true(cond_jaxpr)
    # IREE 3.13 runs a loop that pushes rows and holds a loop in its body wrongly
    # when its trip count bounds it (iree_limits/counted_loop_with_inner_loop.py).
    trips = None if counted or pops or (accumulators and holds_a_loop(body_jaxpr.jaxpr)) \
        else counter_trips(cond_jaxpr, cond_nconsts, body_jaxpr, len(consts))
    if trips is not None:  # `i < n` on a stepped counter: bounded by its trip count
        (steps_to_go,) = subcomp(ctx, trips, name_stack.extend("trips"), *cond_consts, *carry)
        bound, counted = hlo.minimum(bound, steps_to_go), True
    if ctx.module_context.lowering_parameters.for_export:
        cond_jaxpr, body_jaxpr = _indexing_forms(cond_jaxpr, body_jaxpr, forms_k,
                                                 body_nconsts if counted else None)
    strides = integer_strides(body_jaxpr, len(consts) + pops)
    carry_avals = ctx.avals_out[1:1 + len(carry)]
    # Picking among k + 1 scalars makes IREE 3.13 fuse them all into one dispatch,
    # past its runtime's 32 bindings: such loops run their last steps predicated.
    picks_scalars = any(d is None and not a.shape for d, a in zip(strides, carry_avals))
    exported = ctx.module_context.lowering_parameters.for_export
    form = loop_form(k, counted, pops, picks_scalars, cond_jaxpr, cond_nconsts, static_bound,
                     plain and exported)
    return form(ctx, name_stack, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                cond_consts=cond_consts, consts=consts, popped=popped, bound=bound,
                carry=carry, k=k, counted=counted, strides=strides,
                picks_scalars=picks_scalars, name=name, role=role, row_offset=row_offset,
                pop_pad=pop_pad, over_chunks=over_chunks(gradient)).emit()


def _unrolled(ctx, cond_jaxpr, body_jaxpr, unroll, plain):
    """`(cond_jaxpr, body_jaxpr, k)`: k loop steps per emitted iteration, `unroll`
    if given (at most MAX_UNROLL); otherwise automatic when exporting (for IREE,
    which pays per iteration, `exported_loop_forms` before its indexing forms)
    and 1 under `jax.jit` (XLA gains little and compiles longer). `plain`: a
    forward loop that pushes and pops no residual rows and keeps no checkpoints
    (see `_loop_forms`)."""
    if not ctx.module_context.lowering_parameters.for_export:
        return cond_jaxpr, body_jaxpr, 1 if unroll is None else min(unroll, MAX_UNROLL)
    return _loop_forms(cond_jaxpr, body_jaxpr, unroll, counted_loops=plain)


def exported_loop_forms(cond_jaxpr, body_jaxpr, unroll):
    """`(cond_jaxpr, body_jaxpr, k)` as an exported loop emits them: the bodies
    with their counting library loops (`counted_loops_unrolled`) and their
    `lax.scan`s (`unrolled_scans`) unrolled, in the forms IREE 3.13
    compiles and runs as XLA does (`export_forms`), and k = `unroll_factor`; then
    their indexing forms (`_indexing_forms`)."""
    cond_jaxpr, body_jaxpr, k = _loop_forms(cond_jaxpr, body_jaxpr, unroll)
    return (*_indexing_forms(cond_jaxpr, body_jaxpr, k), k)


def _loop_forms(cond_jaxpr, body_jaxpr, unroll, counted_loops=True):
    """`counted_loops`: unroll the counting library loops of the bodies. The loops
    of reverse mode keep theirs (gradient Whiles, forward loops that push rows or
    keep checkpoints): with diffrax's Tsit5 stage loop unrolled in them, the LV
    gradient with SaveAt ts came out of IREE 3.13 1.2e-3 (relative) off diffrax on
    JAX, against 6e-5 with the stage loop as it is (stored rows and checkpoints=8
    alike; not diagnosed further)."""
    forms = (lambda j: unrolled_scans(counted_loops_unrolled(j))) if counted_loops \
        else unrolled_scans
    cond_jaxpr, body_jaxpr = (export_forms(forms(j)) for j in (cond_jaxpr, body_jaxpr))
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


def _always_true(cond_jaxpr) -> bool:
    """Whether cond returns the literal True (loops bounded by their trip count)."""
    (out,) = cond_jaxpr.jaxpr.outvars
    return isinstance(out, Literal) and bool(out.val)


