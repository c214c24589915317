"""Tracing Python callables to closed jaxprs, the building block of every rule.

JAX has no public hook that turns a flat function into a `ClosedJaxpr` while
hoisting closed-over tracers to explicit inputs, so this module wraps the two
`partial_eval` entry points the rules need.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from jax import lax
from jax.core import AbstractValue, ShapedArray, eval_jaxpr
from jax.extend import linear_util as lu
from jax.extend.core import ClosedJaxpr, Jaxpr
from jax.extend.core import jaxprs_in_params as _jax_jaxprs_in_params
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import (
    close_jaxpr, convert_constvars_jaxpr, debug_info, linearization_depth)
from whilst.ir._vma import varying, vary

COUNTER_AVAL = ShapedArray((), np.int32)  # the iteration counter every loop body receives
PRED_AVAL = ShapedArray((), np.bool_)     # a loop's test


# The reverse-mode derivatives still to come of the code being traced: a loop's
# rule (or a gradient While's, tracing a body's vjp) differentiated d more times
# traces its body's loops, which are differentiated d more times too.
_LINEARIZATIONS_TO_COME = contextvars.ContextVar("linearizations_to_come", default=0)


def linearizations_to_come() -> int:
    return _LINEARIZATIONS_TO_COME.get()


@contextlib.contextmanager
def tracing_for(linearizations: int) -> Iterator[int]:
    """Within: `linearizations_to_come()` is at least `linearizations`."""
    token = _LINEARIZATIONS_TO_COME.set(max(linearizations, linearizations_to_come()))
    try:
        yield linearizations_to_come()
    finally:
        _LINEARIZATIONS_TO_COME.reset(token)


def tracing_for_operands(rule: Callable) -> Callable:
    """`rule(first, *operands, **params)` (a transpose rule, `first` its
    cotangents) run `tracing_for` the linearizations that trace its operands."""
    @functools.wraps(rule)
    def traced_for_operands(first, *operands, **params):
        with tracing_for(max(map(linearization_depth, operands), default=0)):
            return rule(first, *operands, **params)
    return traced_for_operands


def _debug_info(name: str, fn: Callable, avals: Sequence[AbstractValue]):
    return debug_info(name, fn, tuple(avals), {})


def trace_with_consts(fn: Callable, avals: Sequence[AbstractValue],
                      name: str) -> tuple[ClosedJaxpr, list]:
    """Trace `fn(*flat_args) -> list` and hoist what it closes over.

    Returns `(jaxpr, consts)` where `jaxpr(*consts, *flat_args) == fn(*flat_args)`;
    consts may be tracers of an enclosing transformation.
    """
    wrapped = lu.wrap_init(lambda *a: list(fn(*a)), debug_info=_debug_info(name, fn, avals))
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(wrapped, list(avals))
    return close_jaxpr(convert_constvars_jaxpr(jaxpr)), list(consts)


def trace_closed(fn: Callable, avals: Sequence[AbstractValue],
                 name: str) -> ClosedJaxpr:
    """Trace `fn(*flat_args) -> list` into a `ClosedJaxpr` with its consts kept inside.

    Only for rule-internal functions whose closed-over values are concrete
    (rules run their sub-jaxprs through this after all outer tracers are inputs).
    """
    wrapped = lu.wrap_init(lambda *a: list(fn(*a)), debug_info=_debug_info(name, fn, avals))
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(wrapped, list(avals))
    return ClosedJaxpr(jaxpr, consts)


class TracedWhenRead:
    """A closed jaxpr traced the first time `closed` is read: `make()`'s, where
    `make` traces (`trace_closed`) functions that close over concrete values only.

    For a second form of the same code that a program's lowering often does not
    pick. It is not a `ClosedJaxpr`, so that the walks over every sub-jaxpr of a
    jaxpr (JAX's before lowering, whilst's own counts) leave it untraced."""
    __slots__ = ("_make", "_closed", "_to_come")

    def __init__(self, make: Callable[[], ClosedJaxpr]):
        self._make, self._closed = make, None
        self._to_come = linearizations_to_come()   # traced later as if now

    @classmethod
    def of(cls, fn: Callable, avals: Sequence[AbstractValue], name: str) -> TracedWhenRead:
        """`trace_closed(fn, avals, name)`, traced when read."""
        return cls(lambda: trace_closed(fn, avals, name))

    @property
    def closed(self) -> ClosedJaxpr:
        if self._closed is None:
            with tracing_for(self._to_come):
                self._closed, self._make = self._make(), None
        return self._closed

    def map(self, rewrite: Callable[[ClosedJaxpr], ClosedJaxpr]) -> TracedWhenRead:
        """`rewrite(self.closed)`, traced when read; `self` where it is traced already
        and `rewrite` returns it unchanged."""
        if self._closed is None:
            return TracedWhenRead(lambda: rewrite(self.closed))
        rewritten = rewrite(self._closed)
        return self if rewritten is self._closed else TracedWhenRead(lambda: rewritten)

    def __repr__(self):
        return repr(self._closed) if self._closed is not None else "<traced when read>"


def jaxprs_in_params(params: dict) -> Iterator[Jaxpr]:
    """The jaxprs in an equation's `params`, as JAX's `jaxprs_in_params`, and those
    `TracedWhenRead` holds (traced now)."""
    yield from _jax_jaxprs_in_params(params)
    for value in params.values():
        if isinstance(value, TracedWhenRead):
            yield value.closed.jaxpr


def holds_a_loop(jaxpr: Jaxpr) -> bool:
    """Whether `jaxpr` (its sub-jaxprs included) runs a loop: a While or a scan."""
    return any(eqn.primitive.name in ("while", "scan", "functional_while", "linear_while")
               or any(map(holds_a_loop, jaxprs_in_params(eqn.params)))
               for eqn in jaxpr.eqns)


def call(jaxpr: ClosedJaxpr, *args) -> list:
    """Evaluate a closed jaxpr on the current trace: `jaxpr(*args)`. Inside
    `jax.shard_map`, an argument varying over fewer manual axes than its input
    is cast to vary over them (`_vma`)."""
    args = [vary(x, varying(a)) for x, a in zip(args, jaxpr.in_avals)]
    return eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


def always_true(avals: Sequence[AbstractValue]) -> ClosedJaxpr:
    """A cond jaxpr over `avals` that is always true (loops bounded by their trip count)."""
    return trace_closed(lambda *_: [lax.full((), True, np.bool_)], avals, "always_true")
