"""Library loops nested in an exported loop body that count to a small bound run as
whilst loops unrolled by that bound.

A `lax.while_loop` nested in a body (diffrax's Runge-Kutta stage loop: equinox's
`while_loop` in a `custom_vjp`, tested on `stage < 7`) runs on IREE 3.13 from the
host, one iteration at a time, each with its own submissions and a readback of its
test. When its test is `c[j] < N` (and maybe more, with `and`) for a literal N and its
body adds 1 to `c[j]`, it runs at most N steps from any `c[j] >= 0`, so it is bound
again as a functional While unrolled by N (`_unroll.counted_unroll_factor`: at most
MAX_COUNTED_UNROLL, and only bodies `unroll_factor` may unroll, whatever their
width): one emitted iteration of predicated steps where it ran N host-driven ones;
the same results for every start, as unrolling keeps them::

    while cond(c): c = body(c)
        == functional_while(cond, body, c, unroll=N)   # N steps per emitted iteration

Only in exports (the lowering applies it, after differentiation), and only in the
bodies of forward loops that push and pop no residual rows and keep no checkpoints
(`_while_lowering._loop_forms` says why): a `custom_vjp_call` holding such a loop is
evaluated as its primal, which is what it lowers to, as every export rewrite
evaluates it (`_rewrite.INLINED`).
"""
from __future__ import annotations

import numpy as np
from jax.extend.core import ClosedJaxpr, Literal

from whilst.ir._functional_while import UNBOUNDED, functional_while
from whilst.ir._rewrite import into_control_flow, rewrite_equations
from whilst.ir._tracing import COUNTER_AVAL, call, trace_closed
from whilst.ir._unroll import counted_unroll_factor


def counted_loops_unrolled(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with each `lax.while_loop` in it (in sub-jaxprs too) that counts to a
    small bound in the form of the module docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, into_control_flow(_rule), "counted_loops")


def count_bound(eqn) -> int | None:
    """The literal N of a `while` equation whose cond tests `c[j] < N` (alone or
    `and`-ed with other tests, through one-operand boolean ops other than `not`,
    such as equinox's `unvmap_any` and `nonbatchable`) on a carry its body
    increments by 1, or None. It only picks the unroll factor: the results never
    depend on it."""
    params = eqn.params
    cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    produced = {id(v): e for e in cond.eqns for v in e.outvars}
    bounds, pending = [], [cond.outvars[0]]
    while pending:
        v = pending.pop()
        e = produced.get(id(v))
        if e is None:
            continue
        name = e.primitive.name
        if name == "and" or (name != "not" and len(e.invars) == 1
                             and e.invars[0].aval.dtype == np.bool_):
            pending.extend(x for x in e.invars if not isinstance(x, Literal))
        elif name == "lt" and isinstance(e.invars[1], Literal) and e.invars[0] in cond.invars:
            j = cond.invars.index(e.invars[0]) - nc
            if j >= 0 and _increments(body, nb + j, j):
                bounds.append(int(e.invars[1].val))
    return min(bounds) if bounds else None


def _increments(body, position, j) -> bool:
    """Whether `body`'s output j is its input `position` plus the literal 1."""
    out = body.outvars[j]
    return any(e.outvars[0] is out and e.primitive.name == "add"
               and body.invars[position] in e.invars
               and any(isinstance(x, Literal) and x.val == 1 for x in e.invars)
               for e in body.eqns)


def _rule(eqn):
    if eqn.primitive.name != "while":
        return None
    bound = count_bound(eqn)
    params = eqn.params
    k = 1 if bound is None else counted_unroll_factor(params["cond_jaxpr"],
                                                      params["body_jaxpr"], bound)
    if k < 2:
        return None
    return lambda *operands, **_: _unrolled(operands, params, k)


def _unrolled(operands, params, k):
    """The `while` equation's results, computed by a functional While unrolled k times."""
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts, carry = operands[:nc], operands[nc:nc + nb], operands[nc + nb:]
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    carry_avals = body.out_avals
    # functional_while's cond and body take the iteration counter before the carry.
    cond_jaxpr = trace_closed(lambda *a: call(cond, *a[:nc], *a[nc + 1:]),
                              [*cond.in_avals[:nc], COUNTER_AVAL, *carry_avals], "counted_cond")
    body_jaxpr = trace_closed(lambda *a: call(body, *a[:nb], *a[nb + 1:]),
                              [*body.in_avals[:nb], COUNTER_AVAL, *carry_avals], "counted_body")
    _, *out = functional_while(list(cond_consts), list(body_consts), np.int32(UNBOUNDED),
                               list(carry), cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                               static_bound=None, name="counted", unroll=k)
    return out
