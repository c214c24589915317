"""Gathers and scatters at out-of-bounds indices, in forms IREE 3.13 runs as XLA does.

JAX leaves out-of-bounds indices to the backend: `x[idx]` is a gather with mode
`promise_in_bounds` (and `mode="clip"` one with mode clip), whose start indices
XLA clamps, and
`x.at[idx].set/add/...` a scatter with mode `drop`, whose out-of-bounds update
windows XLA skips (the whole window when any part of it is outside). IREE 3.13
does neither: a gather reads past the operand, and a scatter at index -1 or
10**8 crashes or corrupts the heap (`iree_limits/scatter_out_of_bounds.mlir`).
`in_bounds_indexing(jaxpr)` makes every such op index in bounds::

    gather(x, idx, mode=promise_in_bounds or clip)  ->  gather(x, clip(idx), ...)
    gather(x, idx, mode=fill)  ->  where(window in bounds, gather(x, clip(idx)), fill)

    scatter-op(x, idx, v, mode=drop)  ->  scatter-op(x, clip(idx), v', mode=promise_in_bounds)
      where v' = where(window in bounds, v, e)
      e: the op's identity (add -0.0, sub 0, mul 1, min +inf, max -inf), or for a
         set with one window, x's window at clip(idx) (written back unchanged)

A set (or `.apply`) with several windows sends each out-of-bounds window to a row
of padding past the operand, sliced off after (one copy of the operand).
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst._jax_compat import is_constant_shape
from whilst.ir._rewrite import into_control_flow, rewrite_equations

Mode = lax.GatherScatterMode
_ARITHMETIC = {"scatter-add", "scatter-sub", "scatter-mul", "scatter-min", "scatter-max"}


def in_bounds_indexing(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its gathers and dropping scatters in the forms of the module
    docstring; the same object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "in_bounds_indexing")


def _rule(eqn):
    name, params = eqn.primitive.name, eqn.params
    if "mode" not in params:
        return None
    mode = Mode.from_any(params["mode"])
    if name == "gather" and not params["dimension_numbers"].operand_batching_dims:
        return _clamped_gather
    dn = params.get("dimension_numbers")
    if (name == "scatter" or name in _ARITHMETIC) and mode == Mode.FILL_OR_DROP and not (
            dn.operand_batching_dims) and _static_windows(eqn.invars[0].aval, eqn.invars[2].aval,
                                                          dn):
        return lambda *args, **params: _in_bounds_scatter(eqn.primitive, *args, **params)
    return None


def _clamped_gather(operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value,
                    **params):
    """The gather with each start index clipped so that its window fits; under mode
    fill, the windows that did not fit filled as JAX fills them."""
    dn = dimension_numbers
    columns = [lax.slice_in_dim(indices, c, c + 1, axis=indices.ndim - 1)
               for c in range(indices.shape[-1])]
    highs = [operand.shape[d] - slice_sizes[d] for d in dn.start_index_map]
    clipped = (lax.concatenate([clip_index(c, high) for c, high in zip(columns, highs)],
                               indices.ndim - 1) if columns else indices)
    out = lax.gather_p.bind(operand, clipped, dimension_numbers=dn, slice_sizes=slice_sizes,
                            mode=Mode.PROMISE_IN_BOUNDS, fill_value=None, **params)
    if Mode.from_any(mode) != Mode.FILL_OR_DROP:
        return out
    inside = _all_fit(columns, highs, indices.shape)
    batch_dims = [p for p in range(out.ndim) if p not in dn.offset_dims]
    return lax.select(lax.broadcast_in_dim(lax.reshape(inside, indices.shape[:-1]), out.shape,
                                           tuple(batch_dims)),
                      out, lax.full_like(out, _fill(out.dtype, fill_value)))


def _fill(dtype, fill_value):
    """JAX's fill value of a gather: `fill_value`, or by default NaN, the lowest
    signed or the highest unsigned integer, or True."""
    dtype = np.dtype(dtype)
    if fill_value is not None:
        return fill_value
    if dtype.kind in "fc":
        return np.nan
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max


def _all_fit(columns, highs, indices_shape):
    """Whether every column of the index vectors lies in `[0, high]`, `[*batch, 1]`."""
    inside = lax.full((*indices_shape[:-1], 1), True)
    for column, high in zip(columns, highs):
        inside = lax.bitwise_and(inside, _fits(column, high))
    return inside


def _window_shape(operand_shape, updates_shape, dn) -> tuple:
    """The update window's size along each operand dim (1 where inserted)."""
    windows = [d for d in range(len(operand_shape)) if d not in dn.inserted_window_dims]
    size = {d: updates_shape[u] for d, u in zip(windows, dn.update_window_dims)}
    return tuple(size.get(d, 1) for d in range(len(operand_shape)))


def _window_sizes(operand_shape, updates_shape, dn):
    """The update window's size along each indexed operand dim (1 where inserted)."""
    shape = _window_shape(operand_shape, updates_shape, dn)
    return [shape[d] for d in dn.scatter_dims_to_operand_dims]


def _static_windows(operand, updates, dn) -> bool:
    """Whether the indexed dims and their windows have constant sizes."""
    sizes = _window_sizes(operand.shape, updates.shape, dn)
    return is_constant_shape([*[operand.shape[d] for d in dn.scatter_dims_to_operand_dims],
                              *sizes])


