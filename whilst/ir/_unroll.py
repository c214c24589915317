"""How many loop steps each emitted `stablehlo.while` iteration runs (unrolling).

IREE pays about 2 us of host work per loop iteration on a CPU, and tens of
microseconds on a GPU, so small bodies run k steps per iteration (see
`_while_lowering.py` for the emitted form); exports for a GPU (`_gpu_export`) aim
for more work per iteration.
Reverse mode fixes the factors of the loops it creates when it builds them,
because they decide how its residual stacks are laid out (`reverse/_stored.py`).
`lax.scan`s inside exported loop bodies are unrolled by the same measure
(`unrolled_scans`), through scan's own `unroll`.
"""
from __future__ import annotations

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from whilst._jax_compat import is_constant_shape
from whilst.ir._functional_while import functional_while_p
from whilst.ir._gpu_export import for_gpu, scaled
from whilst.ir._lowered_size import lowered_ops
from whilst.ir._tracing import jaxprs_in_params
from whilst.ir.iree_forms._onehot import onehot_indexing
from whilst.ir.iree_forms._portable_linalg import expansion

MAX_UNROLL = 64
# Exports for a GPU unroll at most this many steps, `unroll=` included: IREE 3.13's
# cuda code of the sin loop unrolled 32 or 64 times gives wrong results (64: for
# every n; 32: where it ends before its first full iteration), 8 and 16 are right
# (iree_limits/gpu_pick_reduction.py, H100).
MAX_GPU_UNROLL = 16
# Scans in exported bodies unroll less: past 8 steps, iree-compile's time grows
# faster than the run time falls (the Newton sample, `bench/NOTES.md`).
MAX_SCAN_UNROLL = 8
# Library loops nested in exported bodies that count to a bound unroll by it, up to
# this (`_counted_loops.py`): diffrax's Tsit5 and Dopri5 stage loops count to 7.
MAX_COUNTED_UNROLL = 8
# Equations of the emitted body (k copies of cond and body) that automatic
# unrolling aims to stay below: iree-compile's time grows with them. The ODE
# sample's body (287 equations, one-hot selects included) unrolled 15 times took
# 30 s to compile against 6.9 s at k = 1, and ran no faster: its ~40 dispatches
# per step, not the per-iteration cost, set its speed.
MAX_UNROLLED_EQUATIONS = 512
WORK_PER_ITERATION = 16384  # elements of work one emitted iteration aims for (CPU)
LARGE_CARRY_BYTES = 64 * 1024  # (CPU)
# Loops nested in a body make it a full iteration's work: unrolled copies of them
# gain little, and IREE 3.13 fails on some ("failed to solve for timepoint
# coverage": the Newton sample's solver, 13 steps of two lax.scans each).
LOOPS = frozenset({"scan", "while"})
# So do branches (`lax.cond`, `lax.switch`): each is a branch the host takes where
# IREE drives the loop from the host, so unrolled copies gain little, and IREE 3.13
# fails on a loop that carries 4 values through 32 unrolled copies of one `lax.cond`
# ("failed to solve for timepoint coverage", `iree_limits/branches_in_loop.py`).
BRANCHES = frozenset({"cond"})
# Unrolled bodies that index at a computed position fail in iree-compile 3.13:
# writes segfault or leave unresolved materializations; reads compile for some
# programs and fail with "failed to solve for timepoint coverage" for others.
# Small arrays are indexed by one-hot selects instead (`_onehot.py`); residual
# stacks are pushed and popped by the loop itself (`_stacks.py`); neither
# counts here.
IN_PLACE_UPDATES = frozenset({"dynamic_update_slice", "push_row"})  # operand, update, *index
# Elementwise primitives of many flops per element (a libm call each on a CPU).
TRANSCENDENTAL = frozenset({
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "exp", "exp2", "expm1", "log", "log1p", "logistic", "pow", "erf",
    "erfc", "erf_inv", "lgamma", "digamma", "igamma", "cbrt"})
DYNAMIC_INDEXING = IN_PLACE_UPDATES | frozenset({
    "dynamic_slice", "gather", "scatter", "scatter-add", "scatter_add", "scatter-mul",
    "scatter_mul", "scatter-min", "scatter_min", "scatter-max", "scatter_max"})


