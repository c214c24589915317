"""Casts of a loop body's constants to varying manual axes, made before the loop.

Inside `jax.shard_map`, an op on a varying and an invariant value casts the
invariant one (`pvary`), and reverse mode transposes that cast into a `psum`
over the axis. A loop body that casts one of its constants would so sum the
constant's cotangent over the devices in every step of the gradient While: a
collective each device must join as often as the others, which with trip counts
that differ per device they never do (XLA:CPU waits forever). So the loops cast
such constants once, before the loop, and the gradient sums once, after it.
"""
from __future__ import annotations

import jax
from jax.extend.core import ClosedJaxpr, Literal

from whilst._jax_compat import pvary_p
from whilst.ir._tracing import trace_closed


def hoist_const_casts(jaxpr: ClosedJaxpr, nconsts: int, consts):
    """`(jaxpr', consts')` with `jaxpr'(*consts', *rest) == jaxpr(*consts, *rest)`
    in which no `pvary` casts a value computed from the constants alone: those
    values are computed and cast here, on the current trace, and passed as
    further constants (first). `jaxpr` itself where it casts none. Only the first
    `nconsts` inputs count as constants (`consts` may hold more: popped stacks)."""
    inner = jaxpr.jaxpr
    if not any(eqn.primitive is pvary_p for eqn in inner.eqns):  # outside shard_map
        return jaxpr, list(consts)
    from_consts = set(inner.invars[:nconsts]) | set(inner.constvars)
    for eqn in inner.eqns:
        if not eqn.effects and all(isinstance(v, Literal) or v in from_consts
                                   for v in eqn.invars):
            from_consts.update(eqn.outvars)
    casts = [eqn for eqn in inner.eqns if eqn.primitive is pvary_p
             and not isinstance(eqn.invars[0], Literal) and eqn.invars[0] in from_consts]
    if not casts:
        return jaxpr, list(consts)
    env = dict(zip(inner.constvars, jaxpr.consts))
    env.update(zip(inner.invars[:nconsts], consts[:nconsts]))
    hoisted = _evaluate(inner.eqns, env, [eqn.outvars[0] for eqn in casts])

    def body(*args):
        new, rest = args[:len(casts)], args[len(casts):]
        env = dict(zip(inner.constvars, jaxpr.consts))
        env.update(zip(inner.invars, rest))
        env.update((eqn.outvars[0], x) for eqn, x in zip(casts, new))
        for eqn in inner.eqns:  # every equation but the casts, effects included
            if not any(eqn is cast for cast in casts):
                _bind(eqn, env)
        return [_read(env, v) for v in inner.outvars]

    avals = [jax.typeof(x) for x in hoisted] + list(jaxpr.in_avals)
    return trace_closed(body, avals, "hoisted_casts"), [*hoisted, *consts]


def _evaluate(eqns, env, outvars):
    """The values of `outvars`, evaluating on the current trace only the
    equations they need that `env` does not already hold."""
    needed = {v for v in outvars if not isinstance(v, Literal)}
    todo = []
    for eqn in reversed(eqns):
        if any(v in needed and v not in env for v in eqn.outvars):
            todo.append(eqn)
            needed.update(v for v in eqn.invars if not isinstance(v, Literal))
    for eqn in reversed(todo):
        _bind(eqn, env)
    return [_read(env, v) for v in outvars]


def _read(env, v):
    return v.val if isinstance(v, Literal) else env[v]


def _bind(eqn, env):
    """Apply `eqn` on the current trace to the values `env` holds; store its outputs."""
    out = eqn.primitive.bind(*[_read(env, v) for v in eqn.invars],
                             **eqn.primitive.get_bind_params(eqn.params))
    env.update(zip(eqn.outvars, out if eqn.primitive.multiple_results else [out]))
