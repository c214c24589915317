"""Reverse mode: the primal While with accumulators, the linear While, the gradient While.

Linearizing `functional_while_p` (what `jax.grad`, `jax.vjp` and `jax.linearize`
do) emits two loops::

    # (a) the primal While, pushing the residuals of each step (role "forward")
    stacks = [empty((rows, *r.shape)) for r in step_residuals]
    i = 0
    while i < bound and cond(i, carry):
        carry, res = body_and_residuals(hoisted, i, carry)
        for s, r in zip(stacks, res): s[pad + i] = r
        i += 1
    n = i

    # (b) the linear While (`linear_while_p`), staged on the tangent side
    for i in range(n):
        dcarry = body_linear(invariants, [s[pad + i] for s in stacks], dconsts, dcarry)

Partial evaluation keeps (a) in the forward pass. The transpose of (b) is the
**gradient While** (role "gradient")::

    top = pad + n - 1
    ct_consts = 0
    for k in range(n):                     # counts up, pops row top - k
        ct_carry, ct_step = transpose(body_linear)(invariants, rows(top - k), ct_carry)
        ct_consts += ct_step
    return ct_consts, ct_carry

The pushes and pops are the loops' own (`_stacks.py`), so the lowering moves
the rows of k unrolled steps as one chunk. The stacks are laid out here for the
factors the lowering will choose when exporting: the forward's k_f sizes them
(`rows` = pad + n rounded up to k_f) and the gradient's k_g sets `pad = k_g - 1`
rows below step 0, so that its chunk reads never start below row 0. (The
lowering never unrolls past what the layout allows.)

This is used when `static_bound` rows fit in the loop's `gradient_memory`, or
when a step keeps no rows (with any bound or none: there are no stacks);
otherwise `_budget.py` stores the first steps this way and checkpoints the rest,
and with `checkpoints` set `_checkpointed.py` linearizes instead (K carries kept,
steps recomputed); `_linearization.py` chooses.

Both are `functional_while_p`, so forward mode, batching and further
differentiation of them (grad-of-grad, jvp-of-grad) reuse the same rules. A
`unroll` given to `while_loop` applies to the loop as written, to (a) and to
the gradient While.

Residual choice: only what `body_linear` reads is kept; residuals computed from
loop constants alone are hoisted out of the loop and computed once; constants
(pass-through carries become constants, see `functional_while`) are passed as
they are; everything else is stacked, one row per step, in buffers preallocated
to `static_bound` rows (see `_stacks.stack_avals`), left uninitialized.
"""
from __future__ import annotations

import dataclasses

import jax
from jax.extend.core import Primitive
from jax.interpreters import ad
from jax.interpreters.ad import Zero

from whilst._jax_compat import (
    backward_pass, is_constant_shape, linearize_jaxpr, merge_lists,
    partition_list, scan_known_hoisting, split_list)
from whilst.ir._buffers import ZeroStarted
from whilst.ir._functional_while import (
    COUNTER_AVAL, UNBOUNDED, def_by_expansion, functional_while, split_operands)
from whilst.ir.reverse._packing import RowPacking
from whilst.ir.reverse._policy import EveryStep
from whilst.ir._stacks import pushed_rows, read_rows
from whilst.ir._tracing import always_true, call, trace_closed, tracing_for_operands
from whilst.ir._unroll import nbytes, unroll_factor


# ----------------------------------------------------------- the linear While

linear_while_p = Primitive("linear_while")
linear_while_p.multiple_results = True


def expand_linear_while(n, *operands, body_jaxpr, n_invariants, n_stacks, n_dconsts,
                        static_bound, name, row_offset, unroll, gradient):
    """`linear_while_p` as a `functional_while_p` (role "linear")::

        for i in range(n):
            dcarry = body(*invariants, *[s[row_offset + i] for s in stacks], *dconsts,
                          *dcarry)
        return dcarry

    `unroll` is the gradient While's (its transpose); `gradient` the policy of both
    (`stored_linearize`)."""
    del unroll
    invariants, stacks, dconsts, dcarry = split_list(list(operands),
                                                     [n_invariants, n_stacks, n_dconsts])
    nconsts = n_invariants + n_stacks + n_dconsts

    def body(*args):
        inv, stk, dc, (i,), dx = split_list(args, [n_invariants, n_stacks, n_dconsts, 1])
        return call(body_jaxpr, *inv, *read_rows(stk, i + row_offset), *dc, *dx)

    const_avals = [jax.typeof(x) for x in [*invariants, *stacks, *dconsts]]
    carry_avals = [jax.typeof(x) for x in dcarry]
    body_jaxpr_ = trace_closed(body, [*const_avals, COUNTER_AVAL, *carry_avals],
                               "linear_while_body")
    _, *out = functional_while(
        [], list(operands[:nconsts]), n, dcarry,
        cond_jaxpr=always_true([COUNTER_AVAL, *carry_avals]), body_jaxpr=body_jaxpr_,
        static_bound=static_bound, name=name, role="linear", gradient=gradient)
    return out