def unroll_factor(cond_jaxpr, body_jaxpr, unroll) -> int:
    """Loop steps per `stablehlo.while` iteration: `unroll` if given, else automatic;
    at most MAX_GPU_UNROLL in exports for a GPU.

    Automatic: 1 for bodies with effects (an inactive step would run them),
    with a carry over 64 KiB (`_gpu_export.scaled`; the predicated steps select
    whole carries), or
    with a read or write at a computed index of an array too large for one-hot
    selects (iree-compile 3.13 crashes or fails on such bodies unrolled, see
    `DYNAMIC_INDEXING`); otherwise as many steps as fit in about 16384
    elements of work (`_gpu_export.scaled` for a GPU), one-hot selects included,
    and in MAX_UNROLLED_EQUATIONS equations, at most 64 (tiny bodies unroll
    more).
    """
    most = MAX_GPU_UNROLL if for_gpu() else MAX_UNROLL
    if unroll is not None:
        return min(unroll, most)
    if cond_jaxpr.effects or body_jaxpr.effects:
        return 1
    cond_jaxpr, body_jaxpr = onehot_indexing(cond_jaxpr), onehot_indexing(body_jaxpr)
    return _fitting_steps(body_jaxpr.jaxpr, [cond_jaxpr.jaxpr], most)


