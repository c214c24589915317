"""Reverse mode: the primal While with accumulators, the linear While, the gradient While.

Linearizing `functional_while_p` (what `jax.grad`, `jax.vjp` and `jax.linearize`
do) emits two loops::

    # (a) the primal While, extended with accumulators (role "forward")
    stacks = [zeros((static_bound, *r.shape)) for r in step_residuals]
    i = 0
    while i < bound and cond(i, carry):
        carry, res = body_and_residuals(hoisted, i, carry)
        for s, r in zip(stacks, res): s[i] = r
        i += 1
    n = i

    # (b) the linear While (`linear_while_p`), staged on the tangent side
    for i in range(n):
        dcarry = body_linear(invariants, [s[i] for s in stacks], dconsts, dcarry)

Partial evaluation keeps (a) in the forward pass. The transpose of (b) is the
**gradient While** (role "gradient")::

    last = n - 1
    ct_consts = 0
    for k in range(n):                     # counts up, pops row last - k
        ct_carry, ct_step = transpose(body_linear)(invariants, rows(last - k), ct_carry)
        ct_consts += ct_step
    return ct_consts, ct_carry

With `checkpoints` set, `_checkpoint.py` linearizes instead (no bound needed,
K carries kept, steps recomputed); `_linearize.py` chooses.

Both are `functional_while_p`, so forward mode, batching and further
differentiation of them (grad-of-grad, jvp-of-grad) reuse the same rules. They
choose their own unrolling (see `whilst.ir.unroll_factor`): a `unroll`
given to `while_loop` applies to the loop as written.

Residual choice: only what `body_linear` reads is kept; residuals computed from
loop constants alone are hoisted out of the loop and computed once; constants
(pass-through carries become constants, see `functional_while`) are passed as
they are; everything else is stacked, one row per step, in buffers preallocated
to `static_bound` rows (see `_stack_avals`), left uninitialized.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.interpreters.ad import Zero

from whilst._jax_compat import (
    apply_primitive, backward_pass, linearize_jaxpr, merge_lists, partition_list,
    scan_known_hoisting, split_list)

from whilst.ir._buffers import ZeroStarted, uninitialized
from whilst.ir._errors import unbounded_reverse_mode_error
from whilst.ir._functional_while import (
    COUNTER_AVAL, functional_while, split_operands)
from whilst.ir._tracing import always_true, call, trace_closed


# Stacks are indexed with the primitives themselves: `0 <= index < len(stack)`
# holds by construction, and lax.dynamic_slice's wrapping of negative indices
# (a select on the index) costs IREE a device round trip per step.

def _row_index(index, ndim):
    zero = lax.full((), 0, np.int32)
    return (index, *[zero] * (ndim - 1))


def _read_rows(stacks, index):
    """`[s[index] for s in stacks]`."""
    return [lax.dynamic_slice_p.bind(s, *_row_index(index, s.ndim),
                                         slice_sizes=(1, *s.shape[1:]))[0]
            for s in stacks]


def _write_rows(stacks, rows, index):
    """`s[index] = r` for each stack, as one in-place `dynamic_update_slice` each."""
    return [lax.dynamic_update_slice_p.bind(s, r.astype(s.dtype)[None],
                                                *_row_index(index, s.ndim))
            for s, r in zip(stacks, rows)]


# ----------------------------------------------------------- the linear While

linear_while_p = Primitive("linear_while")
linear_while_p.multiple_results = True


def expand_linear_while(n, *operands, body_jaxpr, n_invariants, n_stacks, n_dconsts,
                        static_bound, name):
    """`linear_while_p` as a `functional_while_p` (role "linear")::

        for i in range(n):
            dcarry = body(*invariants, *[s[i] for s in stacks], *dconsts, *dcarry)
        return dcarry
    """
    invariants, stacks, dconsts, dcarry = split_list(list(operands),
                                                     [n_invariants, n_stacks, n_dconsts])
    nconsts = n_invariants + n_stacks + n_dconsts

    def body(*args):
        inv, stk, dc, (i,), dx = split_list(args, [n_invariants, n_stacks, n_dconsts, 1])
        return call(body_jaxpr, *inv, *_read_rows(stk, i), *dc, *dx)

    const_avals = [jax.typeof(x) for x in [*invariants, *stacks, *dconsts]]
    carry_avals = [jax.typeof(x) for x in dcarry]
    body_jaxpr_ = trace_closed(body, [*const_avals, COUNTER_AVAL, *carry_avals],
                               "linear_while_body")
    _, *out = functional_while(
        [], list(operands[:nconsts]), n, dcarry,
        cond_jaxpr=always_true([COUNTER_AVAL, *carry_avals]), body_jaxpr=body_jaxpr_,
        static_bound=static_bound, name=name, role="linear")
    return out


linear_while_p.def_impl(lambda *args, **params: apply_primitive(
    linear_while_p, *args, **params))
linear_while_p.def_abstract_eval(
    lambda *avals, body_jaxpr, **_: list(body_jaxpr.out_avals))


def _linear_while_jvp(primals, tangents, **params):
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jax.jvp(lambda *a: expand_linear_while(*a, **params), primals, tangents)


def _linear_while_batch(args, dims, **params):
    out = jax.vmap(lambda *a: expand_linear_while(*a, **params), in_axes=tuple(dims))(*args)
    return out, [0] * len(out)


ad.primitive_jvps[linear_while_p] = _linear_while_jvp
batching.primitive_batchers[linear_while_p] = _linear_while_batch
mlir.register_lowering(linear_while_p,
                       mlir.lower_fun(expand_linear_while, multiple_results=True))


def _transpose_linear_while(cts, n, *operands, body_jaxpr, n_invariants, n_stacks,
                            n_dconsts, static_bound, name):
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
        (last,), inv, stk, kd, (k,), given, started = split_list(
            args, [1, n_invariants, n_stacks, nkd, 1, ngiven])
        zero_started, acc = split_list(zeros.unpack(started), [sum(zero_ct)])
        ct_x = merge_lists(zero_ct, given, zero_started)
        rows = _read_rows(stk, last - k)
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

    consts = [n - 1, *invariants, *stacks, *known_dconsts]
    const_avals = [jax.typeof(x) for x in consts]
    carry_avals = [*[jax.typeof(c) for c in ct_given], *zeros.avals]
    grad_body = trace_closed(body, [*const_avals, COUNTER_AVAL, *carry_avals],
                             "gradient_while_body")
    _, *outs = functional_while(
        [], consts, n, [*ct_given, *zeros.initial()],
        cond_jaxpr=always_true([COUNTER_AVAL, *carry_avals]), body_jaxpr=grad_body,
        static_bound=static_bound, name=name, role="gradient")
    given_out, started_out = split_list(outs, [ngiven])
    zero_started_out, acc_out = split_list(zeros.unpack(started_out), [sum(zero_ct)])
    ct_dx_out = merge_lists(zero_ct, given_out, zero_started_out)
    acc_iter = iter(acc_out)
    ct_dconsts = [next(acc_iter) if lin else None for lin in dconst_linear]
    return [None, *[None] * (n_invariants + n_stacks), *ct_dconsts, *ct_dx_out]


ad.primitive_transposes[linear_while_p] = _transpose_linear_while


# ------------------------------------------------- linearizing the functional While

def stored_linearize(is_vjp, nzs, *primals, cond_jaxpr, body_jaxpr, cond_nconsts,
                     body_nconsts, static_bound, name, role, accumulators, unroll):
    """The linearize rule of `functional_while_p` without `checkpoints` (see the
    module docstring)."""
    cond_consts, body_consts, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    _, const_nz, _, carry_nz = split_operands(nzs, cond_nconsts, body_nconsts)
    del unroll  # the loops below choose their own (see the module docstring)
    if static_bound is None:
        raise unbounded_reverse_mode_error(name)

    ninner = len(body_jaxpr.consts)
    first_carry = body_nconsts + 1
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
    ncarry = len(carry)
    row_avals = primal_jaxpr.out_avals[ncarry:]
    assert len(row_avals) == n_rows

    # (a) the primal While with accumulators.
    stack_avals = _stack_avals(row_avals, static_bound)
    nh = len(hoisted_consts)

    def forward_body(*args):
        consts, (i,), xs, stacks = split_list(args, [nh, 1, ncarry])
        outs = call(primal_jaxpr, *consts, i, *xs)
        new_xs, rows = split_list(outs, [ncarry])
        return [*new_xs, *_write_rows(stacks, rows, i)]

    carry_avals = body_jaxpr.in_avals[first_carry:]
    fwd_body = trace_closed(forward_body, [*[jax.typeof(c) for c in hoisted_consts],
                                           COUNTER_AVAL, *carry_avals, *stack_avals],
                            "forward_with_accumulators_body")

    def forward_cond(*args):
        consts, (i,), xs, _ = split_list(args, [cond_nconsts, 1, ncarry])
        return call(cond_jaxpr, *consts, i, *xs)

    fwd_cond = trace_closed(forward_cond, [*cond_jaxpr.in_avals, *stack_avals],
                            "forward_with_accumulators_cond")
    stacks0 = [uninitialized(a.shape, a.dtype) for a in stack_avals]
    n, *outs = functional_while(
        cond_consts, hoisted_consts, bound, [*carry, *stacks0],
        cond_jaxpr=fwd_cond, body_jaxpr=fwd_body, static_bound=static_bound,
        name=name, role=role, accumulators=accumulators + n_rows)
    carry_out, stacks = split_list(outs, [ncarry])

    # (b) the linear While, with its body taking [invariants, rows, dconsts, dcarry].
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
        inv, rows, rest = split_list(args, [n_inv, n_rows])
        res = [inv[j] if kind == "invariant" else rows[j] for kind, j in residual_kinds]
        return call(tangent_jaxpr, *res, *rest)

    lin_body = trace_closed(linear_body, [*inv_avals, *row_avals, *dconst_avals,
                                          *dcarry_avals], "linear_while_body")
    carry_tangent_avals = [a.to_tangent_aval() for a in carry_avals]

    def linearized(residuals, *tangents):
        n, inv, stk = split_list(residuals, [1, n_inv])
        _, dconsts, _, dcarry = split_operands(tangents, cond_nconsts, body_nconsts)
        dconsts = [ad.instantiate_zeros(t) for t, nz in zip(dconsts, const_nz) if nz]
        dcarry = [ad.instantiate_zeros(t) for t, nz in zip(dcarry, carry_nz) if nz]
        out = linear_while_p.bind(
            *n, *inv, *stk, *dconsts, *dcarry, body_jaxpr=lin_body, n_invariants=n_inv,
            n_stacks=n_rows, n_dconsts=n_dconsts, static_bound=static_bound, name=name)
        out_iter = iter(out)
        dcarry_out = [next(out_iter) if nz else Zero(a)
                      for nz, a in zip(carry_nz, carry_tangent_avals)]
        return [Zero(COUNTER_AVAL.to_tangent_aval()), *dcarry_out]

    return [n, *carry_out], [False, *carry_nz], [n, *invariants, *stacks], linearized


def _stack_avals(row_avals, static_bound):
    """One `[rows, *row.shape]` stack per residual. A zero-trip loop still needs a
    row; the j-th stack of rows of one shape and dtype gets j spare rows, so every
    stack of a loop has a type of its own (see `uninitialized`)."""
    seen = {}
    avals = []
    for a in row_avals:
        key = (tuple(a.shape), np.dtype(a.dtype))
        spare = seen[key] = seen.get(key, -1) + 1
        avals.append(ShapedArray((max(static_bound, 1) + spare, *a.shape), a.dtype))
    return avals


def _hoisted_flags(in_fwd_res, which_hoisted):
    """Align `which_hoisted` (one flag per non-forwarded residual) with all residuals."""
    it = iter(which_hoisted)
    return [False if f is not None else next(it) for f in in_fwd_res]

