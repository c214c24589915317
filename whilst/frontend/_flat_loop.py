"""The loop both frontends bind: `cond` and `body` over a flat carry, traced into
one functional While. As plain Python::

    carry = leaves                  # weakly typed leaves take body's dtypes
    i = 0
    while i < bound and cond(carry):
        carry, i = body(carry), i + 1
    return carry

A frontend adapts its signature to this calling convention: it flattens its
carry, checks each body output (structure, shapes, key leaves staying keys) in
`body`, and checks the carry's types against body's in `check_carry`, with its
own error messages. Here the body is traced with the carry's weak types
resolved (`_carry_types`) and, inside `jax.shard_map`, the carry cast to vary
over the manual axes body's outputs and the trip count vary over
(`whilst.ir._vma`); PRNG key leaves travel as their key data (`_prng_keys`),
cond must give a bool scalar, and the While is bound. Eager calls of a loop
traced before reuse its trace (`_traced_loops`).
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

from whilst.frontend import _traced_loops as traced_loops
from whilst.frontend._carry_types import trace_body
from whilst.frontend._checks import check_checkpoint_memory, check_cond_output
from whilst.frontend._prng_keys import KeyLeaves
from whilst.frontend.tensor_array import has_dynamic_arrays
from whilst.ir import COUNTER_AVAL, functional_while, trace_with_consts
from whilst.ir._trip_count import static_trips
from whilst.ir.reverse._inlined import inlined_policy
from whilst.ir._vma import varying, vary


def flat_while_loop(cond, body, leaves, check_carry, *, bound, options, name, api,
                    cond_name, starts, back_prop=True, cache_key=None):
    """The final carry (a list like `leaves`) of the loop above.

    Args:
      cond: `cond(carry) -> bool scalar`, `carry` a list of arrays like `leaves`.
      body: `body(carry) -> list of arrays`, one per leaf, already checked.
      leaves: the initial carry, arrays (PRNG key arrays among them).
      check_carry: `check_carry(init, out_avals)`, called once body is traced:
        `init` the carry with weak types resolved and keys as key data,
        `out_avals` body's output types; raises where they differ.
      bound, options: the bound operand and `functional_while` keywords
        (`_checks.loop_options`).
      starts: the leaves as the caller gave them (Python scalars before they
        became arrays): a loop that steps a counter from a concrete start to a
        concrete limit (`i < 2` from `i = 0`) is bounded by its trip count
        (`whilst.ir._trip_count.static_trips`), as if by `maximum_iterations`.
      name: the loop's name; its cond and body are traced as `{name}_cond`
        and `{name}_body`.
      api, cond_name: the entry point and cond's argument name, for errors.
      back_prop: False stops gradients (and tangents) through the loop.
      cache_key: what, with the carry's types and `options`, identifies the loop
        for `_traced_loops` (the user's functions and the frontend's static
        arguments); None: traced on every call.
    """
    keys = KeyLeaves(leaves)
    flat_cond, flat_body = _counted(cond, body, keys, api, cond_name)
    key = traced_loops.cache_key(cache_key, leaves, dict(options, name=name))
    traced = traced_loops.lookup(key)
    if traced is None:
        init, traced = _trace(flat_cond, flat_body, keys.raw(leaves), check_carry, bound, name)
        traced_loops.store(key, traced)
    else:  # the same carry types as when it was traced: promote as then
        init = [x if jax.typeof(x) == a else lax.convert_element_type(x, a.dtype)
                for x, a in zip(keys.raw(leaves), traced.carry_avals)]
    bound, options = _bounded_by_trips(traced, starts, bound, options)
    check_checkpoint_memory(options["gradient"], options["static_bound"], init, api)
    operands = [list(traced.cond_consts), list(traced.body_consts), bound, init]
    if not back_prop:
        operands = jax.tree_util.tree_map(lax.stop_gradient, operands)
    _, *outs = functional_while(*operands, cond_jaxpr=traced.cond_jaxpr,
                                body_jaxpr=traced.body_jaxpr, name=name, **options)
    return keys.wrap(outs)


def arrays_with_room(loop_vars, room, ready, flat, *, bound, name, api, cond_name):
    """`ready(loop_vars, room)`: the loop variables with their TensorArrays as they
    enter a loop of at most `room` (a Python int or None) more steps. Where `room`
    is None and a dynamic array needs it, the room is the loop's trip count where it
    steps a counter from a start to a limit known at trace time (`static_trips`),
    read from the loop traced here with room for one element: `flat(loop_vars)`
    gives `(cond, body, leaves, starts)` as `flat_while_loop` takes them. A loop
    whose count is not known is refused by `ready`, with what tracing it raised,
    if anything, as the refusal's cause."""
    unread = None
    if room is None and has_dynamic_arrays(loop_vars):
        try:
            cond, body, leaves, starts = flat(ready(loop_vars, 1))
            keys = KeyLeaves(leaves)
            flat_cond, flat_body = _counted(cond, body, keys, api, cond_name)
            _, traced = _trace(flat_cond, flat_body, keys.raw(leaves), lambda *_: None,
                               bound, name)
            room = static_trips(traced.cond_jaxpr, traced.cond_consts, traced.body_jaxpr,
                                len(traced.body_consts), starts)
        except Exception as error:  # noqa: BLE001 -- the cause of the refusal below
            unread = error
    try:
        return ready(loop_vars, room)
    except ValueError as refusal:
        raise refusal from unread


