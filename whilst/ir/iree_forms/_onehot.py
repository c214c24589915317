"""Reads and writes of small arrays at computed positions, as elementwise selects.

iree-compile 3.13 fails on unrolled loop bodies that index at a computed
position (`_unroll.DYNAMIC_INDEXING`), so such bodies used to run one step per
IREE loop iteration. `onehot_indexing` rewrites each such op whose one-hot form
touches at most ONE_HOT_ELEMENTS elements into selects over the whole array,
which unroll like any elementwise body::

    x[j]               # dynamic_slice, or a gather of one row
      == sum(where(arange(n) == clip(j, 0, n - 1), bits(x), 0))  # bit patterns
    x.at[j].set(v)     # dynamic_update_slice, or a scatter of one row
      == where(arange(n) == j, v, x)
    vmap(lambda x, j: x[j])(xs, js)   # a gather of one row per batch element
      == sum(where(arange(n) == clip(js[:, None], 0, n - 1), bits(xs), 0), axis=1)

Reads of an axis of at most SELECTED_LINES lines are chains of selects instead,
elementwise: IREE runs the sum as a reduction, which it fuses with elementwise
code by reading the array element by element (a predicated write reading back the
window of a [7, 1024, 2] stage buffer: 2.9 us a run, 1.5 us as selects)::

    x[j] == where(j == 0, x[0], where(j == 1, x[1], ... where(j == n - 1, x[n - 1], 0)))

Reads select the bit patterns of the elements (one is non-zero per output), so
results equal the indexed forms bit for bit, NaN payloads and -0.0 included;
clamping (dynamic_slice, mode=clip) and out-of-bounds fills or drops
(mode=fill) are those of the op. Gathers and scatters are rewritten only in the
one-row form `jnp` emits for `x[j]` and `x.at[j].op(v)` with a scalar `j`, and
gathers also in the form `jax.vmap` makes of `x[j]` (a batching dim in front);
everything else, and ops inside control flow other than `jit` and `custom_jvp`
calls, stays as it is. Exports for a GPU select over larger arrays
(`_gpu_export.scaled`).
"""
from __future__ import annotations

import functools

import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import ClosedJaxpr, Literal

from whilst._jax_compat import is_constant_shape
from whilst.ir._gpu_export import scaled
from whilst.ir._rewrite import rewrite_equations

ONE_HOT_ELEMENTS = 4096  # elements one rewritten op selects over (array x slice size; CPU)
SELECTED_LINES = 8  # lines `pick` selects among by a chain of selects (more: a masked sum)

