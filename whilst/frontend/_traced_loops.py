"""The traced cond and body of loops called eagerly, kept for the next call, as
`jax.lax.while_loop` keeps its own: a loop called again outside any JAX
transformation with the same functions, carry types and options neither traces
nor compiles again (its jaxprs are the same objects, so the primitive's compiled
form is reused). As plain Python::

    key = (frontend's key: its functions and static arguments, carry types, options)
    if key in CACHE: cond_jaxpr, body_jaxpr, consts = CACHE[key]
    else: trace them; CACHE[key] = ...  (when the trace closes over no tracer)

At most `MAX_LOOPS` loops are kept (the least recently used go first); a
function kept here stays alive with the values it closes over.
"""
from __future__ import annotations

import collections
import dataclasses

import jax

from whilst._jax_compat import trace_state_clean

MAX_LOOPS = 256


@dataclasses.dataclass(frozen=True)
class TracedLoop:
    """What tracing a loop gives: the carry's types once weak types are resolved,
    the cond and body jaxprs and the values they close over."""
    carry_avals: tuple
    cond_jaxpr: object
    cond_consts: tuple
    body_jaxpr: object
    body_consts: tuple


_CACHE: collections.OrderedDict = collections.OrderedDict()


def cache_key(frontend_key, leaves, options):
    """The key of a loop called eagerly with the carry `leaves`, or None where it is
    not kept: under a JAX transformation, or with a traced or unhashable part."""
    if frontend_key is None or not trace_state_clean() or any(
            isinstance(x, jax.core.Tracer) for x in leaves):
        return None
    key = (frontend_key, tuple(jax.typeof(x) for x in leaves), tuple(sorted(options.items())))
    try:
        hash(key)
    except TypeError:  # e.g. a function object that is not hashable
        return None
    return key


def lookup(key) -> TracedLoop | None:
    if key is None or key not in _CACHE:
        return None
    _CACHE.move_to_end(key)
    return _CACHE[key]


def store(key, loop: TracedLoop):
    """Keep `loop` under `key` (not where its jaxprs close over tracers)."""
    if key is None or any(isinstance(x, jax.core.Tracer)
                          for x in (*loop.cond_consts, *loop.body_consts)):
        return
    _CACHE[key] = loop
    while len(_CACHE) > MAX_LOOPS:
        _CACHE.popitem(last=False)