def _counted(cond, body, keys, api, cond_name):
    """`(flat_cond, flat_body)`: `cond` and `body` as functions of the loop's counter
    and its flat carry, PRNG keys as their key data (`KeyLeaves`)."""
    def flat_cond(i, *raw):
        del i
        return [check_cond_output(cond(keys.wrap(raw)), cond_name, api)]

    def flat_body(i, *raw):
        del i
        return keys.raw(body(keys.wrap(raw)))

    return flat_cond, flat_body


def _bounded_by_trips(traced, starts, bound, options):
    """`(bound, options)` with the loop's static trip count, where it has one, as
    its bound and static bound (the least of it and the bound given); a loop that
    then runs a number of steps known here gets `inlined_policy`'s policy."""
    trips = static_trips(traced.cond_jaxpr, traced.cond_consts, traced.body_jaxpr,
                         len(traced.body_consts), starts)
    if trips is None:
        return bound, options
    static_bound = options["static_bound"]
    if static_bound is None or static_bound > trips:
        bound = (np.int32(min(int(bound), trips)) if isinstance(bound, (int, np.integer))
                 else lax.min(bound, np.int32(trips)))
        options = dict(options, static_bound=trips)
    if isinstance(bound, (int, np.integer)):  # it runs exactly `bound` steps
        options = dict(options, gradient=inlined_policy(
            options["gradient"], int(bound), traced.cond_jaxpr, traced.body_jaxpr))
    return bound, options


def _trace(flat_cond, flat_body, init, check_carry, bound, name):
    """`(init, TracedLoop)`: the carry with its types resolved (see the module
    docstring), and the loop traced for it."""
    init, body_jaxpr, body_consts = trace_body(flat_body, init, f"{name}_body")
    check_carry(init, body_jaxpr.out_avals)
    for _ in range(len(init) + 2):
        avals = [COUNTER_AVAL, *map(jax.typeof, init)]
        cond_jaxpr, cond_consts = trace_with_consts(flat_cond, avals, f"{name}_cond")
        # Inside jax.shard_map: a carry varies over the manual axes its body output
        # does, and over those the trip count does (cond's and the bound's).
        steps = varying(cond_jaxpr.out_avals[0]) | varying(bound)
        wanted = [varying(x) | varying(out) | steps
                  for x, out in zip(init, body_jaxpr.out_avals)]
        if all(w == varying(x) for w, x in zip(wanted, init)):
            break
        init = [vary(x, w) for x, w in zip(init, wanted)]
        init, body_jaxpr, body_consts = trace_body(flat_body, init, f"{name}_body")
    return init, traced_loops.TracedLoop(tuple(map(jax.typeof, init)), cond_jaxpr,
                                         tuple(cond_consts), body_jaxpr, tuple(body_consts))