def _in_bounds_scatter(primitive, operand, indices, updates, *, dimension_numbers, mode,
                       indices_are_sorted, unique_indices, update_jaxpr, update_consts,
                       **params):
    """`primitive` (a scatter of mode drop) writing only in bounds (module docstring)."""
    del mode
    dn = dimension_numbers
    highs = [operand.shape[d] - w for d, w in zip(dn.scatter_dims_to_operand_dims,
                                                   _window_sizes(operand.shape, updates.shape,
                                                                 dn))]
    if min(highs, default=0) < 0:
        return operand  # no window fits: every update is dropped
    columns = [lax.slice_in_dim(indices, c, c + 1, axis=indices.ndim - 1)
               for c in range(indices.shape[-1])]
    inside = _all_fit(columns, highs, indices.shape)
    clipped = lax.concatenate([clip_index(c, high) for c, high in zip(columns, highs)],
                              indices.ndim - 1) if columns else indices
    scatter_dims = [u for u in range(updates.ndim) if u not in dn.update_window_dims]
    inside_updates = lax.broadcast_in_dim(lax.reshape(inside, indices.shape[:-1]),
                                          updates.shape, tuple(scatter_dims))
    kwargs = dict(dimension_numbers=dn, indices_are_sorted=indices_are_sorted,
                  update_jaxpr=update_jaxpr, update_consts=update_consts,
                  mode=Mode.PROMISE_IN_BOUNDS, **params)
    windows = int(np.prod(indices.shape[:-1]))
    if primitive.name in _ARITHMETIC or (update_jaxpr is None and windows == 1):
        keep = (_identity(primitive.name, updates.dtype, updates.shape)
                if primitive.name in _ARITHMETIC else windows_at(operand, clipped, updates, dn))
        return primitive.bind(operand, clipped, lax.select(inside_updates, updates, keep),
                              unique_indices=unique_indices and windows == 1, **kwargs)
    return _through_padding(primitive, operand, clipped, inside, updates, highs, kwargs)


def _fits(column, high):
    """`0 <= column <= high`, compared in the column's own dtype (no wrap; a
    symbolic `high` in int32)."""
    if not is_constant_shape((high,)):
        return lax.bitwise_and(lax.ge(column, lax.full_like(column, 0)), lax.le(
            lax.convert_element_type(column, np.int32), lax.convert_element_type(high, np.int32)))
    dtype = np.dtype(column.dtype)
    if high > np.iinfo(dtype).max:
        return lax.ge(column, lax.full_like(column, 0))
    return lax.bitwise_and(lax.ge(column, lax.full_like(column, 0)),
                           lax.le(column, lax.full_like(column, high)))


def clip_index(column, high):
    """`clip(column, 0, high)` as int32, clipped in the column's own dtype (a
    symbolic `high`, from symbolic dims, in int32)."""
    if not is_constant_shape((high,)):
        column = lax.convert_element_type(column, np.int32)
        return lax.clamp(np.int32(0), column, lax.convert_element_type(high, np.int32))
    high = min(high, np.iinfo(np.dtype(column.dtype)).max)
    clipped = lax.clamp(lax.full_like(column, 0), column, lax.full_like(column, high))
    return lax.convert_element_type(clipped, np.int32)


def _identity(name, dtype, shape):
    """The value `e` with `x op e == x` for every x (bit for bit, -0.0 and NaN too)."""
    dtype = np.dtype(dtype)
    if name in ("scatter-min", "scatter-max"):
        high = name == "scatter-min"
        if dtype == np.bool_:
            value = high
        elif dtype.kind == "f":
            value = np.inf if high else -np.inf
        else:
            value = np.iinfo(dtype).max if high else np.iinfo(dtype).min
    elif name == "scatter-mul":
        value = 1
    elif name == "scatter-add" and dtype.kind in "fc":
        value = -0.0  # x + 0.0 turns -0.0 into 0.0
    else:
        value = 0  # add of integers or bools, and sub (x - 0.0 keeps -0.0)
    return lax.full(shape, np.array(value).astype(dtype))


def windows_at(operand, clipped, updates, dn):
    """The operand's windows at `clipped`, shaped as `updates` (the scatter's dual gather)."""
    gather_dims = lax.GatherDimensionNumbers(offset_dims=dn.update_window_dims,
                                             collapsed_slice_dims=dn.inserted_window_dims,
                                             start_index_map=dn.scatter_dims_to_operand_dims)
    return lax.gather(operand, clipped, gather_dims,
                      _window_shape(operand.shape, updates.shape, dn), mode=Mode.PROMISE_IN_BOUNDS)


def _through_padding(primitive, operand, clipped, inside, updates, highs, kwargs):
    """The scatter on `operand` padded past each indexed dim by a window, the windows
    out of bounds sent there, then the padding sliced off."""
    dn = kwargs["dimension_numbers"]
    pad = {d: operand.shape[d] - high for d, high in zip(dn.scatter_dims_to_operand_dims, highs)}
    padded = lax.pad(operand, lax.full((), 0, operand.dtype),
                     [(0, pad.get(d, 0), 0) for d in range(operand.ndim)])
    trash = np.array([operand.shape[d] for d in dn.scatter_dims_to_operand_dims], np.int32)
    sent = lax.select(lax.broadcast_in_dim(inside, clipped.shape, tuple(range(clipped.ndim))),
                      clipped, lax.broadcast_in_dim(trash, clipped.shape, (clipped.ndim - 1,)))
    kwargs = dict(kwargs, indices_are_sorted=False)
    written = primitive.bind(padded, sent, updates, unique_indices=False, **kwargs)
    return lax.slice(written, (0,) * operand.ndim, operand.shape)


_RULE = into_control_flow(_rule)
