"""Rewriting chosen equations of a closed jaxpr by evaluating it on a new trace.

The export-time rewrites (`_onehot.py`, `_batched_scatter.py`,
`_symbolic_indexing.py`) share this evaluator::

    def rewrite_equations(jaxpr, rule, name):
        for eqn in jaxpr (calls to jit, custom_jvp and custom_vjp functions in line):
            f = rule(eqn)
            outs = f(*inputs, **eqn.params) if f else eqn.primitive.bind(*inputs, ...)

Ops inside other control flow (cond, scan, while) stay as they are, unless the
rule is `into_control_flow(rule)`, which rewrites their sub-jaxprs too.
"""
from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from jax.extend.core import ClosedJaxpr, Literal

from whilst.ir._tracing import trace_closed

# call primitive -> its jaxpr parameter. The rewrites run on exports, after
# differentiation: a custom rule's call is its primal computation.
INLINED = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
           "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr"}
CONTROL_FLOW = frozenset({"cond", "scan", "while"})  # jax's, with closed sub-jaxprs


def into_control_flow(rule: Callable) -> Callable:
    """`rule`, also picking each `CONTROL_FLOW` equation whose sub-jaxprs hold
    equations it picks: bound again with every closed sub-jaxpr in its params
    (alone or in a tuple, as cond's branches) rewritten the same way."""
    def extended(eqn):
        picked = rule(eqn)
        if picked is not None or eqn.primitive.name not in CONTROL_FLOW:
            return picked

        def rewritten(value):
            if isinstance(value, ClosedJaxpr):
                return rewrite_equations(value, extended, f"{eqn.primitive.name}_body")
            if isinstance(value, tuple) and any(isinstance(v, ClosedJaxpr) for v in value):
                values = tuple(map(rewritten, value))
                return value if all(map(operator.is_, values, value)) else values
            return value
        sub_jaxprs = {k: rewritten(v) for k, v in eqn.params.items()}
        if all(sub_jaxprs[k] is v for k, v in eqn.params.items()):
            return None
        return lambda *operands, **params: eqn.primitive.bind(*operands, **sub_jaxprs)
    return extended


def rewrite_equations(jaxpr: ClosedJaxpr, rule: Callable, name: str) -> ClosedJaxpr:
    """`jaxpr` with each equation `eqn` for which `rule(eqn)` returns a function
    `f` computed as `f(*inputs, **eqn.params)` (its results as the primitive's),
    the `INLINED` calls evaluated in line; the same jaxpr object when `rule` picks
    no equation. `rule` is asked once per equation."""
    picks = {}  # id(eqn) -> rule(eqn); the equations live as long as `jaxpr`

    def picked(eqn):
        if id(eqn) not in picks:
            picks[id(eqn)] = rule(eqn)
        return picks[id(eqn)]

    if not _rewritable(jaxpr.jaxpr, picked):
        return jaxpr
    return trace_closed(lambda *args: evaluate(jaxpr, picked, *args), jaxpr.in_avals, name)


def evaluate(jaxpr: ClosedJaxpr, rule: Callable, *args) -> list:
    """`jaxpr(*args)` on the current trace, with `rule`'s form `f(*inputs,
    **eqn.params)` for each equation it picks (a function, or None to keep the
    equation) and the `INLINED` calls evaluated in line."""
    return _eval(jaxpr.jaxpr, jaxpr.consts, rule, *args)


def _rewritable(jaxpr, rule) -> bool:
    """Whether `jaxpr` (or a call `_eval` inlines) has an equation `rule` picks."""
    for eqn in jaxpr.eqns:
        if rule(eqn) is not None:
            return True
        sub = INLINED.get(eqn.primitive.name)
        if sub in eqn.params and _rewritable(_open(eqn.params[sub]), rule):
            return True
    return False


def _open(jaxpr):
    return jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr


def _eval(jaxpr, consts, rule, *args):
    """`jaxpr(*consts, *args)` on the current trace, with `rule`'s forms for the
    equations it picks and the `INLINED` calls evaluated in line."""
    env = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        rewritten = rule(eqn)
        sub = INLINED.get(eqn.primitive.name)
        if rewritten is not None:  # a form sees arrays, never a Literal's Python scalar
            outs = rewritten(*[np.asarray(x, v.aval.dtype) if isinstance(v, Literal) else x
                               for v, x in zip(eqn.invars, invals)], **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        elif sub in eqn.params:
            inner = eqn.params[sub]
            outs = _eval(_open(inner), getattr(inner, "consts", ()), rule, *invals)
        else:
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = outs if eqn.primitive.multiple_results else [outs]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]