def linear_while_transpose(cts, n, *operands, body_jaxpr, n_invariants, n_stacks,
                           n_dconsts, static_bound, name, row_offset, unroll, gradient):
    """The gradient While: replay the stored steps backwards (see the module docstring)."""
    invariants, stacks, dconsts, dcarry = split_list(list(operands),
                                                     [n_invariants, n_stacks, n_dconsts])
    assert not ad.is_undefined_primal(n)
    assert not any(map(ad.is_undefined_primal, [*invariants, *stacks]))
    dconst_linear = [ad.is_undefined_primal(x) for x in dconsts]
    dconst_avals = [x.aval if lin else jax.typeof(x) for x, lin in zip(dconsts, dconst_linear)]
    dcarry_avals = [x.aval for x in dcarry]
    known_dconsts = [x for x, lin in zip(dconsts, dconst_linear) if not lin]
    acc_avals = [a for a, lin in zip(dconst_avals, dconst_linear) if lin]
    # Everything that starts at zero: the accumulators, and the cotangents of
    # carries the caller does not use (see `ZeroStarted`).
    zero_ct = [type(ct) is Zero for ct in cts]
    ct_given = [ct for ct, z in zip(cts, zero_ct) if not z]
    zeros = ZeroStarted([a for a, z in zip(dcarry_avals, zero_ct) if z] + acc_avals)
    nkd, ngiven = len(known_dconsts), len(ct_given)

    def body(*args):
        inv, kd, rows, (_,), given, started = split_list(
            args, [n_invariants, nkd, n_stacks, 1, ngiven])
        zero_started, acc = split_list(zeros.unpack(started), [sum(zero_ct)])
        ct_x = merge_lists(zero_ct, given, zero_started)
        kd_iter = iter(kd)
        dc_in = [ad.UndefinedPrimal(a) if lin else next(kd_iter)
                 for a, lin in zip(dconst_avals, dconst_linear)]
        dx_in = [ad.UndefinedPrimal(a) for a in dcarry_avals]
        cts_in = backward_pass(body_jaxpr.jaxpr, False, body_jaxpr.consts,
                                  [*inv, *rows, *dc_in, *dx_in], ct_x)
        _, ct_dc, ct_dx = split_list(cts_in, [n_invariants + n_stacks, n_dconsts])
        ct_dc = [ct for ct, lin in zip(ct_dc, dconst_linear) if lin]
        ct_dx = [ad.instantiate_zeros(ct) for ct in ct_dx]
        new_acc = [a + ad.instantiate_zeros(ct) for a, ct in zip(acc, ct_dc)]
        new_given, new_zero_started = partition_list(zero_ct, ct_dx)
        return [*new_given, *zeros.update(started, [*new_zero_started, *new_acc])]

    # The gradient While pops row `n - 1 + row_offset - k` of each stack at step k.
    consts = [*invariants, *known_dconsts]
    in_avals = [*[jax.typeof(x) for x in consts], *[jax.typeof(s).update(shape=s.shape[1:])
                                                     for s in stacks]]
    carry_avals = [*[jax.typeof(c) for c in ct_given], *zeros.avals]
    grad_body = trace_closed(body, [*in_avals, COUNTER_AVAL, *carry_avals],
                             "gradient_while_body")
    _, *outs = functional_while(
        [], [*consts, *stacks], n, [*ct_given, *zeros.initial()],
        cond_jaxpr=always_true([COUNTER_AVAL, *carry_avals]), body_jaxpr=grad_body,
        static_bound=static_bound, name=name, role="gradient", unroll=unroll,
        gradient=gradient, pops=len(stacks), pop_pad=row_offset)
    given_out, started_out = split_list(outs, [ngiven])
    zero_started_out, acc_out = split_list(zeros.unpack(started_out), [sum(zero_ct)])
    ct_dx_out = merge_lists(zero_ct, given_out, zero_started_out)
    acc_iter = iter(acc_out)
    ct_dconsts = [next(acc_iter) if lin else None for lin in dconst_linear]
    return [None, *[None] * (n_invariants + n_stacks), *ct_dconsts, *ct_dx_out]


