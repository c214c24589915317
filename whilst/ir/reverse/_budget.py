"""Reverse mode within a memory budget: chunks of stored steps, checkpointed between them.

A loop whose stored residuals could outgrow `gradient_memory` bytes (no bound,
or a bound of more rows than fit; a step keeping some rows) is cut into chunks
of S steps, S the rows that fit. Linearizing it emits one forward While over the chunks::

    # (a) the forward While (role "forward", checkpoints K)
    c, n, m = 0, 0, S
    while m == length(c - 1) and n < bound and cond(n, carry):
        save, k = online_policy(c)          # `_schedule.py`, over chunks
        if save: slots[k], pos[k] = carry, c
        # at most S steps, each step's rows (`_stored.py`'s) into the stacks
        carry_at_start = carry
        m, carry, stacks = stored_while(cond(n + i, ...), body(n + i, ...), carry,
                                        stacks, bound=min(length(c), bound - n))
        n += m; c += 1

where chunk c holds `length(c)` steps from `start(c)`: S, but for chunk 0, which
lacks `lead` of them where there is a bound, so that the chunks end at it (`_lead`).

Exported, the forward While carries no stacks: its chunk loop keeps no rows
(each iteration passing a whole stack along cost IREE a pass over the budget),
and each chunk keeps its start, so that the last chunk's start `last_start`
comes out of the While. On the tangent side, `budget_linear_while_p`, whose
transpose is the gradient: one gradient While runs the checkpoint schedule of
`_checkpointed.py` over chunks, from the last one: each iteration advances one
chunk from the restored carry or reverses one. Both run the chunk's steps from
its checkpoint, storing their rows, and a stored gradient of those rows that
takes 0 steps unless the chunk is reversed: counted Whiles, and no
`stablehlo.case` (which IREE runs from the host)::

    last = c - 1; cur, fine, x = last, last + 1, last_start
    while fine > 0:
        turn = cur == fine - 1
        steps = min(length(cur), n - start(cur))
        x_next, stacks = stored_while(x, steps)            # chunk cur, new stacks
        ct, dc = stored_gradient(stacks, ct, steps if turn else 0)
        ct_consts += dc
        if turn: fine = cur; restore the latest checkpoint (cur, x)
        else: cur += 1; x = x_next; store x if cur is the planned chunk

The slots' sort that starts the schedule runs under `lax.cond(c > 1)`: a loop
that ended in its first chunk skips it. So a loop is one forward and one
gradient While over chunks, each chunk's loops compiled once. An advance writes
rows it does not need (so the body holds two loops, not three); with c <= K
chunks the forward stored every chunk's start and no chunk is advanced. A chunk's
loops push their rows themselves (`_stacks.py`) into new stacks, so that the
lowering unrolls them as it does the stored path's loops, writing the rows of k
steps at once, with no host branch per step.

Under `jax.jit` (XLA:CPU, `xla_cpu_choice`) both Whiles carry the stacks and
their chunk loops write them in place instead, so that XLA keeps one copy.
There the forward's chunk 0, and the chunk a loop that runs to its bound ends
in, write their rows, and the other chunks keep none: a loop that ends in either
runs no step twice forwards, and any other runs its last chunk's steps again
after the While, writing their rows (rows cost what the primal costs again where
they hold values the primal does not compute, such as `cos(x)` for `sin(x)`).
The last chunk's rows are then in `stacks`, so its stored gradient runs first,
as for a loop that fits; the gradient While reverses chunks `last - 1, .., 0`,
its start (a sort and a restore) under `lax.cond(c > 1)`. The forward While
writes every chunk's rows where rows take no such computation (the step's own
output, or none), for a body with effects (a `jax.debug.callback` runs once per
step forwards; exported too), and for a body holding loops (its chunk loop's
copies would multiply with the nesting); the gradient While of such a body
starts at the last chunk, as exported, but its first trip recomputes no step
and reverses that chunk from the forward's stacks, so that the chunk's stored
gradient, its loops' gradients included, is compiled once.
Eagerly (no jax.jit), where each op is a program of its own, the forward's
stacks are made in the forward While's program and the gradient While pushes:
a While given stacks made by another program copies them whole.

A loop that ends within its first chunk runs one chunk forwards and its stored
gradient: the stored path, plus a zero-trip gradient While. `S` and `K` share
the budget (`budget_split`): K copies of the carry take at most a quarter of
it (2 <= K <= MAX_CHECKPOINTS), the stacks of S rows the rest. Where fewer than
MIN_CHUNK_ROWS rows fit (or sizes are symbolic), each step is a chunk of its
own: `_checkpointed.py` linearizes with K checkpoints and no stored rows. A loop
linearized under more reverse-mode derivatives (higher orders) splits a 32nd of
the budget per derivative: each next derivative stores every row of each of the
chunk's loops, and copies of the Whiles over chunks as many as fit the whole
budget (`ChunkedLoop.nbytes`), so that orders 2-4 keep to about the budget.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Primitive
from jax.interpreters import ad
from jax.interpreters import partial_eval as pe
from jax.interpreters.ad import Zero

from whilst._jax_compat import is_concrete, split_list
from whilst.ir._buffers import uninitialized
from whilst.ir._inspect import holds_loops
from whilst.ir.reverse._checkpointed import (
    checkpointed_linearize, expand_checkpointed_linear_while, schedule_start, schedule_state,
    slot_stack, turned, with_level, write_slot)
from whilst.ir.reverse._policy import Budget, Checkpointed, ChunkedLoop, EveryStep
from whilst.ir.reverse._schedule import EMPTY, policy_init, policy_step
from whilst.ir._functional_while import (
    COUNTER_AVAL, UNBOUNDED, def_by_expansion, functional_while, split_operands)
from whilst.ir.reverse._stored import StepResiduals, linear_while_transpose
from whilst.ir._stacks import pushed_rows, stack_avals, write_rows
from whilst.ir._tracing import always_true, call, trace_closed, tracing_for_operands
from whilst.ir._unroll import total_nbytes, unroll_factor
from whilst.ir._vma import varying, vary
from whilst.ir._xla_cpu_choice import xla_cpu_choice

MIN_CHECKPOINTS, MAX_CHECKPOINTS = 2, 64
MIN_CHUNK_ROWS = 2
# A chunk's share of the budget per further reverse-mode derivative: the next
# derivative stores the rows of each of its chunk's loops, some 26 times a
# chunk's bytes in all (the issue's cos loop), in the budget's loops' copies.
HIGHER_ORDER_SHARE = 32


def budget_split(budget: int, carry_avals, steps: StepResiduals,
                 linearizations: int = 0) -> tuple[int, int]:
    """`(S, K)`: steps per chunk and checkpoints that fit in `budget` bytes (K
    copies of the carry take at least MIN_CHECKPOINTS copies, even beyond the
    budget); S = 0 where fewer than MIN_CHUNK_ROWS steps' rows fit, and S is at
    most UNBOUNDED (a loop's most steps). Under `linearizations` more reverse-mode
    derivatives (the rule's primals are their tracers: `jax.grad(jax.grad(f))`),
    both fit in `budget // HIGHER_ORDER_SHARE ** linearizations`."""
    budget //= HIGHER_ORDER_SHARE ** linearizations
    carry_bytes = total_nbytes(carry_avals)
    if carry_bytes is None or steps.row_bytes is None:
        return 0, MAX_CHECKPOINTS // 4  # sizes unknown: checkpoints only
    carry_bytes = max(carry_bytes, 1)
    K = int(np.clip(budget // 4 // carry_bytes, MIN_CHECKPOINTS, MAX_CHECKPOINTS))
    rows = min(max(budget - K * carry_bytes, 0) // max(steps.row_bytes, 1), UNBOUNDED)
    return (int(rows) if rows >= MIN_CHUNK_ROWS else 0), K


def _lead(S: int, static_bound: int | None) -> int:
    """The steps chunk 0 lacks of S, for a loop of at most `static_bound` steps: its
    chunks then end at the bound, so that the chunk a loop that runs to its bound
    ends in (whose rows the forward keeps under jit) is a full one, and chunk 0, run
    again, the shortest::

        chunks = ceil(static_bound / S)
        return chunks * S - static_bound          # 0 with no bound

    Chunk c holds steps `max(c S - lead, 0) .. (c + 1) S - lead - 1` (0 where
    `chunks * S` would pass int32: step numbers never wrap)."""
    if static_bound is None or static_bound <= S:
        return 0
    covered = -(-static_bound // S) * S
    return covered - static_bound if covered <= UNBOUNDED else 0


def shifted(jaxpr, nconsts, name):
    """`jaxpr(*consts, i, *xs)` as `f(*consts, offset, i, *xs) = jaxpr(*consts,
    offset + i, *xs)`: a chunk's steps, counted from its first."""
    avals = jaxpr.in_avals

    def shifted(*args):
        consts, (offset, i), xs = split_list(args, [nconsts, 2])
        return call(jaxpr, *consts, offset + i, *xs)

    return trace_closed(shifted, [*avals[:nconsts], COUNTER_AVAL, *avals[nconsts:]], name)


@dataclasses.dataclass(frozen=True, eq=False)
class _Chunks:
    """The loops of one chunk of S steps, shared by the forward and gradient Whiles:
    its steps writing their rows, and their stored gradient. Holds jaxprs and
    layout only (it is a parameter of `budget_linear_while_p`); the values the
    loops read are passed in."""
    S: int
    lead: int             # steps chunk 0 lacks of S (`_lead`)
    name: str
    policy: Budget
    body_jaxpr: object    # the loop's body, `(*consts, i, *xs)`
    cond: object          # the loop's cond and body with rows, shifted by a chunk's start
    primal: object
    advance: object       # `primal` without its rows
    lin_body: object      # `StepResiduals.lin_body`
    n_invariants: int
    grad_unroll: int      # the chunk gradient's and the chunk loops' unroll factors,
    fwd_unroll: int       # which lay out the stacks (see `_stored.py`)
    unroll: int | None    # the loop's `unroll`, given to the chunk's gradient While

    @classmethod
    def plan(cls, steps: StepResiduals, S, lead, *, cond_jaxpr, body_jaxpr, cond_nconsts,
             name, unroll, gradient, **_):
        cond = shifted(cond_jaxpr, cond_nconsts, f"{name}_chunk_cond")
        primal = shifted(steps.primal_jaxpr, len(steps.hoisted_consts),
                          f"{name}_chunk_primal")
        ncarry = len(body_jaxpr.out_avals)
        advance, _ = pe.dce_jaxpr(primal.jaxpr, [True] * ncarry + [False] * (
            len(primal.out_avals) - ncarry), instantiate=True)
        return cls(S, lead, name, gradient, body_jaxpr, cond, primal,
                   ClosedJaxpr(advance, primal.consts),
                   steps.lin_body, len(steps.invariants),
                   min(unroll_factor(always_true([]), steps.lin_body, unroll), S),
                   min(unroll_factor(cond, primal, unroll), S), unroll)

    def start(self, c):
        """Chunk c's first step."""
        return jnp.maximum(c * self.S - self.lead, 0) if self.lead else c * self.S

    def length(self, c):
        """Chunk c's steps where the loop runs past it."""
        S = np.int32(self.S)
        return jnp.where(c == 0, S - np.int32(self.lead), S) if self.lead else S

    @property
    def rows_computed_apart(self):
        """Whether the rows take computation that the steps without them skip
        (`cos(x)` for `sin(x)`; not the step's own output, nor a linear step's none)."""
        live, _ = pe.dce_jaxpr(self.primal.jaxpr, [True] * len(self.primal.out_avals))
        return len(self.advance.jaxpr.eqns) < len(live.eqns)

    @property
    def has_effects(self):
        """Whether the loop's cond or body has effects (`jax.debug.callback`)."""
        return bool(self.body_jaxpr.effects or self.cond.effects)

    @property
    def holds_loops(self):
        """Whether the body holds loops: their code would multiply with each copy of
        the chunk's loops (and with each level of nesting)."""
        return holds_loops(self.body_jaxpr.jaxpr)

    @property
    def carry_avals(self):
        return list(self.body_jaxpr.out_avals)

    @property
    def pad(self):
        return self.grad_unroll - 1

    @property
    def rows(self):
        return pushed_rows(self.S, self.fwd_unroll, self.pad)

    @property
    def stack_avals(self):
        ncarry = len(self.carry_avals)
        return stack_avals(self.primal.out_avals[ncarry:], self.rows)

    def stored(self, cond_consts, hoisted, start, limit, xs, stacks):
        """`(m, xs, stacks)`: at most `limit` steps from step `start` while `cond`
        holds, their rows written into `stacks` in place, one per step (see the
        module docstring)."""
        m, *outs = self._loop(cond_consts, hoisted, start, limit, xs, stacks)
        return m, outs[:len(xs)], outs[len(xs):]

    def advanced(self, cond_consts, hoisted, start, limit, xs):
        """`(m, xs)`: at most `limit` steps from step `start` while `cond` holds, their
        rows not kept."""
        m, *xs = self._loop(cond_consts, hoisted, start, limit, xs, [], rows=False)
        return m, xs

    def _loop(self, cond_consts, hoisted, start, limit, xs, stacks, cond_jaxpr=None,
              rows=True):
        """The chunk's loop (`cond_jaxpr` for the chunk's cond): where `rows`, pushing
        its rows where `stacks` is empty, else writing them into `stacks`, carried."""
        ncarry, nh, ncc = len(xs), len(hoisted), len(cond_consts)
        pushes = {} if stacks or not rows else dict(
            accumulators=len(self.stack_avals), stack_rows=self.rows, row_offset=self.pad)

        def body(*args):
            hc, (start, i), xs, stacks = split_list(args, [nh, 2, ncarry])
            if not rows:
                return call(self.advance, *hc, start, i, *xs)
            xs, rows_out = split_list(call(self.primal, *hc, start, i, *xs), [ncarry])
            return [*xs, *(write_rows(stacks, rows_out, i + self.pad) if stacks else rows_out)]

        def cond(*args):
            cc, (start, i), xs, _ = split_list(args, [ncc, 2, ncarry])
            return call(cond_jaxpr or self.cond, *cc, start, i, *xs)

        carry_avals = [*self.carry_avals, *[jax.typeof(s) for s in stacks]]
        h_avals = [jax.typeof(x) for x in hoisted]
        cc_avals = [jax.typeof(x) for x in cond_consts]
        return functional_while(
            [*cond_consts, start], [*hoisted, start], limit, [*xs, *stacks],
            cond_jaxpr=trace_closed(
                cond, [*cc_avals, COUNTER_AVAL, COUNTER_AVAL, *carry_avals],
                f"{self.name}_chunk_cond"),
            body_jaxpr=trace_closed(body, [*h_avals, COUNTER_AVAL, COUNTER_AVAL, *carry_avals],
                                    f"{self.name}_chunk_body"),
            static_bound=self.S, name=self.name, gradient=EveryStep(), **pushes)

    def recomputed(self, hoisted, start, steps, xs, stacks=()):
        """`(xs, stacks)`: the carry `steps` steps after step `start`, and their rows,
        written into `stacks` in place, or pushed into new stacks where none."""
        counted = always_true([COUNTER_AVAL, COUNTER_AVAL, *self.carry_avals])
        _, *outs = self._loop([], hoisted, start, steps, xs, list(stacks), counted)
        return outs[:len(xs)], outs[len(xs):]

    def gradient(self, steps, invariants, stacks, dconsts, ct):
        """`(ct, ct_dconsts)` through the `steps` steps whose rows are in `stacks`
        (`dconsts`: the constants' tangents, `UndefinedPrimal` where linear;
        `ct_dconsts` holds None for the others)."""
        ninv, nstk, ndc = len(invariants), len(stacks), len(dconsts)
        dcarry = [ad.UndefinedPrimal(a) for a in self.lin_body.in_avals[ninv + nstk + ndc:]]
        outs = linear_while_transpose(
            ct, steps, *invariants, *stacks, *dconsts, *dcarry,
            body_jaxpr=self.lin_body, n_invariants=ninv, n_stacks=nstk, n_dconsts=ndc,
            static_bound=self.S, name=self.name, row_offset=self.pad, unroll=self.unroll,
            gradient=EveryStep())
        ct_dconsts, ct = split_list(outs[1 + ninv + nstk:], [ndc])
        return ct, ct_dconsts


# ------------------------------------------------------------- (a) the forward While

def _packed_policy(policy):
    """The online policy's state (`policy_init`: scalars, levels, dispensable) as one
    int32 vector: the forward While starts it from one buffer. XLA:CPU's executor
    hands a program's first thunks to its thread pool (and its caller waits, 35-130
    us) when more than 8 are ready at once; a budget gradient's separate starting
    arrays made 13 of grad_tanh's (now 8)."""
    scalars, levels, dispensable = policy
    return jnp.concatenate([scalars, levels, jnp.asarray(dispensable, np.int32)])


def _unpacked_policy(ints, K):
    """Inverse of `_packed_policy`."""
    scalars, levels, dispensable = jnp.split(ints, np.cumsum([5, K]))
    return [scalars, levels, dispensable != 0]


def budget_linearize(nzs, steps: StepResiduals, S, K, *primals, cond_jaxpr, body_jaxpr,
                     cond_nconsts, body_nconsts, static_bound, name, role, unroll,
                     gradient):
    """The linearize rule of `functional_while_p` within a budget of S stored rows
    per chunk and K checkpoints (see the module docstring)."""
    loop = dict(cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr, cond_nconsts=cond_nconsts,
                body_nconsts=body_nconsts, name=name)
    if not S:
        return checkpointed_linearize(nzs, *primals, **loop, static_bound=static_bound,
                                      role=role, unroll=unroll, checkpoints=K)
    chunks = _Chunks.plan(steps, S, _lead(S, static_bound), **loop, unroll=unroll,
                          gradient=gradient)
    cond_consts, body_consts, bound, carry = split_operands(
        primals, cond_nconsts, body_nconsts)
    hoisted = steps.hoisted_consts
    ncarry, ncc, nh = len(carry), cond_nconsts, len(hoisted)

    def bound_chunk(bound):
        """The chunk a loop that runs to its bound ends in."""
        return (bound - 1 + chunks.lead) // S

    def forward_body(rows, *args):
        """One chunk, number `c`: its start saved by the schedule, then its steps, whose
        rows are written into the stacks carried by every chunk (`rows="every"`), by
        chunk 0 and the bound's last chunk only (`"first"`), or kept by none
        (`"none"`). Each chunk carries its start after the stacks."""
        cc, hc, (bound,), (c, n, _, ints), xs, (pos,), slots, kept = split_list(
            args, [ncc, nh, 1, 4, ncarry, 1, ncarry])
        save, k, policy, pos = policy_step(c, _unpacked_policy(ints, K), pos, K)
        slots = [write_slot(s, k, x, save) for s, x in zip(slots, xs)]
        limit = lax.min(bound - n, chunks.length(c))

        def advanced(stacks):
            return [*chunks.advanced(cc, hc, n, limit, xs), stacks]

        stacks = kept[:-ncarry]
        if rows == "every":
            m, new_xs, stacks = chunks.stored(cc, hc, n, limit, xs, stacks)
        elif rows == "none":
            m, new_xs, _ = advanced([])
        else:
            m, new_xs, stacks = lax.cond(
                (c == 0) | (c == bound_chunk(bound)),
                lambda stacks: list(chunks.stored(cc, hc, n, limit, xs, stacks)),
                advanced, stacks)
        kept = [*stacks, *xs]
        return [n + m, m, _packed_policy(policy), *new_xs, pos, *slots, *kept]

    def forward_cond(*args):
        cc, (bound,), (c, n, m, _), xs, _ = split_list(args, [ncc, 1, 4, ncarry])
        (more,) = call(cond_jaxpr, *cc, n, *xs)
        full = chunks.length(c - 1) if chunks.lead else S   # the chunk run was full
        return [(m == full) & (n < bound) & more]

    def over_chunks(rows, cond_consts, hoisted, bound, init):
        """`(c, n, m, policy, *carry, pos, *slots, *kept)`: the While over chunks from
        state `init` (`forward_body`)."""
        cc_avals = [jax.typeof(x) for x in cond_consts]
        h_avals = [jax.typeof(x) for x in hoisted]
        state_avals = [jax.typeof(x) for x in init]
        return functional_while(
            [*cond_consts, bound], [*cond_consts, *hoisted, bound], np.int32(UNBOUNDED), init,
            cond_jaxpr=trace_closed(forward_cond, [*cc_avals, COUNTER_AVAL, COUNTER_AVAL,
                                                   *state_avals], "budget_forward_cond"),
            body_jaxpr=trace_closed(functools.partial(forward_body, rows),
                                    [*cc_avals, *h_avals, COUNTER_AVAL, COUNTER_AVAL,
                                     *state_avals], "budget_forward_body"),
            static_bound=None if static_bound is None else -(-static_bound // S),
            name=name, role=role, gradient=ChunkedLoop(
                checkpoints=K, nbytes=gradient.nbytes, chunk_steps=S,
                chunk_stacks=tuple((tuple(a.shape), np.dtype(a.dtype).name)
                                   for a in chunks.stack_avals)))

    def forward_while(rows, cond_consts, hoisted, bound, carry, policy0, pos0):
        """`(c, n, m, policy, *carry, pos, *slots, *stacks, *last_start, stacked)` after the
        forward While over chunks, whose chunks keep rows as `rows` says:

            "every": each chunk writes its rows into stacks the While carries;
            "none":  no chunk keeps rows (the stacks stay unwritten); the gradient
                While runs the last chunk's steps again, from `last_start`, the
                start the While kept;
            "first": chunk 0 and the bound's last chunk (a loop that runs to its
                bound ends in it) write their rows into stacks the While carries,
                the others keep none; where the last chunk run is neither, its
                steps run again after the While, writing their rows.

        `stacked`, a boolean: whether the stacks hold the last chunk's rows (all
        but "none"). The gradient While of "none" reads `last_start`; the others,
        the stacks.
        """
        # Slots and stacks start unwritten, from one op (see `_packed_policy`);
        # exported, the slots start from distinct fills and the stacks as
        # `tensor.empty`.
        slot_avals = [jax.ShapeDtypeStruct((K, *a.shape), a.dtype)
                      for a in chunks.carry_avals]
        stack_avals = [] if rows == "none" else chunks.stack_avals
        init = [np.int32(0), np.int32(S), policy0, *carry, pos0,
                *uninitialized([*slot_avals, *stack_avals],
                               [*range(ncarry), *[None] * len(stack_avals)])]
        args = [cond_consts, hoisted, bound]
        c, n, m, ints, *outs = over_chunks(rows, *args, [*init, *carry])
        carry_out, (pos,), slots, stacks, last_start = split_list(
            outs, [ncarry, 1, ncarry, len(stack_avals)])
        if rows == "none":
            stacks = uninitialized(chunks.stack_avals)
        elif rows == "first":
            last = jnp.maximum(c - 1, 0)
            written = (last == 0) | (last == bound_chunk(bound))
            start = chunks.start(last)
            _, stacks = chunks.recomputed(hoisted, start, jnp.where(written, 0, n - start),
                                          last_start, stacks)
        return [c, n, m, ints, *carry_out, pos, *slots, *stacks, *last_start,
                jnp.bool_(rows != "none")]

    def forward(cond_consts, hoisted, bound, carry):
        """`forward_while`, with every chunk's rows for a body with effects (each
        step's run once); else, on XLA:CPU, chunk 0's (every chunk's for a body
        holding loops), and exported none (module docstring)."""
        def form(rows):
            def forward_form(*args):
                cc, hc, (bound,), carry, (policy0, pos0) = split_list(
                    args, [ncc, nh, 1, ncarry])
                return forward_while(rows, cc, hc, bound, carry, policy0, pos0)
            return forward_form

        # The schedule's starting state, an argument of the forms: a constant of
        # theirs would be one of every jaxpr they are inlined into (`jax.checkpoint`'s
        # under checkify, which takes none).
        args = [*cond_consts, *hoisted, bound, *carry, _packed_policy(policy_init(K)),
                jnp.full((K,), EMPTY, np.int32)]

        if chunks.has_effects:
            return form("every")(*args)
        # "first" pays where rows cost computation of their own. A body holding loops
        # keeps one chunk loop: "first"'s three copies of it would multiply with each
        # level of nesting (HLO, and XLA's compile time).
        rows = "first" if chunks.rows_computed_apart and not chunks.holds_loops else "every"
        return xla_cpu_choice(form(rows), form("none"), *args)

    if all(map(is_concrete, primals)):
        # Eagerly (no jax.jit) each op is a program of its own: the While would copy
        # its stacks from the op that made them (the whole budget, every page
        # touched). One program makes them and runs the While, writing rows only.
        forward = jax.jit(forward)
    c, n, _, _, *outs = forward(list(cond_consts), list(hoisted), bound, list(carry))
    carry_out, (pos,), slots, stacks, last_start, (stacked,) = split_list(
        outs, [ncarry, 1, ncarry, len(chunks.stack_avals), ncarry])

    const_nz, carry_nz = steps.const_nz, steps.carry_nz
    residuals = [n, c, pos, *slots, *body_consts, *hoisted, *steps.invariants, *stacks,
                 *last_start, stacked]
    params = dict(chunks=chunks, checkpoints=K, const_nz=tuple(const_nz),
                  carry_nz=tuple(carry_nz), nconsts=len(body_consts), nhoisted=nh)

    def linearized(residuals, *tangents):
        _, dconsts, _, dcarry = split_operands(tangents, cond_nconsts, body_nconsts)
        dconsts = [ad.instantiate_zeros(t) for t, nz in zip(dconsts, const_nz) if nz]
        dcarry = [ad.instantiate_zeros(t) for t, nz in zip(dcarry, carry_nz) if nz]
        out = iter(budget_linear_while_p.bind(*residuals, *dconsts, *dcarry, **params))
        return [Zero(COUNTER_AVAL.to_tangent_aval()),
                *[next(out) if nz else Zero(a.to_tangent_aval())
                  for nz, a in zip(carry_nz, chunks.carry_avals)]]

    return [n, *carry_out], [False, *carry_nz], residuals, linearized


# --------------------------------------------------- (b) the budget's linear While

budget_linear_while_p = Primitive("budget_linear_while")
budget_linear_while_p.multiple_results = True


def _split_operands(operands, chunks, const_nz, nconsts, nhoisted):
    """`operands -> (n, c, pos, slots, consts, hoisted, invariants, stacks, last_start,
    stacked, dconsts, dcarry)`."""
    ncarry = len(chunks.carry_avals)
    (n, c, pos), slots, consts, hoisted, inv, stacks, last_start, (stacked,), dconsts, dcarry = (
        split_list(list(operands), [3, ncarry, nconsts, nhoisted, chunks.n_invariants,
                                    len(chunks.stack_avals), ncarry, 1, sum(const_nz)]))
    return n, c, pos, slots, consts, hoisted, inv, stacks, last_start, stacked, dconsts, dcarry


def expand_budget_linear_while(*operands, chunks, checkpoints, const_nz, carry_nz, nconsts,
                               nhoisted):
    """`budget_linear_while_p` applied forwards: the tangent map of the n steps,
    recomputing the primal from the carry slot 0 holds (chunk 0's first step), as
    `expand_checkpointed_linear_while`."""
    n, _, pos, slots, consts, _, _, _, _, _, dconsts, dcarry = _split_operands(
        operands, chunks, const_nz, nconsts, nhoisted)
    return expand_checkpointed_linear_while(
        n, pos, *slots, *consts, *dconsts, *dcarry, body_jaxpr=chunks.body_jaxpr,
        checkpoints=checkpoints, nbytes=None, const_nz=const_nz, carry_nz=carry_nz,
        name=chunks.name, schedule_selected=False)


# ------------------------------------------------------------- the gradient While

def budget_linear_while_transpose(cts, *operands, chunks, checkpoints, const_nz, carry_nz,
                                   nconsts, nhoisted):
    """The gradient While (see the module docstring): the last chunk's stored
    gradient, then the schedule of `_checkpointed.py`'s gradient While over chunks,
    with its integer state `[cur, fine, target, h, store_slot]` in one vector and
    the held slots as a stack (`steps` with a spare level K; slot `order[l]` holds
    chunk `steps[l]`), and no branch: each iteration advances or reverses a chunk
    with counted Whiles of S or 0 steps."""
    K = checkpoints
    n, c, pos, slots, consts, hoisted, inv, stacks, last_start, stacked, dconsts, _ = (
        _split_operands(operands, chunks, const_nz, nconsts, nhoisted))
    assert not any(map(ad.is_undefined_primal,
                       [n, c, pos, *slots, *consts, *hoisted, *inv, *stacks, *last_start,
                        stacked]))
    # A dconst given as a value (not linear) adds a constant: it has no cotangent.
    linear = [ad.is_undefined_primal(x) for x in dconsts]
    known = [x for x, lin in zip(dconsts, linear) if not lin]
    nc, nh, ninv, nk, ncarry, nstk, nct = (len(consts), len(hoisted), len(inv), len(known),
                                           len(slots), len(stacks), len(cts))

    def dconsts_with(known):
        it = iter(known)
        return [x if lin else next(it) for x, lin in zip(dconsts, linear)]

    def body(carried, folded, *args):
        hc, iv, kd, (n,), (i,), (state, steps, order), slots, xs, stacks, ct, acc = split_list(
            args, [nh, ninv, nk, 1, 1, 3, ncarry, ncarry, nstk if carried else 0, nct])
        cur, fine, target, h, store_slot = (state[j] for j in range(5))
        turn = cur == fine - 1
        start = chunks.start(cur)
        length = jnp.minimum(chunks.length(cur), n - start)
        # Chunk cur, from the restored carry: its next carry, and its rows (read
        # only where it is reversed; written anyway: one loop less in the body).
        # `folded`: the first trip reverses the last chunk, whose rows the
        # forward's stacks hold.
        x_next, stacks = chunks.recomputed(
            hc, start, jnp.where(i == 0, 0, length) if folded else length, xs, stacks)
        ct, dc = chunks.gradient(jnp.where(turn, length, 0), iv, stacks, dconsts_with(kd), ct)
        acc = [a + d for a, d in zip(acc, [d for d, lin in zip(dc, linear) if lin])]
        store_next = cur + 1 == target    # never with turn: target < fine - 1
        new_steps = with_level(steps, h, cur + 1, K)
        state_turned, x_turned = turned(cur, h, steps, order, slots, K, branched=False)
        new_state = jnp.where(turn, state_turned, jnp.where(
            store_next, schedule_state(cur + 1, fine, h + 1, order, K, branched=False),
            state + np.array([1, 0, 0, 0, 0], np.int32)))
        slots = [write_slot(s, store_slot, x, store_next) for s, x in zip(slots, x_next)]
        xs = [jnp.where(turn, r, x) for r, x in zip(x_turned, x_next)]
        return [new_state, new_steps, order, *slots, *xs, *(stacks if carried else []), *ct,
                *acc]

    def cond(n, i, state, *_):
        return [state[1] > 0]

    zero_ct = [type(ct) is Zero for ct in cts]

    def with_zeros(given):
        it = iter(given)
        return [ct if z else next(it) for ct, z in zip(cts, zero_ct)]

    def started(last, pos, *slots):
        state, steps, order, xs = schedule_start(last, pos, slots, K, branched=False)
        return [state, steps, order, *xs]

    def run_while(carried, folded, consts, carry0):
        const_avals, carry_avals = ([jax.typeof(x) for x in xs] for xs in (consts, carry0))
        _, *outs = functional_while(
            [consts[-1]], consts, np.int32(UNBOUNDED), carry0,
            cond_jaxpr=trace_closed(cond, [const_avals[-1], COUNTER_AVAL, *carry_avals],
                                    "budget_gradient_cond"),
            body_jaxpr=trace_closed(functools.partial(body, carried, folded),
                                    [*const_avals, COUNTER_AVAL, *carry_avals],
                                    "budget_gradient_body"),
            static_bound=None, name=chunks.name, role="gradient",
            gradient=Checkpointed(K, nbytes=chunks.policy.nbytes, over_chunks=True))
        return outs[3 + 2 * ncarry + (nstk if carried else 0):]

    # The last chunk's stored gradient, then the gradient While over chunks
    # `last - 1, .., 0`. Its start (a sort and a restore) runs only where the loop ran
    # past its first chunk; otherwise a state whose While takes no trip (`fine`,
    # state[1], is 0). Under jax.jit the forward's stacks, read first, are then
    # rewritten in place by each recomputed chunk. Eagerly, and for a body with
    # effects, the chunks push their rows into new stacks.
    def gradient_while(carried, last, pos, *args):
        """The gradient While, `carried`: with the stacks in its carry, rewritten in
        place by each recomputed chunk (XLA:CPU), else pushed anew (eagerly, and
        for a body with effects)."""
        slots, consts, stacks, _, given = split_list(
            list(args), [ncarry, nh + ninv + nk + 1, nstk, ncarry])
        _, iv, kd, (n,) = split_list(consts, [nh, ninv, nk])
        # The forward's stacks hold the last chunk's rows: its stored gradient first.
        ct, dc = chunks.gradient(n - chunks.start(last), iv, stacks, dconsts_with(kd),
                                 with_zeros(given))
        acc = [d for d, lin in zip(dc, linear) if lin]
        if is_concrete(last):
            # Eagerly, where each op and loop is a program compiled per call: a loop
            # that ended in its first chunk needs no While (it would take no trip),
            # and the start of one that did not runs as ops.
            if not last > 0:
                return [*ct, *acc]
            state0, steps, order, *x0 = started(last, pos, *slots)
        else:
            avals = jax.eval_shape(started, last, pos, *slots)
            state0, steps, order, *x0 = lax.cond(
                last > 0, started,
                lambda *_: [_zeros(a) for a in avals],
                last, pos, *slots)
        carry0 = [state0, steps, order, *slots, *x0, *(stacks if carried else []), *ct, *acc]
        return run_while(carried, False, consts, carry0)

    def from_last(carried, folded, last, pos, *args):
        """The While over chunks `last, .., 0`, its first trip reversing the last
        chunk: `folded`, from the forward's stacks, carried (a body holding loops,
        under jax.jit: the stored gradient's code, its loops' gradients, is then
        compiled once, not twice); else recomputed from its start, the stacks
        pushed anew (exported: one gradient While)."""
        slots, consts, stacks, last_start, given = split_list(
            list(args), [ncarry, nh + ninv + nk + 1, nstk, ncarry])
        ct = [_zeros(c.aval) if type(c) is Zero else c for c in with_zeros(given)]
        acc = [_zeros(x.aval) for x, lin in zip(dconsts, linear) if lin]
        # The slots as a stack (a sort) only where the loop ran past its first chunk:
        # reversing chunk 0 ends the While whatever they hold. (Sorted outside a
        # branch, IREE 3.13 gave a vmapped gradient wrong results once the schedule
        # stored checkpoints again, its chunk's stored gradient in a dispatch:
        # tests/ir/test_budget.py::test_vmap_of_grad_across_the_switch_on_iree.)
        stack_avals = jax.eval_shape(lambda pos: slot_stack(pos, K), pos)
        if is_concrete(last):   # eagerly: the branch taken, as ops
            steps, order = (slot_stack(pos, K) if last > 0
                            else [_zeros(a) for a in stack_avals])
        else:
            steps, order = lax.cond(
                last > 0, lambda pos: list(slot_stack(pos, K)),
                lambda pos: [_zeros(a) for a in stack_avals],
                pos)
        h = jnp.sum((pos <= last).astype(np.int32))    # the slots of chunks up to last
        state0 = jnp.stack([last, last + 1, np.int32(-1), h, order[jnp.minimum(h, K - 1)]])
        x0 = ([_zeros(a, a.shape[1:]) for a in map(jax.typeof, slots)] if folded
              else last_start)
        carry0 = [state0.astype(np.int32), steps, order, *slots, *x0,
                  *(stacks if carried else []), *ct, *acc]
        return run_while(carried, folded, consts, carry0)

    last = jnp.maximum(c - 1, 0)
    args = [last, pos, *slots, *hoisted, *inv, *known, n, *stacks, *last_start,
            *[ct for ct, z in zip(cts, zero_ct) if not z]]
    if chunks.has_effects:
        # The forward kept every chunk's rows (`forward`); neither form of a choice
        # may have effects.
        outs = gradient_while(False, *args)
    elif all(map(is_concrete, [*stacks, stacked])):
        # Eagerly (no jax.jit) the While is a program of its own: carrying the
        # forward's stacks, it would copy them whole (the budget, every page
        # touched); pushing, it writes the rows of the steps it runs only. The
        # forward ran jitted (`budget_linearize`): its XLA:CPU form wrote the last
        # chunk's rows, its portable form (under a further derivative) none.
        outs = (gradient_while(False, *args) if bool(stacked)
                else from_last(False, False, *args))
    else:
        xla_cpu = (functools.partial(from_last, True, True) if chunks.holds_loops
                   else functools.partial(gradient_while, True))
        outs = xla_cpu_choice(xla_cpu, functools.partial(from_last, False, False), *args)
    ct_out, acc_out = split_list(outs, [nct])
    acc_iter = iter(acc_out)
    ct_dconsts = [next(acc_iter) if lin else None for lin in linear]
    return [None] * (4 + 2 * ncarry + nc + nh + ninv + nstk) + [*ct_dconsts, *ct_out]


def _zeros(aval, shape=None):
    """Zeros of `aval`'s dtype (and `shape`, else its own), varying as `aval` does."""
    return vary(jnp.zeros(aval.shape if shape is None else shape, aval.dtype), varying(aval))


budget_linear_while_p.def_abstract_eval(
    lambda *avals, chunks, carry_nz, **_: [
        a.to_tangent_aval() for a, nz in zip(chunks.carry_avals, carry_nz) if nz])
def_by_expansion(budget_linear_while_p, expand_budget_linear_while)
ad.primitive_transposes[budget_linear_while_p] = tracing_for_operands(budget_linear_while_transpose)
