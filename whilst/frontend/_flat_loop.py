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
resolved (`_carry_types`) and, inside `jax.shard_map`, cast to vary over the
manual axes body's outputs and the trip count vary over (`whilst.ir._vma`), PRNG key leaves travel as their key data
(`_prng_keys`), cond must give a bool scalar, and the While is bound.
"""
from __future__ import annotations

import jax
from jax import lax

from whilst.frontend._carry_types import trace_body
from whilst.frontend._checks import check_cond_output
from whilst.frontend._prng_keys import KeyLeaves
from whilst.ir import COUNTER_AVAL, functional_while, trace_with_consts
from whilst.ir._vma import varying, vary


def flat_while_loop(cond, body, leaves, check_carry, *, bound, options, name, api,
                    cond_name, back_prop=True):
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
      name: the loop's name; its cond and body are traced as `{name}_cond`
        and `{name}_body`.
      api, cond_name: the entry point and cond's argument name, for errors.
      back_prop: False stops gradients (and tangents) through the loop.
    """
    keys = KeyLeaves(leaves)

    def flat_cond(i, *raw):
        del i
        return [check_cond_output(cond(keys.wrap(raw)), cond_name, api)]

    def flat_body(i, *raw):
        del i
        return keys.raw(body(keys.wrap(raw)))

    init, body_jaxpr, body_consts = trace_body(flat_body, keys.raw(leaves), f"{name}_body")
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
    operands = [cond_consts, body_consts, bound, init]
    if not back_prop:
        operands = jax.tree_util.tree_map(lax.stop_gradient, operands)
    _, *outs = functional_while(*operands, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                                name=name, **options)
    return keys.wrap(outs)
