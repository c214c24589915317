"""Tracing Python callables to closed jaxprs, the building block of every rule.

JAX has no public hook that turns a flat function into a `ClosedJaxpr` while
hoisting closed-over tracers to explicit inputs, so this module wraps the two
`partial_eval` entry points the rules need.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from jax import lax
from jax._src import api_util, core
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe


def _debug_info(name: str, fn: Callable, avals: Sequence[core.AbstractValue]):
    return api_util.debug_info(name, fn, tuple(avals), {})


def trace_with_consts(fn: Callable, avals: Sequence[core.AbstractValue],
                      name: str) -> tuple[core.ClosedJaxpr, list]:
    """Trace `fn(*flat_args) -> list` and hoist what it closes over.

    Returns `(jaxpr, consts)` where `jaxpr(*consts, *flat_args) == fn(*flat_args)`;
    consts may be tracers of an enclosing transformation.
    """
    wrapped = lu.wrap_init(lambda *a: list(fn(*a)), debug_info=_debug_info(name, fn, avals))
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(wrapped, list(avals))
    return pe.close_jaxpr(pe.convert_constvars_jaxpr(jaxpr)), list(consts)


def trace_closed(fn: Callable, avals: Sequence[core.AbstractValue],
                 name: str) -> core.ClosedJaxpr:
    """Trace `fn(*flat_args) -> list` into a `ClosedJaxpr` with its consts kept inside.

    Only for rule-internal functions whose closed-over values are concrete
    (rules run their sub-jaxprs through this after all outer tracers are inputs).
    """
    wrapped = lu.wrap_init(lambda *a: list(fn(*a)), debug_info=_debug_info(name, fn, avals))
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(wrapped, list(avals))
    return core.ClosedJaxpr(jaxpr, consts)


def call(jaxpr: core.ClosedJaxpr, *args) -> list:
    """Evaluate a closed jaxpr on the current trace: `jaxpr(*args)`."""
    return core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


def always_true(avals: Sequence[core.AbstractValue]) -> core.ClosedJaxpr:
    """A cond jaxpr over `avals` that is always true (loops bounded by their trip count)."""
    return trace_closed(lambda *_: [lax.full((), True, np.bool_)], avals, "always_true")