linear_while_p.def_abstract_eval(
    lambda *avals, body_jaxpr, **_: list(body_jaxpr.out_avals))
def_by_expansion(linear_while_p, expand_linear_while)
ad.primitive_transposes[linear_while_p] = tracing_for_operands(linear_while_transpose)


# ------------------------------------------------- linearizing the functional While

@dataclasses.dataclass
class StepResiduals:
    """What reverse mode keeps of one step of a loop, before any loop is built.

    `primal_jaxpr(*hoisted_consts, i, *carry) -> (*carry, *rows)` is the body that
    also returns the step's rows; `lin_body(*invariants, *rows, *dconsts, *dcarry)`
    is the step's tangent map; `carry_nz` the carries with non-zero tangents."""
    primal_jaxpr: object
    hoisted_consts: list
    invariants: list
    lin_body: object
    row_avals: list
    const_nz: list
    carry_nz: list

    @property
    def row_bytes(self) -> int | None:
        """Bytes of the rows of one step (None where a shape is symbolic)."""
        if not all(is_constant_shape(a.shape) for a in self.row_avals):
            return None
        return sum(nbytes(a) for a in self.row_avals)


def step_residuals(is_vjp, nzs, *primals, body_jaxpr, cond_nconsts, body_nconsts,
                   **_) -> StepResiduals:
    """The residual analysis of `stored_linearize` (see the module docstring)."""
    _, body_consts, _, carry = split_operands(primals, cond_nconsts, body_nconsts)
    _, const_nz, _, carry_nz = split_operands(nzs, cond_nconsts, body_nconsts)
    ninner = len(body_jaxpr.consts)
    # Residuals that are loop constants are passed as they are (never the carry).
    allow_fwds = [True] * (ninner + body_nconsts) + [False] * (1 + len(carry))

    for _ in range(len(carry) + 1):
        primal_jaxpr, num_res, carry_nz_out, in_fwd_res, tangent_jaxpr = linearize_jaxpr(
            body_jaxpr, [*const_nz, False, *carry_nz], instantiate=carry_nz,
            allow_fwds=allow_fwds, is_vjp=is_vjp)
        if carry_nz_out == carry_nz:
            break
        carry_nz = [a or b for a, b in zip(carry_nz, carry_nz_out)]

    # Hoist residuals that depend on loop constants only.
    primal_jaxpr, hoisted_consts, which_hoisted, hoisted_res = scan_known_hoisting(
        primal_jaxpr, list(body_consts), num_res)

    # Each residual is an invariant value or a row of a stack.
    fwd_sources = [*body_jaxpr.consts, *body_consts]
    hoisted_iter, step_index = iter(hoisted_res), 0
    residual_kinds, invariants = [], []
    for f, hoisted in zip(in_fwd_res, _hoisted_flags(in_fwd_res, which_hoisted)):
        if f is not None:
            residual_kinds.append(("invariant", len(invariants)))
            invariants.append(fwd_sources[f])
        elif hoisted:
            residual_kinds.append(("invariant", len(invariants)))
            invariants.append(next(hoisted_iter))
        else:
            residual_kinds.append(("row", step_index))
            step_index += 1
    n_rows = step_index
    assert len(primal_jaxpr.out_avals) == len(carry) + n_rows
    packing = RowPacking.plan(primal_jaxpr.out_avals[len(carry):])
    if packing.groups:
        primal_jaxpr = _pushing_packed_rows(primal_jaxpr, len(carry), packing)
    row_avals = primal_jaxpr.out_avals[len(carry):]

    # The linear While's body takes [invariants, rows, dconsts, dcarry].
    n_inv = len(invariants)
    n_dconsts = sum(const_nz)
    res_avals = tangent_jaxpr.in_avals[:len(residual_kinds)]
    dconst_avals = tangent_jaxpr.in_avals[len(residual_kinds):][:n_dconsts]
    dcarry_avals = tangent_jaxpr.in_avals[len(residual_kinds) + n_dconsts:]
    inv_avals = [None] * n_inv
    for (kind, j), a in zip(residual_kinds, res_avals):
        if kind == "invariant":
            inv_avals[j] = a

    def linear_body(*args):
        inv, packed, rest = split_list(args, [n_inv, len(row_avals)])
        rows = packing.unpack(packed)
        res = [inv[j] if kind == "invariant" else rows[j] for kind, j in residual_kinds]
        return call(tangent_jaxpr, *res, *rest)

    lin_body = trace_closed(linear_body, [*inv_avals, *row_avals, *dconst_avals,
                                          *dcarry_avals], "linear_while_body")
    return StepResiduals(primal_jaxpr, hoisted_consts, invariants, lin_body, row_avals,
                         list(const_nz), carry_nz)


