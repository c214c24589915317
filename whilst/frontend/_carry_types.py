"""The types of a loop's carry, as `jax.lax.while_loop` gives them: a weakly typed
leaf (a Python scalar) takes the dtype the body gives it.

The body is traced with the carry as given; every weakly typed leaf whose output
has another dtype then starts with that dtype instead, and the body is traced
again::

    out = body(*carry)
    carry = [x.astype(result_type(x, o.dtype)) if weak(x) and o.dtype != x.dtype else x
             for x, o in zip(carry, out)]
    out = body(*carry)                 # only if a leaf changed

An output of its leaf's dtype takes the leaf's weak type, so a weakly typed leaf
that keeps its dtype stays weakly typed whether body returns it weakly typed or not.
"""
from __future__ import annotations

import jax
from jax import lax

from whilst._jax_compat import convert_element_type
from whilst.ir import COUNTER_AVAL, trace_with_consts


def trace_body(body, init, name):
    """`(init, body_jaxpr, body_consts)`: `body(i, *carry) -> list of arrays` traced
    as above, with `init`'s weakly typed leaves promoted. The caller checks that
    each output has its leaf's shape and dtype."""
    def trace(init):
        def same_types(i, *xs):
            return [convert_element_type(y, weak_type=jax.typeof(x).weak_type)
                    if y.dtype == x.dtype else y for x, y in zip(xs, body(i, *xs))]
        return trace_with_consts(same_types, [COUNTER_AVAL, *map(jax.typeof, init)], name)

    body_jaxpr, body_consts = trace(init)
    promoted = [lax.convert_element_type(x, jax.numpy.result_type(x, out.dtype))
                if jax.typeof(x).weak_type and x.dtype != out.dtype else x
                for x, out in zip(init, body_jaxpr.out_avals)]
    if any(p is not x for p, x in zip(promoted, init)):
        body_jaxpr, body_consts = trace(promoted)
    return promoted, body_jaxpr, body_consts
