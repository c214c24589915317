"""Indexing arrays of symbolic shape in forms IREE 3.13 compiles.

Under `jax.vmap` over a symbolic batch `b`, a loop body's row reads and writes
(`stack[i]`, `stack.at[i].set(row)`, also the residual stacks of reverse mode)
become `dynamic_slice`, `gather` and `dynamic_update_slice` ops whose windows
span the symbolic dimension. JAX lowers them to `real_dynamic_slice`,
`dynamic_gather` (or `dynamic_reshape`) and a `dynamic_update_slice` of dynamic
shape, which iree-compile 3.13 rejects ("explicitly marked illegal";
`iree_limits/symbolic_rows.py`). The forms here have windows of static
size only: each symbolic dimension a window spans whole is indexed by an iota::

    x[i, :]   (x: f32[n, b])  ==  gather(x, stack([full(b, i), arange(b)], -1))
    x.at[i, :].set(row)       ==  scatter(x, [i], row)   # the b dim a window dim

`symbolic_indexing(jaxpr)` rewrites a jaxpr's such ops (`dynamic_slice`,
`gather`, `dynamic_update_slice`, and the rank changes `squeeze` and `reshape`
to or from size-1 dims, which JAX lowers to `dynamic_reshape`, also rejected),
in cond, scan and while bodies too; `read_row` and `write_row` are the row pop and push of
`_while_lowering.py` in these forms.
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst._jax_compat import is_constant_shape
from whilst.ir.iree_forms._index_bounds import clip_index
from whilst.ir._rewrite import into_control_flow, rewrite_equations

GatherScatterMode = lax.GatherScatterMode


def has_symbolic_rows(stack_shape) -> bool:
    """Whether the rows of a stack of `stack_shape` have a symbolic dimension."""
    return not is_constant_shape(stack_shape[1:])


def symbolic_indexing(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its indexing ops over symbolic whole-dimension windows in the
    forms of the module docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "symbolic_indexing")


def read_row(stack, at):
    """`stack[at]`, `0 <= at < len(stack)`."""
    row_dims = tuple(range(1, stack.ndim))
    dims = lax.GatherDimensionNumbers(offset_dims=tuple(d - 1 for d in row_dims),
                                      collapsed_slice_dims=(0,), start_index_map=(0,))
    return point_gather(stack, lax.reshape(at, (1,)), dims, (1, *stack.shape[1:]),
                        GatherScatterMode.PROMISE_IN_BOUNDS)


def write_row(stack, at, row):
    """`stack.at[at].set(row)`, `0 <= at < len(stack)`."""
    dims = lax.ScatterDimensionNumbers(update_window_dims=tuple(range(row.ndim)),
                                      inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
    return lax.scatter(stack, lax.reshape(at, (1,)), row, dims, indices_are_sorted=True,
                       unique_indices=True, mode=GatherScatterMode.PROMISE_IN_BOUNDS)


def _symbolic(n) -> bool:
    return not is_constant_shape((n,))


def _whole_symbolic_windows(operand_shape, slice_sizes, collapsed=()):
    """Operand dims whose window is symbolic, or None when one of them does not span
    its whole dimension (no form here)."""
    dims = [d for d, s in enumerate(slice_sizes) if _symbolic(s) and d not in collapsed]
    if any(not (slice_sizes[d] == operand_shape[d]) for d in dims):
        return None
    return dims


def point_gather(operand, indices, dimension_numbers, slice_sizes, mode, fill_value=None):
    """`lax.gather(operand, indices, ...)` (index vector last, no batching dims) with
    each window that spans a symbolic dimension whole replaced by one more batch
    dimension of `indices`, indexed by an iota. Such a window starts at 0 (clipped,
    or promised in bounds); the other columns keep the op's mode."""
    dn = dimension_numbers
    sym = _whole_symbolic_windows(operand.shape, slice_sizes, dn.collapsed_slice_dims)
    windows = [d for d in range(operand.ndim) if d not in dn.collapsed_slice_dims]
    out_pos = dict(zip(windows, dn.offset_dims))  # operand window dim -> output position
    out_rank = len(indices.shape) - 1 + len(dn.offset_dims)
    new_batch = {out_pos[d]: d for d in sym}     # output position -> symbolic operand dim
    offset_dims = [p for p in dn.offset_dims if p not in new_batch]
    batch_pos = [p for p in range(out_rank) if p not in offset_dims]
    old_batch = iter(range(len(indices.shape) - 1))
    old_of = {p: next(old_batch) for p in batch_pos if p not in new_batch}
    batch_shape = [operand.shape[new_batch[p]] if p in new_batch
                   else indices.shape[old_of[p]] for p in batch_pos]
    column_shape = (*batch_shape, 1)
    kept = [c for c, d in enumerate(dn.start_index_map) if d not in sym]
    broadcast = [j for j, p in enumerate(batch_pos) if p in old_of] + [len(batch_pos)]
    columns = [lax.broadcast_in_dim(lax.slice_in_dim(indices, c, c + 1, axis=-1),
                                    column_shape, broadcast) for c in kept]
    columns += [lax.broadcasted_iota(indices.dtype, column_shape, j)
                for j, p in enumerate(batch_pos) if p in new_batch]
    new_dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(offset_dims),
        collapsed_slice_dims=tuple(sorted({*dn.collapsed_slice_dims, *sym})),
        start_index_map=(*[dn.start_index_map[c] for c in kept],
                         *[new_batch[p] for p in batch_pos if p in new_batch]))
    sizes = tuple(1 if d in sym else s for d, s in enumerate(slice_sizes))
    return lax.gather(operand, lax.concatenate(columns, len(column_shape) - 1), new_dn, sizes,
                      mode=mode, fill_value=fill_value)


