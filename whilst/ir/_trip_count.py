"""Trip counts of loops that test a stepped counter against a loop invariant.

A loop whose cond is `x < c` (or `c > x`), for a carry x that body steps as
`x + 1` (or the loop's own counter) and a `c` computed from cond's constants
alone, takes, before its bound, exactly::

    trips = c - x0 if x0 < c else 0      # x reaches c before it could wrap

steps; `x > c` (or `c < x`) with `x - 1` takes `x0 - c` likewise. The lowering
then bounds such a loop by `min(bound, trips)` and tests `i < bound` alone:
IREE 3.13 keeps the counter of a loop tested that way on the host, where it
reads a test of the carry back to the host every emitted iteration. Where x0
and c are known at trace time (`i < 2` from `i = 0`), the frontends bound the
loop by `trips` when they bind it (`static_trips`), as a Python-int
`maximum_iterations` would: reverse mode stores its steps, at every order,
instead of running the default budget's chunks.
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Literal
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import is_concrete, split_list
from whilst.ir._tracing import call, trace_closed

_INT32_MAX = np.iinfo(np.int32).max
# (comparison, operand position of the counter) -> the counter's stride it needs
_STRIDE_FOR = {("lt", 0): 1, ("gt", 1): 1, ("gt", 0): -1, ("lt", 1): -1}


def integer_strides(body_jaxpr, n_inputs_before_counter) -> list[int | None]:
    """For each carry, d where the body's new value of an integer carry x is
    `x + d`, `d + x` or `x - (-d)` for a literal d (`i + 1`), else None."""
    jaxpr = body_jaxpr.jaxpr
    carries = jaxpr.invars[n_inputs_before_counter + 1:]
    producers = {id(v): e for e in jaxpr.eqns for v in e.outvars}
    strides = []
    for x, out in zip(carries, jaxpr.outvars):
        e, d = producers.get(id(out)), None
        if e is not None and jnp.issubdtype(x.aval.dtype, jnp.integer):
            a, b = e.invars if len(e.invars) == 2 else (None, None)
            if e.primitive.name == "add" and b is x and isinstance(a, Literal):
                a, b = b, a
            if e.primitive.name in ("add", "sub") and a is x and isinstance(b, Literal):
                d = int(b.val) * (1 if e.primitive.name == "add" else -1)
        strides.append(d)
    return strides


def counter_trips(cond_jaxpr, cond_nconsts, body_jaxpr,
                  n_body_inputs_before_counter) -> ClosedJaxpr | None:
    """`trips(*cond_consts, *carry) -> int32` (at most int32's maximum) for a loop
    of the form of the module docstring, else None."""
    test = _counter_test(cond_jaxpr, cond_nconsts, body_jaxpr, n_body_inputs_before_counter)
    return None if test is None else _trips(cond_jaxpr, cond_nconsts, *test)


def _counter_test(cond_jaxpr, cond_nconsts, body_jaxpr, n_body_inputs_before_counter):
    """`(carry_index, limit, stride)` of a loop of the form of the module docstring
    (carry_index -1: the loop's counter; limit: a var or literal of cond), else None."""
    jaxpr = cond_jaxpr.jaxpr
    (out,) = jaxpr.outvars
    test = next((e for e in jaxpr.eqns if any(v is out for v in e.outvars)), None)
    if test is None or test.primitive.name not in ("lt", "gt"):
        return None
    position = {id(v): p for p, v in enumerate(jaxpr.invars)}
    producers = {id(v): e for e in jaxpr.eqns for v in e.outvars}
    strides = integer_strides(body_jaxpr, n_body_inputs_before_counter)
    for side, x in enumerate(test.invars):
        x = _before_weak_type_casts(producers, x)
        p = None if isinstance(x, Literal) else position.get(id(x))
        if p is None or p < cond_nconsts:
            continue
        stride = 1 if p == cond_nconsts else strides[p - cond_nconsts - 1]
        limit = test.invars[1 - side]
        if stride == _STRIDE_FOR[test.primitive.name, side] and _invariant(
                jaxpr, limit, cond_nconsts):
            return p - cond_nconsts - 1, limit, stride
    return None


def _before_weak_type_casts(producers, v):
    """`v`, or the value it converts to its own dtype (a Python int's weak type
    dropped: `i < n` for `i` started from `0`)."""
    e = producers.get(id(v))
    while (e is not None and e.primitive.name == "convert_element_type"
           and e.invars[0].aval.dtype == v.aval.dtype):
        v = e.invars[0]
        e = producers.get(id(v))
    return v


def _invariant(jaxpr, v, nconsts) -> bool:
    """Whether `v` is a literal or computed from the first `nconsts` inputs alone."""
    if isinstance(v, Literal):
        return True
    _, used = pe.dce_jaxpr(jaxpr.replace(outvars=[v]), [True])
    return not any(used[nconsts:])


def _trips(cond_jaxpr, nconsts, carry_index, limit, stride) -> ClosedJaxpr:
    """The trip count of a loop testing carry `carry_index` (-1: the loop's
    counter, from 0) with `stride` against `limit`."""
    avals = cond_jaxpr.in_avals
    limit_of = ClosedJaxpr(cond_jaxpr.jaxpr.replace(outvars=[limit]), cond_jaxpr.consts)

    def trips(*args):
        consts, carry = split_list(args, [nconsts])
        c = (np.asarray(limit.val, limit.aval.dtype) if isinstance(limit, Literal)
             else call(limit_of, *consts, np.int32(0), *carry)[0])
        x0 = np.int32(0) if carry_index < 0 else carry[carry_index]
        return [_distance(*((x0, c) if stride == 1 else (c, x0)))]

    return trace_closed(trips, [*avals[:nconsts], *avals[nconsts + 1:]], "trips")


def _distance(lo, hi):
    """`hi - lo` if `lo < hi` else 0, as int32 (at most its maximum), exact for any
    integer dtype: the difference is taken in the unsigned type of the same width."""
    unsigned = np.dtype(f"uint{np.dtype(lo.dtype).itemsize * 8}")
    d = lax.sub(lax.bitcast_convert_type(hi, unsigned), lax.bitcast_convert_type(lo, unsigned))
    if unsigned.itemsize >= 4:
        d = lax.min(d, lax.full((), _INT32_MAX, unsigned))
    return lax.select(lax.lt(lo, hi), lax.convert_element_type(d, np.int32),
                      lax.full((), 0, np.int32))


def static_trips(cond_jaxpr, cond_consts, body_jaxpr, n_body_consts, starts) -> int | None:
    """The trip count, as a Python int, of a loop of the form of the module docstring
    whose counter's start and limit are known at trace time, else None.

    `cond_jaxpr(*cond_consts, i, *carry)` and `body_jaxpr(*body_consts, i, *carry)`
    are the loop's cond and body, `starts` its initial carry as the caller was
    given it. The start and the limit must be known (a Python or numpy scalar, or
    a JAX array that is not a tracer), as for `jax.lax.fori_loop`'s bounds: the
    limit a literal of cond, or computed from such values cond closes over (it is
    then evaluated here, once per trace). Such a loop runs exactly that many steps
    before any bound, whatever the rest of its carry, so it is a counted loop as
    much as one with `maximum_iterations`.
    """
    test = _counter_test(cond_jaxpr, len(cond_consts), body_jaxpr, n_body_consts)
    if test is None:
        return None
    carry_index, limit, stride = test
    x0 = 0 if carry_index < 0 else starts[carry_index]
    c = _known_limit(cond_jaxpr, cond_consts, limit) if is_known(x0) else None
    if c is None:
        return None
    dtype = limit.aval.dtype
    lo, hi = (int(np.asarray(v).astype(dtype)) for v in ((x0, c) if stride == 1 else (c, x0)))
    return min(max(hi - lo, 0), _INT32_MAX)


def _known_limit(cond_jaxpr, cond_consts, limit):
    """The value of cond's loop invariant `limit` (a literal, a constant or computed
    from constants: `n * 2 - 3`) where the constants it reads are known at trace
    time, else None."""
    nconsts = len(cond_consts)
    limit_of, read = pe.dce_jaxpr(cond_jaxpr.jaxpr.replace(outvars=[limit]), [True])
    used = [x for x, r in zip(cond_consts, read[:nconsts]) if r]
    if not all(map(is_known, used)):
        return None
    with jax.ensure_compile_time_eval():
        (value,) = jax.core.eval_jaxpr(limit_of, cond_jaxpr.consts, *used)
    return value


def is_known(v) -> bool:
    """Whether `v` is a value known at trace time."""
    return isinstance(v, (numbers.Number, np.ndarray, np.generic)) or (
        isinstance(v, jax.Array) and is_concrete(v))
