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

Where a tested counter starts at a value known at trace time (equinox's step
counter starts at 0), the loop runs at most `most = N - start` steps, and is bound
with that bound (`static_bound=most`): the lowering then emits its steps as one
iteration of a While counted to one, which IREE 3.13 steps on the host without
reading its test back (`_loop_forms.OneIteration`)::

    functional_while(cond, body, c, bound=most, static_bound=most, unroll=N)  # most <= N

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
from whilst.ir._trip_count import is_known
from whilst.ir._unroll import counted_unroll_factor


def counted_loops_unrolled(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with each `lax.while_loop` in it (in sub-jaxprs too) that counts to a
    small bound in the form of the module docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, into_control_flow(_rule), "counted_loops")


def counter_tests(eqn) -> list[tuple[int, int]]:
    """`(j, N)` for each test `c[j] < N` (N a literal) of a `while` equation's cond
    on a carry c[j] its body increments by 1, where the cond is that test or those
    tests `and`-ed with others (through one-operand boolean ops other than `not`,
    such as equinox's `unvmap_any` and `nonbatchable`, each false where its operand
    is all false): the loop stops once any of them fails for every element. The
    least N picks the unroll factor."""
    params = eqn.params
    cond, body = params["cond_jaxpr"].jaxpr, params["body_jaxpr"].jaxpr
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    produced = {id(v): e for e in cond.eqns for v in e.outvars}
    tests, pending = [], [cond.outvars[0]]
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
                tests.append((j, int(e.invars[1].val)))
    return tests


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
    tests = counter_tests(eqn)
    params = eqn.params
    k = 1 if not tests else counted_unroll_factor(params["cond_jaxpr"], params["body_jaxpr"],
                                                  min(n for _, n in tests))
    if k < 2:
        return None
    return lambda *operands, **_: _unrolled(operands, params, k, tests)


def _unrolled(operands, params, k, tests):
    """The `while` equation's results, computed by a functional While unrolled k
    times, or bound by the most steps it takes where its counters' starts show
    them (`tests`: `counter_tests`) and they fit in k."""
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond_consts, body_consts, carry = operands[:nc], operands[nc:nc + nb], operands[nc + nb:]
    known = [n - int(np.min(carry[j])) for j, n in tests
             if is_known(carry[j]) and np.size(carry[j])]
    most = max(0, min(known)) if known else None
    static_bound = most if most is not None and most <= k else None
    bound = UNBOUNDED if static_bound is None else static_bound
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    carry_avals = body.out_avals
    # functional_while's cond and body take the iteration counter before the carry.
    cond_jaxpr = trace_closed(lambda *a: call(cond, *a[:nc], *a[nc + 1:]),
                              [*cond.in_avals[:nc], COUNTER_AVAL, *carry_avals], "counted_cond")
    body_jaxpr = trace_closed(lambda *a: call(body, *a[:nb], *a[nb + 1:]),
                              [*body.in_avals[:nb], COUNTER_AVAL, *carry_avals], "counted_body")
    _, *out = functional_while(list(cond_consts), list(body_consts), np.int32(bound),
                               list(carry), cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                               static_bound=static_bound, name="counted", unroll=k)
    return out
