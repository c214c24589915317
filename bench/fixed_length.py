"""The fixed-length twin of a whilst program: every `whilst.while_loop` (and
`whilst.lax` loop) replaced by a `jax.lax.scan` of exactly the steps it takes on
given inputs, cond and body unchanged. bench/iree_vs_jax.py compiles it with
whilst's IREE flags as the floor that IREE sets for the same computation.

    trips = trip_counts(fn, *args)      # one Trips per loop, in trace order
    twin = fixed_length(fn, trips)      # twin(*args) == fn(*args)

A loop whose every run took n steps becomes, as plain Python,

    i, xs = 0, loop_vars
    for _ in range(n):                  # lax.scan(length=n, unroll=k)
        i, xs = i + 1, body(*xs)

and one whose runs took different counts (vmapped lanes that stop on their own,
a loop inside a loop) runs the most steps any run took, each step only where the
loop would still be running:

    for _ in range(most):
        running = i < maximum_iterations and cond(*xs)
        i, xs = (i + 1, body(*xs)) if running else (i, xs)   # jnp.where, per lane

Cond and body are taken in the forms an exported whilst loop emits them
(`whilst.ir.exported_loop_forms`: scans in them unrolled, IREE's forms, one-hot
selects when unrolled), and k is the unroll whilst chooses unless given. JAX
differentiates, batches and lowers the scans itself. The loops are found while
`fn` is traced: the frontends' bind of the functional While is swapped for a
recorder (`trip_counts`) or for the scan (`fixed_length`), loops matched by call
order within one trace and checked by name. Loops inside a function JAX has
already traced and cached (an inner `jax.jit`) are not seen: `fixed_length`
raises if fewer loops are traced than were recorded.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import jaxpr_as_fun

from whilst.frontend import _flat_loop
from whilst.ir import exported_loop_forms

_FRONTENDS = (_flat_loop,)  # the module whose `functional_while` binds both frontends' loops


@dataclasses.dataclass
class Trips:
    """Steps one loop took on the recorded inputs: `fewest` and `most` over its
    runs (lanes of a vmap, iterations of an enclosing loop); `unroll`: the steps
    per emitted iteration whilst chooses for its body."""
    name: str
    fewest: int
    most: int
    unroll: int


@contextlib.contextmanager
def _binding(replacement):
    """Swap the frontends' `functional_while` for `replacement` while inside."""
    saved = [m.functional_while for m in _FRONTENDS]
    for m in _FRONTENDS:
        m.functional_while = replacement
    try:
        yield
    finally:
        for m, f in zip(_FRONTENDS, saved):
            m.functional_while = f


def trip_counts(fn, *args) -> list[Trips]:
    """Run `fn(*args)` under `jax.jit` and return the steps each whilst loop took,
    in the order `fn` calls them."""
    bind = _flat_loop.functional_while
    runs: list[tuple[str, list[int], int]] = []

    def recording(cond_consts, body_consts, bound, carry, *, cond_jaxpr, body_jaxpr, name,
                  **options):
        out = bind(cond_consts, body_consts, bound, carry, cond_jaxpr=cond_jaxpr,
                   body_jaxpr=body_jaxpr, name=name, **options)
        counts: list[int] = []
        k = exported_loop_forms(cond_jaxpr, body_jaxpr, options["unroll"])[2]
        runs.append((name, counts, k))
        jax.debug.callback(lambda n: counts.append(int(n)), out[0])
        return out

    with _binding(recording):
        # A fresh function, so that no trace of `fn` cached by an earlier jit is reused.
        jax.block_until_ready(jax.jit(lambda *a: fn(*a))(*args))
    jax.effects_barrier()
    if any(not counts for _, counts, _ in runs):
        raise ValueError(f"trip_counts: a loop of {fn} never ran on these inputs")
    return [Trips(name, min(counts), max(counts), k) for name, counts, k in runs]


def fixed_length(fn, trips: list[Trips], unroll: int | None = None):
    """`fn` with its loops as scans of the recorded lengths (module docstring);
    `unroll`: steps per emitted scan iteration, None for whilst's choice."""
    @functools.wraps(fn)
    def twin(*args):
        order = iter(trips)
        with _binding(functools.partial(_scanned, order, steps_per_iteration=unroll)):
            out = fn(*args)
        left = list(order)
        if left:
            raise ValueError(f"fixed_length: {fn} traced {len(trips) - len(left)} loops, "
                             f"but {len(trips)} were recorded")
        return out
    return twin


def _scanned(order, cond_consts, body_consts, bound, carry, *, steps_per_iteration,
             cond_jaxpr, body_jaxpr, name, unroll, **options):
    """The functional While's results `[counter, *carry]`, from a scan."""
    trips = next(order, None)
    if trips is None or trips.name != name:
        raise ValueError(f"fixed_length: traced loop {name!r} where the recording has "
                         f"{trips and trips.name!r}")
    cond_jaxpr, body_jaxpr, k = exported_loop_forms(
        cond_jaxpr, body_jaxpr, unroll if steps_per_iteration is None else steps_per_iteration)
    cond, body = jaxpr_as_fun(cond_jaxpr), jaxpr_as_fun(body_jaxpr)

    def step(state, _):
        i, xs = state
        after = (i + 1, body(*body_consts, i, *xs))
        if trips.fewest == trips.most:
            return after, None
        (running,) = cond(*cond_consts, i, *xs)
        running = running & (i < bound)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(running, a, b), after,
                                      state), None

    (i, xs), _ = lax.scan(step, (jnp.int32(0), list(carry)), None, length=trips.most,
                          unroll=k)
    return [i, *xs]
