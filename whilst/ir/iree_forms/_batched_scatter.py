"""Scatters with batching dimensions, as scatters that index the batch explicitly.

`jax.vmap` of a write at a per-lane position (`x.at[k].set(v)`, or a
`dynamic_update_slice` with a batched start, such as a checkpoint slot store
of `reverse/_checkpointed.py` under `jax.vmap(jax.grad(...))`) is a scatter whose operand
and indices share a batch dimension (`operand_batching_dims`). iree-compile 3.13
rejects it ("'iree_linalg_ext.scatter' op expected indices to be equal to batch
rank or batch rank + 1"; `iree_limits/batched_scatter.mlir`).
`explicit_batch_indices` rewrites each such scatter into the same scatter with
the batch position as one more index column, which IREE compiles::

    for b in range(B): x[b, k[b]] = v[b]   # operand_batching_dims=(0,), indices k[:, None]
      == x[arange(B), k] = v                # indices stack([k, arange(B)], -1), read
                                            # into operand dims (1, 0); no batching dims

The extra columns always lie in bounds, so every mode (clip, fill or drop,
promise in bounds) treats the windows as before. Scatters in the bodies of jax's
cond, scan and while are rewritten too (`_rewrite.into_control_flow`).

IREE 3.13 rejects, with the same error, a scatter without batching dimensions whose
index column addresses a dimension its window spans, as the gradient of a vmapped
`dynamic_slice(ys, (k, 0), (1, n))` does (diffrax's dense output read at several
times; `iree_limits/indexed_window_scatter.mlir`): windows of size 1 and windows
spanning their whole dimension (whose start is clamped, or promised, to 0) are
written in the same explicit form::

    for b in range(B): x[k[b]:k[b] + 1, j[b]:j[b] + n] += v[b]   # x: (m, n), v: (B, 1, n)
      == x[k] += v[:, 0]                                          # j clamped to 0
"""
from __future__ import annotations

from jax import lax
from jax.extend.core import ClosedJaxpr

from whilst._jax_compat import is_constant_shape
from whilst.ir._rewrite import into_control_flow, rewrite_equations


def explicit_batch_indices(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` with its scatters that have batching dimensions in the explicit
    form of the module docstring; the same jaxpr object when it has none."""
    return rewrite_equations(jaxpr, _RULE, "explicit_batch_indices")


def _rule(eqn):
    dn = eqn.params.get("dimension_numbers")
    if (isinstance(dn, lax.ScatterDimensionNumbers)
            and all(is_constant_shape(v.aval.shape) for v in eqn.invars)
            and (dn.operand_batching_dims or _indexed_windows(eqn))):
        return lambda *operands, **params: _explicit(eqn.primitive, *operands, **params)
    return None


def _indexed_windows(eqn) -> bool:
    """Whether scatter `eqn` has an index column `_explicit` inserts or drops."""
    operand, _, updates = eqn.invars[:3]
    dn = eqn.params["dimension_numbers"]
    _, window_size = _windows(operand.aval.ndim, updates.aval.shape, dn)
    fill = _fills(eqn.params["mode"])
    return any(_column_form(d, window_size, operand.aval.shape, fill)
               for d in dn.scatter_dims_to_operand_dims)


def _windows(operand_rank, updates_shape, dn):
    """`(update_dim, window_size)`: for each window dimension of the operand of a
    scatter `dn`, the updates' dimension that spans it and its size."""
    windows = [d for d in range(operand_rank)
               if d not in {*dn.inserted_window_dims, *dn.operand_batching_dims}]
    update_dim = dict(zip(windows, dn.update_window_dims))
    return update_dim, {d: updates_shape[u] for d, u in update_dim.items()}


def _fills(mode) -> bool:
    return lax.GatherScatterMode.from_any(mode) == lax.GatherScatterMode.FILL_OR_DROP


def _column_form(d, window_size, operand_shape, fill):
    """How `_explicit` writes an index column into operand dimension `d`: "inserted"
    where the window is 1 wide there, "dropped" where it spans the whole dimension
    (its start clamped, or promised, to 0; not under mode=fill, where another start
    drops the update), else None (kept as it is)."""
    if window_size.get(d) == 1:
        return "inserted"
    if window_size.get(d) == operand_shape[d] and not fill:
        return "dropped"
    return None


def _explicit(primitive, operand, indices, updates, *, dimension_numbers, indices_are_sorted,
              mode, **params):
    """`primitive` (a scatter) with each batching dimension pair as an index column
    (the indices' position along that dimension, into the operand's), in the form
    IREE 3.13 compiles: every indexed operand dimension inserted, none a window.
    An indexed window of size 1 becomes an inserted dimension; a window spanning
    its whole dimension loses its index column (the start is clamped, or promised,
    to 0; not under mode=fill, where another start drops the update)."""
    del indices_are_sorted  # sorted within each batch, not over the added columns
    dn = dimension_numbers
    column_shape = (*indices.shape[:-1], 1)  # jax scatters: the index vector is last
    columns = [(lax.slice_in_dim(indices, c, c + 1, axis=indices.ndim - 1), d)
               for c, d in enumerate(dn.scatter_dims_to_operand_dims)]
    columns += [(lax.broadcasted_iota(indices.dtype, column_shape, i), d)
                for i, d in zip(dn.scatter_indices_batching_dims, dn.operand_batching_dims)]
    inserted = {*dn.inserted_window_dims, *dn.operand_batching_dims}
    update_dim, window_size = _windows(operand.ndim, updates.shape, dn)
    fill = _fills(mode)
    squeezed, kept = set(), []
    for column, d in columns:
        form = _column_form(d, window_size, operand.shape, fill)
        if form == "dropped":
            continue
        if form == "inserted":
            inserted.add(d)
            squeezed.add(update_dim[d])
        kept.append((column, d))
    explicit = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(u - sum(s < u for s in squeezed)
                                 for u in dn.update_window_dims if u not in squeezed),
        inserted_window_dims=tuple(sorted(inserted)),
        scatter_dims_to_operand_dims=tuple(d for _, d in kept))
    return primitive.bind(operand, lax.concatenate([c for c, _ in kept], indices.ndim - 1),
                          lax.squeeze(updates, tuple(sorted(squeezed))),
                          dimension_numbers=explicit, indices_are_sorted=False, mode=mode,
                          **params)


_RULE = into_control_flow(_rule)