def _as_index(start):
    """A start (any integer scalar) as an `i32[1]` index vector."""
    return lax.reshape(lax.convert_element_type(start, np.int32), (1,))


def _dynamic_slice(operand, *starts, slice_sizes):
    """`lax.dynamic_slice` as a gather (starts clamped as `dynamic_slice` does)."""
    dims = lax.GatherDimensionNumbers(offset_dims=tuple(range(operand.ndim)),
                                      collapsed_slice_dims=(), start_index_map=tuple(
                                          range(operand.ndim)))
    starts = lax.concatenate([clip_index(_as_index(s), n - size) for s, n, size in
                              zip(starts, operand.shape, slice_sizes)], 0)
    return point_gather(operand, starts, dims, slice_sizes, GatherScatterMode.PROMISE_IN_BOUNDS)


def _squeeze(operand, *, dimensions):
    """`lax.squeeze` as a gather of the size-1 dims at 0."""
    kept = [d for d in range(operand.ndim) if d not in dimensions]
    dims = lax.GatherDimensionNumbers(offset_dims=tuple(range(len(kept))),
                                      collapsed_slice_dims=tuple(dimensions),
                                      start_index_map=tuple(dimensions))
    return point_gather(operand, np.zeros((len(dimensions),), np.int32), dims,
                        operand.shape, GatherScatterMode.PROMISE_IN_BOUNDS)


def _unit_dims_only(shape, new_sizes) -> bool:
    """Whether a reshape from `shape` to `new_sizes` only drops or adds dims of size 1."""
    def kept(dims):
        return [d for d in dims if _symbolic(d) or d != 1]
    old, new = kept(shape), kept(new_sizes)
    return len(old) == len(new) and all(a == b for a, b in zip(old, new))


def _reshape(operand, *, new_sizes, **_):
    """A `lax.reshape` that drops or adds size-1 dims, as a `_squeeze` and a
    `broadcast_in_dim`."""
    units = tuple(d for d, n in enumerate(operand.shape) if not _symbolic(n) and n == 1)
    squeezed = _squeeze(operand, dimensions=units) if units else operand
    kept = tuple(d for d, n in enumerate(new_sizes) if _symbolic(n) or n != 1)
    return lax.broadcast_in_dim(squeezed, tuple(new_sizes), kept)


def _gather(operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value, **_):
    return point_gather(operand, indices, dimension_numbers, slice_sizes, mode, fill_value)


def _dynamic_update_slice(operand, update, *starts):
    """`lax.dynamic_update_slice` as a scatter of single positions along each dim the
    update does not span whole (those dims inserted, the form IREE 3.13 accepts;
    the starts clamped first, as `dynamic_update_slice` does), windows along the
    others."""
    indexed = [d for d in range(operand.ndim) if not update.shape[d] == operand.shape[d]]
    if not indexed:
        return update
    rest = [d for d in range(operand.ndim) if d not in indexed]
    grid = tuple(update.shape[d] for d in indexed)
    columns = []
    for j, d in enumerate(indexed):
        start = clip_index(starts[d], operand.shape[d] - update.shape[d])
        columns.append(start + lax.broadcasted_iota(np.int32, (*grid, 1), j))
    dims = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(len(indexed), operand.ndim)),
        inserted_window_dims=tuple(indexed), scatter_dims_to_operand_dims=tuple(indexed))
    return lax.scatter(operand, lax.concatenate(columns, len(indexed)),
                       lax.transpose(update, (*indexed, *rest)), dims, indices_are_sorted=True,
                       unique_indices=True, mode=GatherScatterMode.PROMISE_IN_BOUNDS)


def _rule(eqn):
    name = eqn.primitive.name
    shape = eqn.invars[0].aval.shape if eqn.invars else ()
    if is_constant_shape(shape):
        return None
    if name == "dynamic_slice":
        return (_dynamic_slice if _whole_symbolic_windows(shape, eqn.params["slice_sizes"])
                else None)
    if name == "gather":
        dn = eqn.params["dimension_numbers"]
        sym = _whole_symbolic_windows(shape, eqn.params["slice_sizes"], dn.collapsed_slice_dims)
        fill = GatherScatterMode.from_any(eqn.params["mode"]) == GatherScatterMode.FILL_OR_DROP
        if sym and not dn.operand_batching_dims and not (
                fill and set(sym) & set(dn.start_index_map)):
            return _gather
        return None
    if name == "squeeze":
        return _squeeze
    if name == "reshape" and eqn.params.get("dimensions") is None and _unit_dims_only(
            shape, eqn.params["new_sizes"]):
        return _reshape
    if name == "dynamic_update_slice":
        return _dynamic_update_slice
    return None


_RULE = into_control_flow(_rule)