def unrolled_scans(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` with every `lax.scan` in it (in sub-jaxprs too) that has no
    `unroll` of its own unrolled by `scan_unroll_factor`; the same object when
    nothing changes. Same results: scan's `unroll` changes only the emitted loop."""
    jaxpr = _with_unrolled_scans(closed.jaxpr)
    return closed if jaxpr is closed.jaxpr else ClosedJaxpr(jaxpr, closed.consts)


def scan_unroll_factor(eqn) -> int:
    """Steps per emitted iteration for the `scan` equation `eqn`, chosen as
    `unroll_factor` chooses for a whilst loop, but at most MAX_SCAN_UNROLL (and the
    scan's length)."""
    (body,) = jaxprs_in_params({"jaxpr": eqn.params["jaxpr"]})
    return _fitting_steps(body, [], min(eqn.params["length"], MAX_SCAN_UNROLL))


def counted_unroll_factor(cond_jaxpr, body_jaxpr, bound: int) -> int:
    """Steps per emitted iteration for a library loop nested in an exported body
    that counts to `bound` (`_counted_loops.py`): `bound`, at most
    MAX_COUNTED_UNROLL; 1 where `unroll_factor` would not unroll it for what its
    body does (effects, an index at a computed position, symbolic shapes, a large
    carry). Neither its work nor its equations are weighed: one emitted iteration
    of all its steps is the point, which saves the submissions and readback each
    host-driven iteration costs however wide the body (a vmapped batch of 1024
    Tsit5 solves: `bench/NOTES.md`)."""
    cond_jaxpr, body_jaxpr = onehot_indexing(cond_jaxpr), onehot_indexing(body_jaxpr)
    return _fitting_steps(body_jaxpr.jaxpr, [cond_jaxpr.jaxpr], min(bound, MAX_COUNTED_UNROLL),
                          weigh=False)


def _fitting_steps(body: Jaxpr, others: list, most: int, weigh=True) -> int:
    """How many steps of `body` (and of the `others` run with it, a cond) fit one
    emitted iteration, at most `most` (see `unroll_factor`): 1 with effects, an
    index at a computed position, symbolic shapes or a carry over LARGE_CARRY_BYTES;
    otherwise, if `weigh`, as many as fit WORK_PER_ITERATION elements of work and
    MAX_UNROLLED_EQUATIONS equations, else `most`."""
    jaxprs = [body, *others]
    if any(j.effects or _indexes_at_computed_position(j) for j in jaxprs):
        return 1
    if not all(is_constant_shape(v.aval.shape) for j in jaxprs for v in _all_vars(j)):
        return 1  # symbolic shapes: sizes unknown
    if any(nbytes(v.aval) > scaled(LARGE_CARRY_BYTES) for v in body.outvars):
        return 1
    if not weigh:
        return most
    elements, equations = sum(map(work, jaxprs)), sum(map(_equations, jaxprs))
    return max(1, min(most, scaled(WORK_PER_ITERATION) // max(elements, 1),
                      MAX_UNROLLED_EQUATIONS // max(equations, 1)))


def _with_unrolled_scans(jaxpr: Jaxpr) -> Jaxpr:
    eqns = []
    for eqn in jaxpr.eqns:
        params = {name: _map_jaxprs(value, _with_unrolled_scans)
                  for name, value in eqn.params.items()}
        if eqn.primitive.name == "scan" and params["unroll"] == 1:
            params["unroll"] = scan_unroll_factor(eqn.replace(params=params))
        changed = any(params[name] is not value for name, value in eqn.params.items())
        eqns.append(eqn.replace(params=params) if changed else eqn)
    if all(a is b for a, b in zip(eqns, jaxpr.eqns)):
        return jaxpr
    return jaxpr.replace(eqns=eqns)


def _map_jaxprs(value, fn):
    """`value` with `fn` applied to each `Jaxpr` in it (bare, closed, or in a tuple
    such as cond's branches); the same object when `fn` changes none."""
    if isinstance(value, ClosedJaxpr):
        inner = fn(value.jaxpr)
        return value if inner is value.jaxpr else ClosedJaxpr(inner, value.consts)
    if isinstance(value, Jaxpr):
        return fn(value)
    if isinstance(value, tuple) and any(isinstance(v, (Jaxpr, ClosedJaxpr)) for v in value):
        mapped = tuple(_map_jaxprs(v, fn) for v in value)
        return value if all(a is b for a, b in zip(mapped, value)) else mapped
    return value


def _all_vars(jaxpr: Jaxpr):
    yield from jaxpr.invars
    for eqn in jaxpr.eqns:
        yield from eqn.outvars
        for sub in jaxprs_in_params(eqn.params):
            yield from _all_vars(sub)


def _indexes_at_computed_position(jaxpr: Jaxpr) -> bool:
    """Whether `jaxpr` has a `DYNAMIC_INDEXING` op whose position is not a literal."""
    for eqn in jaxpr.eqns:
        first_index = 2 if eqn.primitive.name in IN_PLACE_UPDATES else 1
        if eqn.primitive.name in DYNAMIC_INDEXING and not all(
                isinstance(v, Literal) for v in eqn.invars[first_index:]):
            return True
        if any(map(_indexes_at_computed_position, jaxprs_in_params(eqn.params))):
            return True
    return False


def _equations(jaxpr: Jaxpr) -> int:
    """Equations of `jaxpr`, those of its sub-jaxprs and of the portable linear
    algebra it lowers to (`_portable_linalg.expansion`) included; a random-bits
    equation counts the ops it lowers to (`_lowered_size`)."""
    return sum(lowered_ops(eqn) or (1 + sum(map(_equations, _inside(eqn))))
               for eqn in jaxpr.eqns)


def _inside(eqn) -> list:
    """The jaxprs in `eqn`'s parameters, or what its linear algebra lowers to."""
    expanded = expansion(eqn)
    return [expanded] if expanded is not None else list(jaxprs_in_params(eqn.params))


def nbytes(aval) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


def total_nbytes(avals) -> int | None:
    """The bytes of `avals` together; None where a shape is symbolic."""
    if not all(is_constant_shape(a.shape) for a in avals):
        return None
    return sum(map(nbytes, avals))


def work(jaxpr: Jaxpr, transcendental: int = 1) -> int:
    """Elements produced by `jaxpr`'s equations (a dot counts its multiply-adds,
    linear algebra what it lowers to, random bits each element once per op they
    lower to, an elementwise transcendental such as `sin` `transcendental` times);
    a nested loop (whilst's or jax.lax's) or a branch counts as a full iteration's
    budget."""
    total = 0
    for eqn in jaxpr.eqns:
        if (eqn.primitive is functional_while_p or eqn.primitive.name in LOOPS
                or eqn.primitive.name in BRANCHES):
            return scaled(WORK_PER_ITERATION)
        subs = _inside(eqn)
        if subs:
            total += sum(work(sub, transcendental) for sub in subs)
            continue
        out = sum(int(np.prod(v.aval.shape, dtype=np.int64)) for v in eqn.outvars)
        if eqn.primitive.name in IN_PLACE_UPDATES:  # in place: the update's size
            out = int(np.prod(eqn.invars[1].aval.shape, dtype=np.int64))
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            out *= int(np.prod([lhs_shape[d] for d in contract], dtype=np.int64))
        if eqn.primitive.name in TRANSCENDENTAL:
            out *= transcendental
        total += out * (lowered_ops(eqn) or 1)
    return total
