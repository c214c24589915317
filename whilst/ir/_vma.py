"""Varying manual axes (vma): the types `jax.shard_map` (with `check_vma`) gives
values. Inside `shard_map`, a value is *invariant* over a mesh axis (equal on
every device along it) or *varying* over it; `jax.typeof(x).mat.varying` names
the axes it varies over, and an op on a varying and an invariant value first
casts the invariant one (`pvary`, no data moves). Outside `shard_map` every
value is invariant and nothing here changes a value or a type.

A loop's carry varies over the axes its body's outputs and its trip count vary
over (`whilst.frontend._flat_loop`); the arrays whilst's rules make for a loop
(stacks, slots, accumulators) vary as the values they hold. The iteration
counters of whilst's own loops stay typed invariant: integers, never
differentiated, so no transformation sums them over devices.
"""
from __future__ import annotations

import jax
from jax.core import ShapedArray

from whilst._jax_compat import pvary

NONE = frozenset()


def varying(x) -> frozenset:
    """The axes a value or abstract value varies over (none outside `shard_map`)."""
    aval = x if isinstance(x, ShapedArray) else jax.typeof(x)
    return aval.mat.varying if isinstance(aval, ShapedArray) else NONE


def vary(x, axes):
    """`x`, cast to vary over `axes` too (itself where it already does)."""
    missing = frozenset(axes) - varying(x)
    return pvary(x, tuple(sorted(missing, key=str))) if missing else x


def with_varying(aval, axes):
    """`aval` varying over `axes` too (used where a loop makes its own values)."""
    missing = frozenset(axes) - varying(aval)
    if not missing:
        return aval
    return aval.update(sharding=aval.sharding.update(mesh=jax.sharding.get_abstract_mesh()),
                       manual_axis_type=aval.mat.update(varying=aval.mat.varying | missing))