def stored_linearize(steps: StepResiduals, *primals, cond_jaxpr, body_jaxpr, cond_nconsts,
                     body_nconsts, static_bound, name, role, unroll, gradient):
    """The linearize rule of `functional_while_p` storing every step's residual rows
    in stacks of `static_bound` rows (see the module docstring). A loop whose steps
    keep no rows may have no bound (None): its linear and gradient Whiles then keep
    the loop's policy, so that differentiated again, where their steps keep rows,
    they choose as the loop does (not `EveryStep()`, which would store rows for
    every step an int32 counts)."""
    cond_consts, _, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    ncarry, n_rows, n_inv = len(carry), len(steps.row_avals), len(steps.invariants)
    assert static_bound is not None or not n_rows
    const_nz, carry_nz = steps.const_nz, steps.carry_nz
    n_dconsts = sum(const_nz)
    carry_avals = body_jaxpr.in_avals[body_nconsts + 1:]

    # (a) the primal While, pushing the residual rows of each step.
    # (no more steps per iteration than the loop can take: padding stays below the bound)
    loop_steps = UNBOUNDED if static_bound is None else max(static_bound, 1)
    grad_unroll = min(unroll_factor(always_true([]), steps.lin_body, unroll), loop_steps)
    fwd_unroll = min(unroll_factor(cond_jaxpr, steps.primal_jaxpr, unroll), loop_steps)
    pad = grad_unroll - 1
    n, *outs = functional_while(
        cond_consts, steps.hoisted_consts, bound, carry, cond_jaxpr=cond_jaxpr,
        body_jaxpr=steps.primal_jaxpr, static_bound=static_bound, name=name, role=role,
        unroll=unroll, gradient=gradient, accumulators=n_rows,
        stack_rows=0 if static_bound is None else pushed_rows(static_bound, fwd_unroll, pad),
        row_offset=pad)
    carry_out, stacks = split_list(outs, [ncarry])
    carry_tangent_avals = [a.to_tangent_aval() for a in carry_avals]

    def linearized(residuals, *tangents):
        n, inv, stk = split_list(residuals, [1, n_inv])
        _, dconsts, _, dcarry = split_operands(tangents, cond_nconsts, body_nconsts)
        dconsts = [ad.instantiate_zeros(t) for t, nz in zip(dconsts, const_nz) if nz]
        dcarry = [ad.instantiate_zeros(t) for t, nz in zip(dcarry, carry_nz) if nz]
        out_iter = iter(linear_while_p.bind(
            *n, *inv, *stk, *dconsts, *dcarry, body_jaxpr=steps.lin_body,
            n_invariants=n_inv, n_stacks=n_rows, n_dconsts=n_dconsts,
            static_bound=static_bound, name=name, row_offset=pad, unroll=unroll,
            gradient=EveryStep() if static_bound is not None else gradient))
        dcarry_out = [next(out_iter) if nz else Zero(a)
                      for nz, a in zip(carry_nz, carry_tangent_avals)]
        return [Zero(COUNTER_AVAL.to_tangent_aval()), *dcarry_out]

    return ([n, *carry_out], [False, *carry_nz], [n, *steps.invariants, *stacks],
            linearized)


def _pushing_packed_rows(primal_jaxpr, ncarry, packing):
    """`primal_jaxpr` (returning `(*carry, *rows)`) returning `(*carry, *packing.pack(rows))`."""
    def body(*args):
        carry, rows = split_list(call(primal_jaxpr, *args), [ncarry])
        return [*carry, *packing.pack(rows)]
    return trace_closed(body, primal_jaxpr.in_avals, "primal_body")


def _hoisted_flags(in_fwd_res, which_hoisted):
    """Align `which_hoisted` (one flag per non-forwarded residual) with all residuals."""
    it = iter(which_hoisted)
    return [False if f is not None else next(it) for f in in_fwd_res]
