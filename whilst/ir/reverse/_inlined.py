"""Reverse mode of a loop of a few steps whose count is known at trace time: its
steps inlined, in sequence, and linearized by JAX as straight-line code.

A loop that tests a counter against a limit, both known at trace time (`i < 2`
from `[0, x]`: TensorFlow's testIteratedGradients), runs exactly that many steps
(`_trip_count.static_trips`). Where they are at most MAX_INLINED_STEPS and its
body is small, its policy is `Inlined(steps)` (`inlined_policy`) and its
linearization is JAX's of the steps in sequence::

    def unrolled(consts, carry):        # the loop's results, given it runs `steps`
        for i in range(steps):
            carry = body(*consts, i, *carry)
        return steps, carry

so reverse mode stores every step, as `jax.grad` of the Python-unrolled loop does,
and a derivative of any order differentiates straight-line code: no forward or
gradient While, which every order would double. The loop itself (evaluated,
batched, forward mode, lowered) stays one functional While.

Eagerly, where the operands are values (seen through the tracers of further
derivatives), reverse mode takes any loop's trip count from them
(`_linearization.py`) and inlines a loop that ends within as many steps
(`inlined_linearize_by_value`): `jax.linearize` of those steps run on the values,
counting them as they run (so each runs once), so that loops in the body take their
own trip counts from values too.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad
from jax.interpreters.ad import Zero

from whilst._jax_compat import (
    concrete_batch, is_constant_shape, linearize_jaxpr, merge_lists, partition_list, split_list)
from whilst.ir._functional_while import loops_stepped_first, split_operands
from whilst.ir._tracing import COUNTER_AVAL, call, jaxprs_in_params, trace_closed
from whilst.ir._unroll import nbytes
from whilst.ir.reverse._policy import Inlined, stores_every_step

MAX_INLINED_STEPS = 8
MAX_INLINED_EQUATIONS = 256   # steps times the body's equations (`_equations`)


def inlined_policy(policy, steps: int, cond_jaxpr, body_jaxpr):
    """`Inlined(steps)` for a loop that runs exactly `steps` steps, where its body
    inlined that many times stays small and `policy` (the user's) would store
    every step anyway (`stores_every_step`, a copy of the carry standing for a
    step's rows); else `policy`. Loops whose cond or body has effects, or whose
    carry's shape is symbolic, keep `policy`."""
    carry_avals = body_jaxpr.out_avals
    if (steps > most_inlined_steps(body_jaxpr) or body_jaxpr.effects or cond_jaxpr.effects
            or not all(is_constant_shape(a.shape) for a in carry_avals)):
        return policy
    stores = stores_every_step(policy, steps, sum(map(nbytes, carry_avals)))
    return Inlined(steps) if stores else policy


def most_inlined_steps(body_jaxpr) -> int:
    """The most steps of `body_jaxpr` that `inlined_policy` inlines::

        min(MAX_INLINED_STEPS, MAX_INLINED_EQUATIONS // equations(body))
    """
    return min(MAX_INLINED_STEPS, MAX_INLINED_EQUATIONS // max(_equations(body_jaxpr.jaxpr), 1))


def _equations(jaxpr) -> int:
    """The equations of `jaxpr` and of the jaxprs in their parameters, however deep."""
    return sum(1 + sum(map(_equations, jaxprs_in_params(e.params))) for e in jaxpr.eqns)


def inlined_linearize(is_vjp, nzs, *primals, body_jaxpr, cond_nconsts, body_nconsts,
                      gradient: Inlined, name, **_):
    """The linearize rule of `functional_while_p` for an `Inlined` loop (see the
    module docstring): `(outs, out_nzs, residuals, linearized)`."""
    steps = gradient.steps

    def unrolled(*operands):
        _, body_consts, _, carry = split_operands(operands, cond_nconsts, body_nconsts)
        for i in range(steps):
            carry = call(body_jaxpr, *body_consts, np.int32(i), *carry)
        return [np.int32(steps), *carry]

    return linearize_traced(unrolled, is_vjp, nzs, primals, f"{name}_inlined")


def linearize_traced(fn, is_vjp, nzs, primals, name):
    """JAX's linearization of `fn(*primals)` (a list), traced as one function, as a
    linearize rule's result `(outs, out_nzs, residuals, linearized)`."""
    jaxpr = trace_closed(fn, [jax.typeof(x) for x in primals], name)
    primal_jaxpr, _, out_nz, in_fwd_res, tangent_jaxpr = linearize_jaxpr(
        jaxpr, list(nzs), is_vjp=is_vjp)
    outs, returned = split_list(call(primal_jaxpr, *primals), [len(jaxpr.out_avals)])
    sources, returned = [*jaxpr.consts, *primals], iter(returned)
    residuals = [next(returned) if f is None else sources[f] for f in in_fwd_res]

    def linearized(residuals, *tangents):
        tangents = [ad.instantiate_zeros(t) for t, nz in zip(tangents, nzs) if nz]
        out = iter(call(tangent_jaxpr, *residuals, *tangents))
        return [next(out) if nz else Zero(a.to_tangent_aval())
                for nz, a in zip(out_nz, jaxpr.out_avals)]

    return outs, out_nz, residuals, linearized


def inlined_linearize_by_value(nzs, *primals, cond_jaxpr, body_jaxpr, cond_nconsts,
                               body_nconsts, gradient, **_):
    """`inlined_linearize` for operands that are values (eagerly): `jax.linearize` of
    the steps run on them, so that loops in the body see values too (their own trip
    counts taken from them), where `linearize_jaxpr` would trace them abstractly.
    With `gradient` the user's policy (not `Inlined(steps)`), the steps are counted
    as they run, on the values behind the tracers::

        i = 0
        while i < bound and cond(*cond_consts, i, *carry):
            if i == most_inlined_steps(body): return None     # counted apart
            carry = body(*body_consts, i, *carry); i += 1

    (the caller has checked that `inlined_policy` inlines that many steps)."""
    most = gradient.steps if isinstance(gradient, Inlined) else most_inlined_steps(body_jaxpr)
    cond_consts, body_consts, bound, carry = split_operands(primals, cond_nconsts, body_nconsts)
    _, const_nz, _, carry_nz = split_operands(nzs, cond_nconsts, body_nconsts)
    operands_nz = [*const_nz, *carry_nz]
    fixed, varying = partition_list(operands_nz, [*body_consts, *carry])
    carry_avals = body_jaxpr.in_avals[body_nconsts + 1:]
    out_nz = [jnp.issubdtype(a.dtype, jnp.inexact) for a in carry_avals]
    taken = 0

    def runs(i, carry) -> bool:
        """`i < bound and cond(*cond_consts, i, *carry)`, on the values behind them
        (`tested`: those of the bound and of cond's constants)."""
        if tested is None:
            return i < most
        b, *consts = tested
        with jax.ensure_compile_time_eval(), loops_stepped_first(most_inlined_steps):
            return bool(i < b) and bool(call(cond_jaxpr, *consts, np.int32(i),
                                             *_values(carry))[0])

    def unrolled(*varying):
        nonlocal taken
        consts, carry = split_list(merge_lists(operands_nz, fixed, list(varying)),
                                   [body_nconsts])
        while runs(taken, carry):
            if taken == most:
                raise _NotCounted
            carry = call(body_jaxpr, *consts, np.int32(taken), *carry)
            taken += 1
        return partition_list(out_nz, carry)[::-1]    # (inexact, the others)

    try:
        tested = None if isinstance(gradient, Inlined) else _values([bound, *cond_consts])
        carry_out, f_jvp, others = jax.linearize(unrolled, *varying, has_aux=True)
    except _NotCounted:
        return None
    residuals, f_jvp_tree = jax.tree_util.tree_flatten(f_jvp)   # a `Partial`

    def linearized(residuals, *tangents):
        _, dconsts, _, dcarry = split_operands(tangents, cond_nconsts, body_nconsts)
        dvarying = [ad.instantiate_zeros(t)
                    for t, nz in zip([*dconsts, *dcarry], operands_nz) if nz]
        out = iter(jax.tree_util.tree_unflatten(f_jvp_tree, residuals)(*dvarying))
        return [Zero(COUNTER_AVAL.to_tangent_aval()),
                *[next(out) if nz else Zero(a.to_tangent_aval())
                  for nz, a in zip(out_nz, carry_avals)]]

    return ([np.int32(taken), *merge_lists(out_nz, others, carry_out)], [False, *out_nz],
            residuals, linearized)


def _values(xs) -> list:
    """The values behind `xs` (`concrete_batch`), unbatched, else `_NotCounted`."""
    seen = concrete_batch(xs)
    if seen is None or any(d is not None for d in seen[1]):
        raise _NotCounted
    return seen[0]


class _NotCounted(Exception):
    """The loop runs past the steps `inlined_linearize_by_value` inlines, or its
    values are not all at hand."""
