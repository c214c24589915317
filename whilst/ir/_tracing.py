"""Tracing Python callables to closed jaxprs, the building block of every rule.

JAX has no public hook that turns a flat function into a `ClosedJaxpr` while
hoisting closed-over tracers to explicit inputs, so this module wraps the two
`partial_eval` entry points the rules need.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from jax import lax
from jax.core import AbstractValue, ShapedArray, eval_jaxpr
from jax.extend import linear_util as lu
from jax.extend.core import ClosedJaxpr
from jax.interpreters import partial_eval as pe

from whilst._jax_compat import close_jaxpr, convert_constvars_jaxpr, debug_info
from whilst.ir._vma import varying, vary

COUNTER_AVAL = ShapedArray((), np.int32)  # the iteration counter every loop body receives
PRED_AVAL = ShapedArray((), np.bool_)     # a loop's test


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


def call(jaxpr: ClosedJaxpr, *args) -> list:
    """Evaluate a closed jaxpr on the current trace: `jaxpr(*args)`. Inside
    `jax.shard_map`, an argument varying over fewer manual axes than its input
    is cast to vary over them (`_vma`)."""
    args = [vary(x, varying(a)) for x, a in zip(args, jaxpr.in_avals)]
    return eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)


def always_true(avals: Sequence[AbstractValue]) -> ClosedJaxpr:
    """A cond jaxpr over `avals` that is always true (loops bounded by their trip count)."""
    return trace_closed(lambda *_: [lax.full((), True, np.bool_)], avals, "always_true")