_SCATTER_COMBINE = {"scatter": None, "scatter-add": lax.add, "scatter_add": lax.add,
                    "scatter-mul": lax.mul, "scatter_mul": lax.mul,
                    "scatter-min": lax.min, "scatter_min": lax.min,
                    "scatter-max": lax.max, "scatter_max": lax.max}
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def onehot_indexing(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its small computed-position reads and writes as selects (see
    the module docstring); the same jaxpr object when it has none."""
    return rewrite_equations(jaxpr, _rule, "onehot_indexing")


def _rule(eqn):
    """The one-hot form of `eqn`, or None where it keeps its own."""
    name = eqn.primitive.name
    if name not in ("dynamic_slice", "dynamic_update_slice", "gather", *_SCATTER_COMBINE):
        return None
    operand = eqn.invars[0].aval
    if (not isinstance(operand, ShapedArray) or not selectable(operand.dtype)
            or not is_constant_shape(operand.shape)):
        return None
    if name == "dynamic_slice":
        positions, size = eqn.invars[1:], int(np.prod(eqn.params["slice_sizes"]))
        rule = _dynamic_slice
    elif name == "dynamic_update_slice":
        positions, size = eqn.invars[2:], int(np.prod(eqn.invars[1].aval.shape))
        rule = _dynamic_update_slice
    elif name == "gather" and _one_row(eqn, "offset_dims", "collapsed_slice_dims",
                                       "start_index_map"):
        positions, size, rule = eqn.invars[1:], 1, _gather_row
    elif name == "gather" and _one_row_per_batch(eqn):
        positions, size, rule = eqn.invars[1:], 1, _gather_row_per_batch
    elif name in _SCATTER_COMBINE and _one_row(eqn, "update_window_dims",
                                               "inserted_window_dims",
                                               "scatter_dims_to_operand_dims"):
        positions, size = eqn.invars[1:2], 1
        rule = functools.partial(_scatter_row, combine=_SCATTER_COMBINE[name])
    else:
        return None
    if all(isinstance(v, Literal) for v in positions):
        return None
    if size * int(np.prod(operand.shape)) > scaled(ONE_HOT_ELEMENTS):
        return None
    return rule


def selectable(dtype) -> bool:
    """Whether `pick` takes arrays of `dtype` (booleans, integers, floats)."""
    return np.dtype(dtype).kind in "biuf" and np.dtype(dtype).itemsize in _BITS


def _one_row(eqn, window_dims, row_dims, index_map) -> bool:
    """Whether a gather/scatter reads or writes the row `x[j]`: `j` a `[1]` index
    into axis 0, the rest of the row whole and in order."""
    operand, indices = eqn.invars[0].aval, eqn.invars[1].aval
    row = (eqn.invars[2] if len(eqn.invars) > 2 else eqn.outvars[0]).aval  # scatter, gather
    dn = eqn.params["dimension_numbers"]
    ndim = len(operand.shape)
    return (ndim >= 1 and indices.shape == (1,)
            and tuple(getattr(dn, window_dims)) == tuple(range(ndim - 1))
            and tuple(getattr(dn, row_dims)) == (0,)
            and tuple(getattr(dn, index_map)) == (0,)
            and not getattr(dn, "operand_batching_dims", ())
            and tuple(eqn.params.get("slice_sizes", (1, *operand.shape[1:])))
            == (1, *operand.shape[1:])
            and row.shape == operand.shape[1:])


def _one_row_per_batch(eqn) -> bool:
    """Whether a gather reads `x[b, js[b]]` for each b (`jax.vmap` of `x[j]`): x of
    shape [B, n, *rest], indices [B, m] into axes 1 .. m batched with axis 0 (the
    columns past the first clamped to 0: their axes are taken whole), the rest of
    each row whole and in order, axis 1 kept (size 1) or collapsed."""
    operand, indices = eqn.invars[0].aval, eqn.invars[1].aval
    dn, out = eqn.params["dimension_numbers"], eqn.outvars[0].aval
    ndim, m = len(operand.shape), indices.shape[-1] if len(indices.shape) == 2 else 0
    collapsed = tuple(dn.collapsed_slice_dims)
    kept = ndim - 1 - len(collapsed)
    clipped = lax.GatherScatterMode.from_any(eqn.params["mode"]) == lax.GatherScatterMode.CLIP
    return (ndim >= 2 and indices.shape == (operand.shape[0], m) and m >= 1
            and (m == 1 or clipped)
            and tuple(getattr(dn, "operand_batching_dims", ())) == (0,)
            and tuple(getattr(dn, "start_indices_batching_dims", ())) == (0,)
            and tuple(dn.start_index_map) == tuple(range(1, m + 1))
            and collapsed in ((), (1,))
            and tuple(dn.offset_dims) == tuple(range(1, 1 + kept))
            and tuple(eqn.params["slice_sizes"]) == (1, 1, *operand.shape[2:])
            and out.shape == (operand.shape[0], *((1,) if not collapsed else ()),
                              *operand.shape[2:]))


def _at(position, axis, shape):
    """Boolean array of `shape`: element index along `axis` == `position` (int32)."""
    return lax.eq(lax.broadcasted_iota(np.int32, shape, axis), lax.broadcast(position, shape))


def pick(x, position, axis):
    """`x`'s line at `position` along `axis` (int32: a scalar, or one per line, of
    `x`'s shape with `axis` of size 1), as `x`'s exact bit pattern, axis kept with
    size 1; zeros where no line is there. Up to SELECTED_LINES lines, a chain of
    selects, else a masked sum (module docstring)."""
    bits = _BITS[x.dtype.itemsize]
    as_bits = (lax.convert_element_type(x, bits) if x.dtype == np.bool_
               else lax.bitcast_convert_type(x, bits))
    line = (*x.shape[:axis], 1, *x.shape[axis + 1:])
    if x.shape[axis] <= SELECTED_LINES:
        picked = lax.full(line, 0, bits)
        for r in range(x.shape[axis]):
            here = lax.eq(position, np.int32(r))
            here = lax.broadcast(here, line) if not here.shape else here
            picked = lax.select(here, lax.slice_in_dim(as_bits, r, r + 1, axis=axis), picked)
    else:
        at = (lax.broadcast(position, x.shape) if not position.shape else
              lax.broadcast_in_dim(position, x.shape, tuple(range(x.ndim))))
        mask = lax.eq(lax.broadcasted_iota(np.int32, x.shape, axis), at)
        chosen = lax.select(mask, as_bits, lax.full_like(as_bits, 0))
        picked = lax.expand_dims(lax.reduce_sum(chosen, (axis,)), (axis,))
    if x.dtype == np.bool_:
        return lax.ne(picked, lax.full_like(picked, 0))
    return lax.bitcast_convert_type(picked, x.dtype)


def _clamped(position, high):
    """`clip(position, 0, high)` as int32, clipped in `position`'s own dtype
    (0 <= high < 2**31) so that no value wraps."""
    dtype = np.dtype(position.dtype)
    high = min(high, np.iinfo(dtype).max)
    clipped = lax.clamp(np.array(0, dtype), position, np.array(high, dtype))
    return lax.convert_element_type(clipped, np.int32)


def _dynamic_slice(x, *starts, slice_sizes):
    """`lax.dynamic_slice(x, starts, slice_sizes)`: starts clamped to fit."""
    for axis, (start, size) in enumerate(zip(starts, slice_sizes)):
        n = x.shape[axis]
        if size == n:
            continue
        start = _clamped(start, n - size)
        rows = [pick(x, lax.add(start, np.int32(r)), axis)
                for r in range(size)]
        x = rows[0] if size == 1 else lax.concatenate(rows, axis)
    return x


def _dynamic_update_slice(x, update, *starts):
    """`lax.dynamic_update_slice(x, update, starts)`: starts clamped to fit."""
    placed, inside = update, None
    for axis, start in enumerate(starts):
        n, size = x.shape[axis], update.shape[axis]
        if size == n:
            continue
        start = _clamped(start, n - size)
        placed = _spread(placed, axis, start, n)
        iota = lax.broadcasted_iota(np.int32, x.shape, axis)
        here = lax.bitwise_and(
            lax.ge(iota, lax.broadcast(start, x.shape)),
            lax.lt(iota, lax.broadcast(lax.add(start, np.int32(size)), x.shape)))
        inside = here if inside is None else lax.bitwise_and(inside, here)
    return placed if inside is None else lax.select(inside, placed, x)


def _spread(update, axis, start, n):
    """`update` widened to `n` along `axis`, with its line r at `start + r` (the
    other lines hold copies)."""
    shape = (*update.shape[:axis], n, *update.shape[axis + 1:])

    def line(r):
        return lax.broadcast_in_dim(lax.slice_in_dim(update, r, r + 1, axis=axis), shape,
                                    tuple(range(len(shape))))

    spread = line(0)
    for r in range(1, update.shape[axis]):
        spread = lax.select(_at(lax.add(start, np.int32(r)), axis, shape), line(r), spread)
    return spread


def _row_index(j, n, mode):
    """`(j, in_bounds)` for the rows `j` (any shape): j clamped into [0, n) as int32;
    in_bounds None unless mode=fill (where the original j is tested)."""
    clamped = _clamped(j, n - 1)
    if lax.GatherScatterMode.from_any(mode) != lax.GatherScatterMode.FILL_OR_DROP:
        return clamped, None
    high = min(n - 1, np.iinfo(j.dtype).max)
    in_bounds = lax.bitwise_and(lax.ge(j, np.array(0, j.dtype)),
                                lax.le(j, np.array(high, j.dtype)))
    return clamped, in_bounds


def _gather_row(x, indices, *, mode, fill_value=None, **_):
    """`x[indices[0]]` of a one-row gather, with the gather's bounds mode."""
    j, in_bounds = _row_index(lax.reshape(indices, ()), x.shape[0], mode)
    row = lax.squeeze(pick(x, j, 0), (0,))
    if in_bounds is None:
        return row
    return lax.select(lax.broadcast(in_bounds, row.shape), row,
                      lax.full_like(row, 0 if fill_value is None else fill_value))


def _gather_row_per_batch(x, indices, *, dimension_numbers, mode, fill_value=None, **_):
    """`x[b, indices[b, 0]]` for each b (`_one_row_per_batch`), with the gather's
    bounds mode, axis 1 kept or collapsed as the gather has it."""
    first = lax.reshape(lax.slice_in_dim(indices, 0, 1, axis=1), indices.shape[:1])
    j, in_bounds = _row_index(first, x.shape[1], mode)
    position = lax.broadcast_in_dim(j, (x.shape[0], 1, *x.shape[2:]), (0,))
    rows = pick(x, position, 1)
    if in_bounds is not None:
        rows = lax.select(lax.broadcast_in_dim(in_bounds, rows.shape, (0,)), rows,
                          lax.full_like(rows, 0 if fill_value is None else fill_value))
    return lax.squeeze(rows, (1,)) if dimension_numbers.collapsed_slice_dims else rows


def _scatter_row(x, indices, update, *, combine, mode, **_):
    """`x.at[indices[0]].set(update)` (or `.add`, ... with `combine`), with the
    scatter's bounds mode (an out-of-bounds row of mode=fill is dropped)."""
    j, in_bounds = _row_index(lax.reshape(indices, ()), x.shape[0], mode)
    mask = _at(j, 0, x.shape)
    if in_bounds is not None:
        mask = lax.bitwise_and(mask, lax.broadcast(in_bounds, x.shape))
    row = lax.broadcast_in_dim(update, x.shape, tuple(range(1, x.ndim)))
    return lax.select(mask, row if combine is None else combine(x, row), x)
