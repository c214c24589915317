"""Packing a step's small residual rows into one row per dtype.

Reverse mode pushes every residual row of a step onto a stack of its own, and
the gradient While pops one row of each per step. A body over a few numbers
(an ODE solver's stages and error terms) has dozens of scalar residuals: on
IREE each stack costs a write and a read per step, about a microsecond each on
local-sync. Packing puts the small rows of one dtype side by side, element by
element, in one row, so that such a step pushes and pops one row per dtype::

    plan = RowPacking.plan(row_avals)
    packed = plan.pack(rows)      # [*unpacked rows, *one row per packed group]
    plan.unpack(packed) == rows

A packed row is a stack of its elements (`jnp.stack` of scalars), the form
that IREE preparation turns into elementwise selects fused with the ops that
compute the elements (`whilst.lowering._iree_fusion`), so packing costs no
copy per element there; the gradient While reads the elements back with static
slices. The selects cost (elements x pieces) per step, so only rows of at most
PACK_ROW_ELEMENTS elements are packed, at most PACK_ELEMENTS to a row: a vector
row costs one write on its own (packing the CG sample's 128-element rows raised
its loop from 26 to 40 dispatches per step). Larger rows, rows of symbolic shape,
empty rows and a dtype's only small row are left as they are.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from jax import lax
from jax.core import ShapedArray

from whilst._jax_compat import is_constant_shape
from whilst.ir._vma import varying, with_varying

PACK_ROW_ELEMENTS = 8  # rows of at most this many elements are packed
PACK_ELEMENTS = 64  # elements of one packed row


@dataclasses.dataclass(frozen=True)
class RowPacking:
    """Which residual rows share a packed row: `groups[g]` lists the indices (into
    `row_avals`) of the rows packed, in that order, into packed row g."""
    row_avals: tuple
    groups: tuple[tuple[int, ...], ...]

    @classmethod
    def plan(cls, row_avals) -> "RowPacking":
        """Group the rows of at most PACK_ROW_ELEMENTS elements of each dtype, in
        order, into rows of at most PACK_ELEMENTS elements; groups of one row are
        dropped."""
        groups, open_groups = [], {}
        for j, aval in enumerate(row_avals):
            size = _size(aval)
            if size is None or not 0 < size <= PACK_ROW_ELEMENTS:
                continue
            group, total = open_groups.get(aval.dtype, ([], 0))
            if total + size > PACK_ELEMENTS:
                groups.append(group)
                group, total = [], 0
            open_groups[aval.dtype] = (group + [j], total + size)
        groups += [group for group, _ in open_groups.values()]
        return cls(tuple(row_avals), tuple(tuple(g) for g in groups if len(g) > 1))

    @functools.cached_property
    def _packed(self) -> frozenset:
        return frozenset(j for g in self.groups for j in g)

    @property
    def packed_avals(self) -> list:
        """The rows a step pushes: the unpacked rows in order, then the packed ones."""
        kept = [a for j, a in enumerate(self.row_avals) if j not in self._packed]
        return kept + [with_varying(
            ShapedArray((sum(_size(self.row_avals[j]) for j in g),), self.row_avals[g[0]].dtype),
            frozenset().union(*(varying(self.row_avals[j]) for j in g))) for g in self.groups]

    def pack(self, rows) -> list:
        """`rows` (one value per `row_avals`) as `packed_avals`."""
        kept = [r for j, r in enumerate(rows) if j not in self._packed]
        return kept + [lax.concatenate([element for j in g for element in _elements(rows[j])],
                                       0) for g in self.groups]

    def unpack(self, packed) -> list:
        """The inverse of `pack`."""
        n_kept = len(self.row_avals) - len(self._packed)
        kept, rows = iter(packed[:n_kept]), [None] * len(self.row_avals)
        for j in range(len(self.row_avals)):
            if j not in self._packed:
                rows[j] = next(kept)
        for g, row in zip(self.groups, packed[n_kept:]):
            start = 0
            for j in g:
                aval = self.row_avals[j]
                size = _size(aval)
                rows[j] = lax.reshape(lax.slice(row, (start,), (start + size,)), aval.shape)
                start += size
        return rows


def _size(aval) -> int | None:
    """Elements of `aval`, None where its shape is symbolic."""
    if not is_constant_shape(aval.shape):
        return None
    return math.prod(aval.shape)


def _elements(row) -> list:
    """The elements of `row` in row-major order, each of shape (1,)."""
    flat = lax.reshape(row, (math.prod(row.shape),))
    return [lax.slice(flat, (e,), (e + 1,)) for e in range(flat.shape[0])]
