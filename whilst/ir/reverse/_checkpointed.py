"""Reverse mode with a fixed memory budget: the checkpointed gradient While.

`while_loop(..., checkpoints=K)` sets the static parameter `checkpoints` of the
functional While. Linearizing such a loop (jax.grad, jax.vjp, jax.linearize) needs
no bound on its trip count and keeps K copies of the carry, whatever the number of
steps. It emits::

    # (a) the primal While with K checkpoint slots (role "forward")
    slots, pos = [zeros((K, *x.shape)) for x in carry], [EMPTY] * K
    i = 0
    while i < bound and cond(i, carry):
        save, k = online_policy(i)                 # Stumm-Walther, then Wang-Moin
        if save: slots[k], pos[k] = carry, i
        carry = body(consts, i, carry)
        i += 1
    n = i

    # (b) `checkpointed_linear_while_p`, staged on the tangent side: the tangent map
    #     of the n steps, recomputing the primal from slot 0 when applied forwards
    x = slots[0]
    for i in range(n):
        x, dcarry = jvp(body)((consts, i, x), (dconsts, dcarry))

Partial evaluation keeps (a) in the forward pass. The transpose of (b) is the
**checkpointed gradient While** (role "gradient"): one `functional_while` whose
body is the state machine of `whilst.ir.reverse._schedule`. Each iteration
either advances one step (and stores the new carry when it reaches the planned
step), or reverses one step with the body's vjp, accumulating the cotangents of
the constants, and restores the latest checkpoint. It plans the reversal from the
n counted by (a): binomial (revolve) schedules on the segments between the slots
(a) stored, reusing the slots freed as the reversal passes them. The plan (the
next step to store) is carried and recomputed only after a turn or a store, so
most iterations are a body evaluation and two integer comparisons.

Every loop here is a `functional_while` with `checkpoints=K`, so forward mode
(jvp rule), batching (per-example trip counts: every lane runs its own schedule)
and differentiating the gradient While again (grad of grad: its carry holds the K
slots, so that costs K checkpoints of K slots) reuse the same rules.

StableHLO: `jax.grad` of one checkpointed loop holds two `stablehlo.while`: the
forward (a) and the gradient While; the schedule is integer code: one
`stablehlo.case` picks reverse, advance, or advance and store, and in the two
re-planning branches one more computes the binomial split only for segments
longer than the free slots + 2 (shorter ones store every step). Linearizing a
gradient While again (role "gradient": grad of grad) first computes every
branch of those and selects one (`_selected_branches.py`), in its body and in
the new gradient While's: iree-compile 3.13 fails on the host branches they
would multiply.

References: A. Griewank, "Achieving logarithmic growth of temporal and spatial
complexity in reverse automatic differentiation", Optim. Methods Softw. 1 (1992);
A. Griewank and A. Walther, "Algorithm 799: revolve", ACM TOMS 26(1) (2000);
P. Stumm and A. Walther, "New algorithms for optimal online checkpointing", SIAM J.
Sci. Comput. 32(2) (2010); Q. Wang, P. Moin and G. Iaccarino, "Minimal repetition
dynamic checkpointing algorithm for unsteady adjoint calculation", SIAM J. Sci.
Comput. 31(4) (2009).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters.ad import Zero

from whilst._jax_compat import is_concrete, jvp_jaxpr, merge_lists, partition_list, split_list

from whilst.ir._buffers import ZeroStarted, distinct_fill
from whilst.ir._inspect import holds_loops
from whilst.ir.reverse._policy import Checkpointed
from whilst.ir.reverse._schedule import EMPTY, policy_init, policy_step, split
from whilst.ir._functional_while import (
    COUNTER_AVAL, UNBOUNDED, def_by_expansion, functional_while, jvp_body, split_operands)
from whilst.ir.iree_forms._selected_branches import schedule_branch, selected_schedule
from whilst.ir._tracing import always_true, call, trace_closed, tracing_for_operands
from whilst.ir._unroll import total_nbytes
from whilst.ir._vma import varying, with_varying
from whilst.ir._xla_cpu_choice import xla_cpu_choice


def read_slot(buf, k):
    return lax.dynamic_index_in_dim(buf, k, keepdims=False)


def write_slot(buf, k, x, when):
    """`buf[k] = x if when else buf[k]`, one in-place `dynamic_update_slice`."""
    return lax.dynamic_update_index_in_dim(buf, jnp.where(when, x, read_slot(buf, k)), k, 0)


# ------------------------------------------------------------- (a) the forward While

def built_policy(K: int, nbytes: int | None, carry_avals) -> Checkpointed:
    """The policy of a While built here for a loop kept in K copies: differentiated
    again, it keeps the copies of its carry that fit `nbytes` (the loop's, the same
    at every order), or K copies of its own carry where the loop has none
    (`_policy.py`)."""
    if nbytes is None and (carry_bytes := total_nbytes(carry_avals)) is not None:
        nbytes = K * carry_bytes
    return Checkpointed(K, nbytes=nbytes)


def checkpointed_linearize(nzs, *primals, cond_jaxpr, body_jaxpr, cond_nconsts,
                           body_nconsts, static_bound, name, role, unroll, checkpoints,
                           nbytes=None):
    """The linearize rule of `functional_while_p` when `checkpoints` is set, the
    copies its Whiles keep when differentiated again within `nbytes`
    (`built_policy`)."""
    del unroll  # the loops below choose their own (see whilst/ir/reverse/_stored.py)
    K = checkpoints
    schedule_selected = role == "gradient"  # a gradient of a gradient While
    if schedule_selected:
        body_jaxpr = selected_schedule(body_jaxpr)
    cond_consts, body_consts, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    _, const_nz, _, carry_nz = split_operands(nzs, cond_nconsts, body_nconsts)
    _, carry_nz = jvp_body(body_jaxpr, const_nz, carry_nz)
    ncarry, nb = len(carry), len(body_consts)
    carry_avals = list(body_jaxpr.in_avals[nb + 1:])
    slot_avals = [with_varying(ShapedArray((K, *a.shape), a.dtype), varying(a))
                  for a in carry_avals]
    policy0 = policy_init(K)
    policy_avals = [jax.typeof(jnp.asarray(x)) for x in policy0]
    npol = len(policy0)
    pos_aval = ShapedArray((K,), np.int32)

    def forward_body(*args):
        consts, (i,), xs, policy, (pos,), slots = split_list(args, [nb, 1, ncarry, npol, 1])
        save, k, policy, pos = policy_step(i, policy, pos, K)
        slots = [write_slot(s, k, x, save) for s, x in zip(slots, xs)]
        return [*call(body_jaxpr, *consts, i, *xs), *policy, pos, *slots]

    def forward_cond(*args):
        consts, (i,), xs, _ = split_list(args, [cond_nconsts, 1, ncarry])
        return call(cond_jaxpr, *consts, i, *xs)

    extra_avals = [*policy_avals, pos_aval, *slot_avals]
    fwd_body = trace_closed(forward_body, [*body_jaxpr.in_avals, *extra_avals],
                            "checkpointed_forward_body")
    fwd_cond = trace_closed(forward_cond, [*cond_jaxpr.in_avals, *extra_avals],
                            "checkpointed_forward_cond")
    init = [*carry, *[jnp.asarray(x) for x in policy0], jnp.full((K,), EMPTY, np.int32),
            *[distinct_fill((K, *a.shape), a.dtype, j) for j, a in enumerate(carry_avals)]]

    def forward(*operands):
        cc, bc, (b,), xs = split_list(operands, [cond_nconsts, nb, 1])
        return functional_while(cc, bc, b, xs, cond_jaxpr=fwd_cond, body_jaxpr=fwd_body,
                                static_bound=static_bound, name=name, role=role,
                                gradient=built_policy(K, nbytes, [*carry_avals, *extra_avals]))

    n, *outs = forward(*cond_consts, *body_consts, bound, *init)
    carry_out, _, (pos,), slots = split_list(outs, [ncarry, npol, 1])

    carry_tangent_avals = [a.to_tangent_aval() for a in carry_avals]

    def linearized(residuals, *tangents):
        n, pos, slots, consts = split_list(residuals, [1, 1, ncarry])
        _, dconsts, _, dcarry = split_operands(tangents, cond_nconsts, body_nconsts)
        dconsts = [ad.instantiate_zeros(t) for t, nz in zip(dconsts, const_nz) if nz]
        dcarry = [ad.instantiate_zeros(t) for t, nz in zip(dcarry, carry_nz) if nz]
        out = checkpointed_linear_while_p.bind(
            *n, *pos, *slots, *consts, *dconsts, *dcarry, body_jaxpr=body_jaxpr,
            checkpoints=K, nbytes=nbytes, const_nz=tuple(const_nz), carry_nz=tuple(carry_nz),
            name=name, schedule_selected=schedule_selected)
        out_iter = iter(out)
        dcarry_out = [next(out_iter) if nz else Zero(a)
                      for nz, a in zip(carry_nz, carry_tangent_avals)]
        return [Zero(COUNTER_AVAL.to_tangent_aval()), *dcarry_out]

    return ([n, *carry_out], [False, *carry_nz], [n, pos, *slots, *body_consts],
            linearized)


# ------------------------------------------------ (b) the checkpointed linear While

checkpointed_linear_while_p = Primitive("checkpointed_linear_while")
checkpointed_linear_while_p.multiple_results = True


def _split_linear_operands(operands, body_jaxpr, const_nz, carry_nz):
    """`operands -> (n, pos, slots, consts, dconsts, dcarry)`."""
    ncarry = len(body_jaxpr.out_avals)
    nconsts = len(const_nz)
    (n, pos), slots, consts, dconsts, dcarry = split_list(
        list(operands), [2, ncarry, nconsts, sum(const_nz)])
    return n, pos, slots, consts, dconsts, dcarry


def expand_checkpointed_linear_while(*operands, body_jaxpr, checkpoints, nbytes, const_nz,
                                     carry_nz, name, schedule_selected):
    """`checkpointed_linear_while_p` applied forwards, as a `functional_while_p`::

        x = [s[0] for s in slots]                  # slot 0 holds step 0
        for i in range(n):
            x, dcarry = jvp(body)((consts, i, x), (dconsts, dcarry))
        return dcarry
    """
    del schedule_selected  # the gradient While's (`checkpointed_linear_while_transpose`)
    n, _, slots, consts, dconsts, dcarry = _split_linear_operands(
        operands, body_jaxpr, const_nz, carry_nz)
    body_jvp, _ = jvp_jaxpr(body_jaxpr, [*const_nz, False, *carry_nz],
                               instantiate=list(carry_nz))
    nc, ndc, ncarry = len(consts), len(dconsts), len(slots)

    def body(*args):
        cs, dcs, (i,), xs, dxs = split_list(args, [nc, ndc, 1, ncarry])
        return call(body_jvp, *cs, i, *xs, *dcs, *dxs)

    x0 = [read_slot(s, 0) for s in slots]
    carry_avals = [jax.typeof(x) for x in [*x0, *dcarry]]
    const_avals = [jax.typeof(x) for x in [*consts, *dconsts]]
    _, *outs = functional_while(
        [], [*consts, *dconsts], n, [*x0, *dcarry],
        cond_jaxpr=always_true([COUNTER_AVAL, *carry_avals]),
        body_jaxpr=trace_closed(body, [*const_avals, COUNTER_AVAL, *carry_avals],
                                "checkpointed_linear_body"),
        static_bound=None, name=name, role="linear",
        gradient=built_policy(checkpoints, nbytes, carry_avals))
    return outs[ncarry:]


# ------------------------------------------- the checkpointed gradient While

# The schedule's state, shared with the budget's gradient While over chunks
# (`_budget.py`): the held slots form a stack, `steps` (the step each level
# holds, with a spare level K) and `order` (the slot of each level).

def schedule_state(top, fine, h, order, K, branched=True):
    """`[top, fine, target, h, store_slot]`: the state at a checkpoint `top` with
    `h` slots holding steps before `fine`. target is the step the reversal stores
    at next (`top + split`, while a slot is free and that step lies before the
    turn at `fine - 1`), else -1; store_slot the slot it goes to.

    Up to free + 2 steps the split is 1 (store every step); `branched`, the
    binomial one is computed only beyond, in a `lax.cond` (0 to 17% of the
    re-plans in bench/checkpoint_table.py), else always, and selected."""
    free = K - h
    L = fine - top
    binomial = (free > 0) & (L > free + 2)
    if branched and is_concrete(binomial):   # eagerly: the branch taken, as ops
        steps_to_target = split(L, free + 1, K) if binomial else jnp.ones_like(L)
    elif branched:
        steps_to_target = schedule_branch(lambda p, L, s: lax.cond(
            p, lambda L, s: split(L, s, K), lambda L, s: jnp.ones_like(L), L, s))(
                binomial, L, free + 1)
    else:
        steps_to_target = jnp.where(binomial, split(L, free + 1, K), 1)
    target = top + steps_to_target
    target = jnp.where((free > 0) & (target < fine - 1), target, -1)
    store_slot = order[jnp.minimum(h, K - 1)]
    return jnp.stack([top, fine, target, h, store_slot]).astype(np.int32)


def restored(fine, h, steps, order, slots, K, branched=True):
    """`(state, xs)` restored from the latest checkpoint, level `h - 1` of the stack."""
    level = jnp.maximum(h - 1, 0)
    top_slot = order[level]
    return (schedule_state(steps[level], fine, h, order, K, branched),
            [read_slot(s, top_slot) for s in slots])


def slot_stack(pos, K):
    """`(steps, order)`: the slots holding steps `pos` (EMPTY where free) as a stack,
    earliest first: level l holds step `steps[l]` in slot `order[l]`, and `steps`
    has a spare level K."""
    steps, order = lax.sort((pos, lax.iota(np.int32, K)), num_keys=1)
    return jnp.concatenate([steps, jnp.full((1,), EMPTY, np.int32)]), order


def schedule_start(fine, pos, slots, K, branched=True):
    """`(state, steps, order, xs)` that reverse steps `fine - 1, .., 0` from the
    slots holding steps `pos` (EMPTY where free): those as a stack (`slot_stack`),
    and the state restored from the latest before `fine`."""
    steps, order = slot_stack(pos, K)
    state, xs = restored(fine, jnp.sum((pos < fine).astype(np.int32)), steps, order, slots,
                         K, branched)
    return state, steps, order, xs


def turned(cur, h, steps, order, slots, K, branched=True):
    """`restored` once step `cur` is reversed: the slot holding it, if one does,
    is freed first."""
    h = h - (steps[jnp.maximum(h - 1, 0)] >= cur).astype(np.int32)
    return restored(cur, h, steps, order, slots, K, branched)


def with_level(steps, h, step, K):
    """`steps` with level `h` holding `step`: level h is free (the spare level K
    when all are held). Portably an elementwise write rather than a
    dynamic_update_slice: IREE 3.13 turns a loop with a data-dependent trip count
    into the guarded do-while its stream conversion needs
    (tests/iree/test_iree_corpus.py::checkpoint_float_cond) only once it finds code to
    hoist out of the body, such as the destination tensor of an elementwise op.
    XLA:CPU writes the one entry."""
    (steps,) = xla_cpu_choice(
        lambda steps, h, v: [lax.dynamic_update_index_in_dim(steps, v, h, 0)],
        lambda steps, h, v: [jnp.where(lax.iota(np.int32, K + 1) == h, v, steps)],
        steps, h, step)
    return steps


def checkpointed_linear_while_transpose(cts, *operands, body_jaxpr, checkpoints, nbytes,
                                        const_nz, carry_nz, name, schedule_selected):
    """The gradient While: the schedule's state machine, in the stack form of the
    `_schedule.py` docstring. Its integer state is one vector
    `[cur, fine, target, h, store_slot]` (one loop-carried buffer rather than five:
    XLA:CPU spends a kernel or a copy per iteration on most carried buffers);
    `steps` has a spare level K so that the step of a store is written
    unconditionally at level h; the slots are written under a mask.

    Its body has two forms (`xla_cpu_choice`). The portable one steps forwards
    (with the vjp's residuals) before the `lax.switch`, so that a batched schedule
    (vmap, where the switch becomes a select) evaluates the body once per
    iteration, and stores from that step. The one for XLA:CPU evaluates in each
    branch what its action needs, the body in the two that advance and its vjp in
    the reverse one, and stores the switch's new carry (the portable form costs the
    body and its vjp's residuals every iteration on XLA:CPU; the other costs IREE a
    host branch: `bench/NOTES.md`). Batched, XLA's CSE merges the body evaluations
    of the branches. A body with effects keeps the portable form."""
    K = checkpoints
    n, pos, slots, consts, dconsts, dcarry = _split_linear_operands(
        operands, body_jaxpr, const_nz, carry_nz)
    assert not any(map(ad.is_undefined_primal, [n, pos, *slots, *consts]))
    # A dconst given as a value (not linear) adds a constant: it has no cotangent.
    dconst_linear = [ad.is_undefined_primal(x) for x in dconsts]
    nz_consts = [k for k, nz in enumerate(const_nz) if nz]
    lin_consts = [k for k, lin in zip(nz_consts, dconst_linear) if lin]
    # The accumulators and the cotangents of unused carries start at zero (see
    # `ZeroStarted`); the other cotangents start from `cts`.
    zero_ct = [type(ct) is Zero for ct in cts]
    ct_given = [ct for ct, z in zip(cts, zero_ct) if not z]
    acc_avals = [jax.typeof(consts[k]).to_tangent_aval() for k in lin_consts]
    zeros = ZeroStarted([x.aval for x, z in zip(dcarry, zero_ct) if z] + acc_avals)
    reversal = _Reversal(body_jaxpr, K, lin_consts, carry_nz, zero_ct, zeros, len(consts),
                         len(slots), len(ct_given))

    def cond(i, state, *_):
        return [state[1] > 0]

    # The slots as a stack: level l holds the l-th earliest step (slot order[l]).
    state0, steps, order, x_init = schedule_start(n, pos, slots, K)
    carry0 = [state0, steps, order, *slots, *x_init, *ct_given, *zeros.initial()]
    carry_avals = [jax.typeof(x) for x in carry0]
    const_avals = [jax.typeof(x) for x in consts]
    gradient_body = trace_closed(reversal.gradient_step,
                                 [*const_avals, COUNTER_AVAL, *carry_avals],
                                 "checkpointed_gradient_body")
    if schedule_selected:
        gradient_body = selected_schedule(gradient_body)
    _, *outs = functional_while(
        [], consts, np.int32(UNBOUNDED), carry0,
        cond_jaxpr=trace_closed(cond, [COUNTER_AVAL, *carry_avals],
                                "checkpointed_gradient_cond"),
        body_jaxpr=gradient_body,
        static_bound=None, name=name, role="gradient",
        gradient=built_policy(K, nbytes, carry_avals))
    given_out, started_out = split_list(outs[3 + 2 * len(slots):], [len(ct_given)])
    zero_started_out, ct_acc = split_list(zeros.unpack(started_out), [sum(zero_ct)])
    ct_x_out = merge_lists(zero_ct, given_out, zero_started_out)
    acc_iter = iter(ct_acc)
    ct_dconsts = [next(acc_iter) if lin else None for lin in dconst_linear]
    return [None, None, *[None] * (len(slots) + len(consts)), *ct_dconsts, *ct_x_out]


class _Reversal:
    """The body of the checkpointed gradient While (see
    `checkpointed_linear_while_transpose`): carries `(state, steps, order, *slots,
    *xs, *given cotangents, *zero-started values)` after the constants and `i`."""

    def __init__(self, body_jaxpr, K, lin_consts, carry_nz, zero_ct, zeros, nc, ncarry,
                 ngiven):
        self.body_jaxpr, self.K = body_jaxpr, K
        self.lin_consts, self.carry_nz, self.zero_ct, self.zeros = (
            lin_consts, carry_nz, zero_ct, zeros)
        self.nc, self.ncarry, self.ngiven, self.nzero = nc, ncarry, ngiven, sum(zero_ct)

    def step_vjp(self, cs, i, xs):
        """`(body(cs, i, xs), backward)`: one step forwards, and its vjp
        `ct -> (ct_x, ct_consts)` over the differentiated carries and constants."""
        carry_nz = self.carry_nz

        def step(c_lin, x_nz):
            full_c = list(cs)
            for k, c in zip(self.lin_consts, c_lin):
                full_c[k] = c
            full_x = merge_lists(list(carry_nz), [x for x, nz in zip(xs, carry_nz) if not nz],
                                 list(x_nz))
            out = call(self.body_jaxpr, *full_c, i, *full_x)
            return ([o for o, nz in zip(out, carry_nz) if nz],
                    [o for o, nz in zip(out, carry_nz) if not nz])
        out_nz, vjp, out_z = jax.vjp(step, [cs[k] for k in self.lin_consts],
                                     [x for x, nz in zip(xs, carry_nz) if nz], has_aux=True)

        def backward(ct):
            ct_c, ct_xs = vjp(list(ct))
            return ct_xs, ct_c
        return merge_lists(list(carry_nz), out_z, out_nz), backward

    def body(self, xla_cpu, *args):
        """One iteration of the gradient While, in the form for XLA:CPU or not."""
        K, zeros, zero_ct = self.K, self.zeros, self.zero_ct
        cs, (_,), (state, steps, order), slots, xs, given, started = split_list(
            args, [self.nc, 1, 3, self.ncarry, self.ncarry, self.ngiven])
        zero_started, acc = split_list(zeros.unpack(started), [self.nzero])
        ct = merge_lists(zero_ct, given, zero_started)
        cur, fine, target, h, store_slot = (state[j] for j in range(5))
        # The branches take `operand`, and `step(operand) == step_vjp(cs, cur, xs)`.
        if xla_cpu:   # each branch steps itself
            step, operand = partial(self.step_vjp, cs, cur), xs
        else:         # one step before the switch
            operand, backward = self.step_vjp(cs, cur, xs)
            step = lambda ys: (ys, backward)
        turn = cur == fine - 1
        store = cur + 1 == target          # never with turn: target < fine - 1
        if not xla_cpu:
            slots = [write_slot(s, store_slot, y, store) for s, y in zip(slots, operand)]
        steps = with_level(steps, h, cur + 1, K)

        def reverse(state, steps, slots, operand, ct, acc):
            # Reverse step cur, free the slot holding it, restore the latest one.
            ct, ct_c = step(operand)[1](ct)
            cur, h = state[0], state[3]
            state, xs = turned(cur, h, steps, order, slots, K)
            return state, xs, ct, [a + c for a, c in zip(acc, ct_c)]

        def advanced(state):
            return state + np.array([1, 0, 0, 0, 0], np.int32)

        def stored(state):
            # Step cur + 1 is the planned one, stored: re-plan from it. In the
            # portable form of a body holding loops, the split is selected: IREE
            # steps such a While and its branches from the host, and a branch nested
            # in this one made iree-compile 3.13 fail to solve for timepoint coverage
            # (a second derivative of a loop of 64 floats past its budget).
            return schedule_state(state[0] + 1, state[1], state[3] + 1, order, K,
                                  branched=xla_cpu or not holds_loops(self.body_jaxpr.jaxpr))

        def advance(state, steps, slots, operand, ct, acc):
            return advanced(state), step(operand)[0], ct, acc

        def advance_and_store(state, steps, slots, operand, ct, acc):
            return stored(state), step(operand)[0], ct, acc

        def advance_xla_cpu(state, steps, slots, operand, ct, acc):
            # One branch steps forwards: the step's code once (a body holding
            # loops would otherwise compile its loops once more).
            return lax.cond(store, stored, advanced, state), step(operand)[0], ct, acc

        which = jnp.where(turn, 0, jnp.where(store, 2, 1))
        branches = [reverse, advance, advance_and_store]
        if xla_cpu:
            which, branches = jnp.minimum(which, 1), [reverse, advance_xla_cpu]
        state, xs, ct, acc = schedule_branch(lambda which, *operands: lax.switch(
            which, branches, *operands))(which, state, steps, slots, operand, ct, acc)
        if xla_cpu:   # the switch's xs: the stored step when `store`
            slots = [write_slot(s, store_slot, x, store) for s, x in zip(slots, xs)]
        given, zero_started = partition_list(zero_ct, ct)
        return [state, steps, *slots, *xs, *given,
                *zeros.update(started, [*zero_started, *acc])]

    def gradient_step(self, *args):
        """`body`, in both forms unless the user's body has effects; `order` passes
        through outside them, where `functional_while` sees it is loop-invariant."""
        portable = partial(self.body, False)
        state, steps, *rest = portable(*args) if self.body_jaxpr.effects else xla_cpu_choice(
            partial(self.body, True), portable, *args)
        return [state, steps, args[self.nc + 3], *rest]


checkpointed_linear_while_p.def_abstract_eval(
    lambda *avals, body_jaxpr, const_nz, carry_nz, **_: [
        a.to_tangent_aval() for a, nz in zip(body_jaxpr.out_avals, carry_nz) if nz])
def_by_expansion(checkpointed_linear_while_p, expand_checkpointed_linear_while)
ad.primitive_transposes[checkpointed_linear_while_p] = tracing_for_operands(
    checkpointed_linear_while_transpose)
