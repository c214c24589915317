"""The functional While primitive with its abstract evaluation, forward mode and batching.

`functional_while_p` is whilst's one loop. Its semantics, as plain Python::

    def functional_while(*cond_consts, *body_consts, bound, *carry):
        i = 0
        while i < bound and cond(*cond_consts, i, *carry):
            carry = body(*body_consts, i, *carry)
            i += 1
        return (i, *carry)

`cond` and `body` are closed jaxprs that receive the iteration counter `i`
(int32) before the carry, so accumulators and the gradient While can index
their stacks with it. Output 0 is the iteration counter.

Static parameters:
  cond_jaxpr, body_jaxpr: the closed sub-jaxprs.
  cond_nconsts, body_nconsts: how many operands are constants of each.
  static_bound: an int known at trace time with `bound <= static_bound`, or
    None (unbounded, or bounded only by a traced value).
  name: the loop's name, carried into the emitted StableHLO.
  role: "forward" (a user loop or its primal with accumulators), "gradient"
    (the transposed replay) or "linear" (a linear While not yet transposed).
  accumulators, stack_rows, row_offset, pops, pop_pad: residual stacks the
    loop pushes rows to or pops rows from (all 0 for a plain loop): the body
    returns `accumulators` rows after the carry and the loop's results end with
    their stacks; with `pops`, the last body operands are the popped stacks, and
    the body receives one row of each. See `_stacks.py`.
  unroll: loop steps per emitted `stablehlo.while` iteration (None: automatic).
  gradient: the gradient policy, how reverse mode keeps the loop's steps
    (`reverse/_policy.py`: `Budget(nbytes)` or `Checkpointed(K)`). Ignored by
    the lowering.

Its other rules (reverse mode in `reverse/`, partial evaluation, the MLIR
lowering) live in their own modules; `_rules.py` registers them all in one block,
and `whilst.ir`'s `__init__` imports it, so the rules are registered whenever the
primitive can be bound.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

import jax
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters.ad import Zero

from whilst._jax_compat import (
    apply_primitive, batch_jaxpr, is_constant_shape, jaxpr_forwarding, join_effects, jvp_jaxpr,
    merge_lists, move_binders_to_front, moveaxis, partition_list, prune_closed_jaxpr_outputs,
    split_list)
from whilst.ir._stacks import (
    NO_STACKS, StackParams, explicit_form, explicit_layout, split_pops, stack_avals)
from whilst.ir._tracing import COUNTER_AVAL, call, trace_closed
from whilst.ir._const_casts import hoist_const_casts
from whilst.ir._vma import varying, vary
from whilst.ir.reverse._policy import Budget

UNBOUNDED = int(np.iinfo(np.int32).max)
ROLES = ("forward", "gradient", "linear")

functional_while_p = Primitive("functional_while")
functional_while_p.multiple_results = True


def functional_while(cond_consts, body_consts, bound, carry, *, cond_jaxpr, body_jaxpr,
                     static_bound, name, role="forward", unroll=None, gradient=Budget(),
                     **stack_params):
    """Bind `functional_while_p`; returns `[counter, *carry, *stacks]` (see the module
    docstring; `stack_params` are those of `_stacks.StackParams`).

    Carries that body returns unchanged are loop invariants: they are passed to
    cond and body as constants instead, so no transformation carries, batches
    or stacks them. Casts of body's constants to varying manual axes happen
    before the loop (`_const_casts`).
    """
    assert role in ROLES, role
    sp = StackParams(**stack_params)
    body_jaxpr, body_consts = hoist_const_casts(  # popped stacks are rows in body
        body_jaxpr, len(body_consts) - sp.pops, body_consts)
    nb = len(body_consts)
    ncarry = len(carry)
    forwarded = jaxpr_forwarding(body_jaxpr.jaxpr)
    invariant = [forwarded[j] == nb + 1 + j for j in range(ncarry)]
    if any(invariant):
        body_jaxpr = move_binders_to_front(
            prune_closed_jaxpr_outputs(
                body_jaxpr, [not v for v in invariant] + [True] * sp.accumulators),
            [False] * (nb + 1) + invariant)
        cond_jaxpr = move_binders_to_front(
            cond_jaxpr, [False] * (len(cond_consts) + 1) + invariant)
        carry_kept, moved = partition_list(invariant, list(carry))
        counter, *outs = functional_while(
            [*moved, *cond_consts], [*moved, *body_consts], bound, carry_kept,
            cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, static_bound=static_bound,
            name=name, role=role, unroll=unroll, gradient=gradient, **stack_params)
        carry_out, stacks = split_list(outs, [len(carry_kept)])
        return [counter, *merge_lists(invariant, carry_out, moved), *stacks]
    operands = [*cond_consts, *body_consts, bound, *carry]
    params = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                  cond_nconsts=len(cond_consts), body_nconsts=nb,
                  static_bound=static_bound, name=name, role=role, unroll=unroll,
                  gradient=gradient,
                  **sp.as_params())
    if sp.any and not all(is_constant_shape(a.shape) for a in
                          [*body_jaxpr.in_avals, *body_jaxpr.out_avals]):
        # Rows of symbolic shape: moved one at a time by the body (no chunks).
        operands, params = explicit_form(operands, params)
    return functional_while_p.bind(*operands, **params)


def split_operands(operands, cond_nconsts, body_nconsts):
    """`operands -> (cond_consts, body_consts, bound, carry)`."""
    cond_consts, body_consts, (bound,), carry = split_list(
        list(operands), [cond_nconsts, body_nconsts, 1])
    return cond_consts, body_consts, bound, carry


def def_by_expansion(primitive, expand):
    """Evaluation, forward mode, batching and lowering of a linear While primitive
    (reverse mode's tangent side, before it is transposed) by its expansion
    `expand(*operands, **params)` into functional Whiles."""
    primitive.def_impl(lambda *args, **params: apply_primitive(primitive, *args, **params))

    def jvp(primals, tangents, **params):
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return jax.jvp(lambda *a: expand(*a, **params), list(primals), tangents)

    def batch(args, dims, **params):
        out = jax.vmap(lambda *a: expand(*a, **params), in_axes=tuple(dims))(*args)
        return out, [0] * len(out)

    ad.primitive_jvps[primitive] = jvp
    batching.primitive_batchers[primitive] = batch
    mlir.register_lowering(primitive, mlir.lower_fun(expand, multiple_results=True))


# ---------------------------------------------------------------- evaluation

_STEPS_FIRST = contextvars.ContextVar("whilst_steps_first", default=None)


@contextlib.contextmanager
def loops_stepped_first(most_steps):
    """Within, loops evaluated on values (without effects or stacks) run their first
    `most_steps(body_jaxpr)` steps op by op (`_stepped_while`), so that one which ends
    within them compiles no program (eager reverse mode counting a loop's trips)."""
    token = _STEPS_FIRST.set(most_steps)
    try:
        yield
    finally:
        _STEPS_FIRST.reset(token)


def functional_while_impl(*operands, **params):
    """Evaluation: one compiled program, or `_stepped_while` within
    `loops_stepped_first`."""
    most_steps = _STEPS_FIRST.get()
    if (most_steps is None or StackParams.of(params).any or params["cond_jaxpr"].effects
            or params["body_jaxpr"].effects):
        return apply_primitive(functional_while_p, *operands, **params)
    return _stepped_while(operands, params, most_steps(params["body_jaxpr"]))


def _stepped_while(operands, params, steps: int) -> list:
    """`functional_while(*operands)` on values (no effects, no stacks), its first
    `steps` steps op by op::

        for i in range(steps + 1):
            if not (i < bound and cond(i, carry)): return [i, *carry]
            if i < steps: carry = body(i, carry)
        return functional_while(*operands)    # from its start, as one program
    """
    cond_consts, body_consts, bound, carry = split_operands(
        operands, params["cond_nconsts"], params["body_nconsts"])
    for i in map(np.int32, range(steps + 1)):
        if not (i < bound and call(params["cond_jaxpr"], *cond_consts, i, *carry)[0]):
            return [i, *carry]
        if i < steps:
            carry = call(params["body_jaxpr"], *body_consts, i, *carry)
    return apply_primitive(functional_while_p, *operands, **params)


def functional_while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, accumulators, stack_rows, **_):
    effects = join_effects(cond_jaxpr.effects, body_jaxpr.effects)
    carry, rows = split_list(body_jaxpr.out_avals, [len(body_jaxpr.out_avals) - accumulators])
    return [COUNTER_AVAL, *carry, *stack_avals(rows, stack_rows)], effects



def _carry_avals(body_jaxpr, body_nconsts):
    return body_jaxpr.in_avals[body_nconsts + 1:]



# ---------------------------------------------------------------- forward mode

def jvp_body(body_jaxpr, const_nz, carry_nz):
    """`(jvp of body, carry_nz)` at the fixed point of which carries have non-zero
    tangents, given those of the constants and of the initial carry."""
    carry_nz = list(carry_nz)
    for _ in range(len(carry_nz) + 1):
        body_jvp, carry_nz_out = jvp_jaxpr(
            body_jaxpr, [*const_nz, False, *carry_nz], instantiate=carry_nz)
        if carry_nz_out == carry_nz:
            return body_jvp, carry_nz
        carry_nz = [a or b for a, b in zip(carry_nz, carry_nz_out)]
    raise AssertionError("no fixed point of the non-zero tangents")


def functional_while_jvp(primals, tangents, **params):
    """Carry the tangents of the carry alongside it, through the same While."""
    if StackParams.of(params).any:
        operands, new_params = explicit_form(primals, params)
        new_stacks = operands[len(operands) - params["accumulators"]:]
        return functional_while_jvp(operands, explicit_layout(
            params, tangents, [Zero(jax.typeof(s).to_tangent_aval()) for s in new_stacks]),
            **new_params)
    return _jvp_plain(primals, tangents, **params)


def _jvp_plain(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
               **params):
    cond_consts, body_consts, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    _, body_const_dots, _, carry_dots = split_operands(tangents, cond_nconsts, body_nconsts)
    const_nz = [type(t) is not Zero for t in body_const_dots]
    carry_nz = [type(t) is not Zero for t in carry_dots]

    body_jvp, carry_nz = jvp_body(body_jaxpr, const_nz, carry_nz)
    nc, ncarry = len(body_consts), len(carry)
    n_const_dots = sum(const_nz)
    const_dots = [t for t, nz in zip(body_const_dots, const_nz) if nz]
    carry_dots_nz = [ad.instantiate_zeros(t) for t, nz in zip(carry_dots, carry_nz) if nz]

    def body(*args):
        consts, dconsts, (i,), xs, dxs = split_list(args, [nc, n_const_dots, 1, ncarry])
        outs = call(body_jvp, *consts, i, *xs, *dconsts, *dxs)
        return outs

    def cond(*args):
        consts, (i,), xs, _ = split_list(args, [cond_nconsts, 1, ncarry])
        return call(cond_jaxpr, *consts, i, *xs)

    carry_avals = _carry_avals(body_jaxpr, body_nconsts)
    dot_avals = [a.to_tangent_aval() for a, nz in zip(carry_avals, carry_nz) if nz]
    const_avals = body_jaxpr.in_avals[:body_nconsts]
    dconst_avals = [a.to_tangent_aval() for a, nz in zip(const_avals, const_nz) if nz]
    new_body = trace_closed(body, [*const_avals, *dconst_avals, COUNTER_AVAL,
                                   *carry_avals, *dot_avals], "functional_while_jvp_body")
    new_cond = trace_closed(cond, [*cond_jaxpr.in_avals, *dot_avals], "functional_while_jvp_cond")
    # The tangents follow the carry, so accumulator stacks are no longer trailing.
    counter, *outs = functional_while(
        cond_consts, [*body_consts, *const_dots], bound, [*carry, *carry_dots_nz],
        cond_jaxpr=new_cond, body_jaxpr=new_body, **dict(params, accumulators=0))
    carry_out, dots_out = split_list(outs, [ncarry])
    dots_iter = iter(dots_out)
    tangents_out = [next(dots_iter) if nz else Zero(a.to_tangent_aval())
                    for a, nz in zip(carry_avals, carry_nz)]
    return [counter, *carry_out], [Zero(COUNTER_AVAL.to_tangent_aval()), *tangents_out]



# -------------------------------------------------------------------- batching

class PerLaneName(str):
    """The name of a loop that `jax.vmap` runs per lane (a trip count per example),
    whose body also runs for the examples that have finished, and of every loop made
    from it (forward mode, reverse mode), which pass the name on: the user's name (the
    emitted StableHLO shows it), whose type marks the loop for its checkify rule
    (`_checkify.py`)."""


def _move_to_front(x, dim, batched_now, size):
    if dim is None:
        return batching.broadcast(x, size, 0, None) if batched_now else x
    return moveaxis(x, dim, 0)


def functional_while_batching(axis_data, args, dims, **params):
    """vmap: a lane whose predicate turned false keeps its carry while others run on.

    Pushed rows are not held back for finished lanes: a lane's rows past its own
    trip count are never read. Pops at a position that differs per lane (a
    batched bound) are read by the loop's `explicit_form` (a gather per step)."""
    sp = StackParams.of(params)
    _, _, bound_dim, _ = split_operands(dims, params["cond_nconsts"], params["body_nconsts"])
    if sp.pops and bound_dim is not None:
        def one_example(*operands):
            new_operands, new_params = explicit_form(operands, params)
            return functional_while_p.bind(*new_operands, **new_params)
        out = jax.vmap(one_example, in_axes=tuple(dims), axis_size=axis_data.size)(*args)
        return out, [0] * len(out)
    return _batch_stack_aware(axis_data, args, dims, sp,
                              **{k: v for k, v in params.items() if k not in NO_STACKS})


def _batch_stack_aware(axis_data, args, dims, sp, *, cond_jaxpr, body_jaxpr, cond_nconsts,
                       body_nconsts, static_bound, **params):
    cond_consts, body_consts, bound, carry = split_operands(args, cond_nconsts, body_nconsts)
    cc_dims, bc_dims, bound_dim, carry_dims = split_operands(dims, cond_nconsts, body_nconsts)
    consts, popped = split_pops(body_consts, sp.pops)
    c_dims, pop_dims = split_pops(bc_dims, sp.pops)
    ncarry = len(carry)
    cc_b = [d is not None for d in cc_dims]
    bc_b = [d is not None for d in [*c_dims, *pop_dims]]  # the body's const inputs
    carry_b = [d is not None for d in carry_dims]
    no_rows = [False] * sp.accumulators

    for _ in range(ncarry + 1):
        _, out_b = batch_jaxpr(
            body_jaxpr, axis_data, bc_b + [False] + carry_b, instantiate=carry_b + no_rows)
        if out_b[:ncarry] == carry_b:
            break
        carry_b = [a or b for a, b in zip(carry_b, out_b)]
    _, (pred_b,) = batch_jaxpr(cond_jaxpr, axis_data, cc_b + [False] + carry_b,
                                        instantiate=False)
    per_lane = pred_b or bound_dim is not None
    if per_lane:
        carry_b = [True] * ncarry
    body_batched, out_b = batch_jaxpr(
        body_jaxpr, axis_data, bc_b + [False] + carry_b, instantiate=carry_b + no_rows)
    cond_batched, _ = batch_jaxpr(cond_jaxpr, axis_data, cc_b + [False] + carry_b,
                                           instantiate=per_lane)
    # A batched row r is pushed to a [rows, batch, *r.shape[1:]] stack.
    stack_dims = [1 if b else None for b in out_b[ncarry:]]

    size = axis_data.size
    cond_consts = [_move_to_front(x, d, False, size) for x, d in zip(cond_consts, cc_dims)]
    consts = [_move_to_front(x, d, False, size) for x, d in zip(consts, c_dims)]
    popped = [x if d is None else moveaxis(x, d, 1) for x, d in zip(popped, pop_dims)]
    carry = [_move_to_front(x, d, b, size) for x, d, b in zip(carry, carry_dims, carry_b)]
    body_operands = [*consts, *popped]

    if not per_lane:
        counter, *outs = functional_while(
            cond_consts, body_operands, bound, carry, cond_jaxpr=cond_batched,
            body_jaxpr=body_batched, static_bound=static_bound, **params, **sp.as_params())
        return [counter, *outs], [None] + [0 if b else None for b in carry_b] + stack_dims

    # Inside jax.shard_map the lanes' step counts vary as the carry does (`_vma`).
    bounds = vary(_move_to_front(bound, bound_dim, True, size),
                  frozenset().union(*map(varying, carry)))
    ncc, nbc = len(cond_consts), len(consts) + sp.pops

    # Each lane counts down the steps its bound still allows, so the loop never
    # starts two lane vectors from the same zeros (see whilst.lowering._iree).
    def lane_active(cconsts, i, remaining, xs):
        (pred,) = call(cond_batched, *cconsts, i, *xs)
        return lax.bitwise_and(lax.gt(remaining, lax.full_like(remaining, 0)), pred)

    def cond(*args):
        cconsts, (i, remaining), xs = split_list(args, [ncc, 2])
        return [lax.reduce_or(lane_active(cconsts, i, remaining, xs), (0,))]

    def body(*args):
        cconsts, bconsts, (i, remaining), xs = split_list(args, [ncc, nbc, 2])
        active = lane_active(cconsts, i, remaining, xs)
        new, rows = split_list(call(body_batched, *bconsts, i, *xs), [ncarry])
        kept = [lax.select(lax.broadcast_in_dim(active, x.shape, (0,)), n, x)
                for n, x in zip(new, xs)]
        return [remaining - active.astype(np.int32), *kept, *rows]

    cc_avals = [jax.typeof(x) for x in cond_consts]
    bc_avals = body_batched.in_avals[:nbc]
    lanes_aval = jax.typeof(bounds)
    carry_avals = [jax.typeof(x) for x in carry]
    new_cond = trace_closed(cond, [*cc_avals, COUNTER_AVAL, lanes_aval, *carry_avals],
                            "functional_while_vmap_cond")
    new_body = trace_closed(body, [*cc_avals, *bc_avals, COUNTER_AVAL, lanes_aval,
                                   *carry_avals], "functional_while_vmap_body")
    _, remaining, *outs = functional_while(
        cond_consts, [*cond_consts, *body_operands], lax.reduce_max(bounds, (0,)),
        [bounds, *carry], cond_jaxpr=new_cond, body_jaxpr=new_body,
        static_bound=static_bound, **dict(params, name=PerLaneName(params["name"])),
        **sp.as_params())
    return [bounds - remaining, *outs], [0] * (1 + ncarry) + stack_dims

