"""Row reads and writes at positions the device computes, in forms IREE 3.13
indexes on the device.

IREE 3.13 turns `dynamic_slice` and `dynamic_update_slice` into copies at an
offset the host computes: in a loop body whose positions come from the carry
(`xs[t]`, `ys.at[k].set(row)` as exported, the rows a gradient reads back from
its residuals) it reads the position back to the host every step. Gathers and
scatters of rows index on the device, in place. `device_indexing(jaxpr)`
rewrites the row forms (a window of whole rows, at a position computed from
the body's inputs)::

    dynamic_slice(x, i, 0, .., sizes=(m, *x.shape[1:]))
        == gather(x, [[j] for j in clip(i) + arange(m)])     # rows j
    dynamic_update_slice(x, u, i, 0, ..)                     # u: m rows
        == scatter(x, [[j] for j in clip(i) + arange(m)], u)

with `clip(i) = clip(i, 0, len(x) - m)`, as both ops clip their position. A read
of one element of a vector is a gather of one element, which
`whilst.lowering._iree_fusion` fences off its users. Arrays of unsigned
integers keep the slices (PRNG key data, as checkpoints keep it): iree-compile
3.13 fails on their scatters (`iree_limits/unsigned_scatter.mlir`).

Only loop bodies that run one step per iteration get these forms
(`exported_loop_forms`; unrolled bodies index small arrays by one-hot
selects): their own equations and those of their conds' branches (the
checkpointed gradient While's schedule: 13 readbacks in its body -> 5), not
those of a `lax.scan` inside, whose positions count on the host. Positions
computed from literals and constants alone keep the slices too: IREE folds
them (the CG sample's gradient took 7 more dispatches per step as scatters);
and so do those computed from them and a counted loop's counter, which IREE
keeps on the host (a chunk of `_budget.py` writing its rows: 6 dispatches per
step as scatters, 2 as slices).
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax.extend.core import ClosedJaxpr, Literal

from whilst._jax_compat import is_constant_shape
from whilst.ir.iree_forms._index_bounds import clip_index
from whilst.ir._rewrite import rewrite_equations

Mode = lax.GatherScatterMode


def device_indexing(jaxpr: ClosedJaxpr, host_inputs=()) -> ClosedJaxpr:
    """`jaxpr` with its row reads and writes at computed positions in the forms
    of the module docstring; the same object when it has none. `host_inputs`:
    the indices of inputs the host computes (the counter of a loop tested on it
    alone, a counted loop's): positions computed from them and constants keep
    their slices, which IREE runs as copies at an offset the host knows."""
    constant = _constants(jaxpr.jaxpr, [jaxpr.jaxpr.invars[j] for j in host_inputs])
    return rewrite_equations(jaxpr, lambda eqn: _rule(eqn, constant), "device_indexing")


def _constants(jaxpr, host=()) -> set[int]:
    """`id`s of the variables of `jaxpr` computed from literals, constants and the
    variables `host` alone (positions the compiler folds, or the host computes)."""
    constant = {id(v) for v in [*jaxpr.constvars, *host]}
    for eqn in jaxpr.eqns:
        if all(isinstance(v, Literal) or id(v) in constant for v in eqn.invars):
            constant.update(id(v) for v in eqn.outvars)
    return constant


def _rule(eqn, constant):
    name = eqn.primitive.name
    if name == "cond":  # its branches, each with its own constants
        branches = tuple(device_indexing(b) for b in eqn.params["branches"])
        if all(b is old for b, old in zip(branches, eqn.params["branches"])):
            return None
        return lambda *operands, **params: eqn.primitive.bind(
            *operands, **{**params, "branches": branches})
    if name == "dynamic_slice":
        operand, start = eqn.invars[0].aval, eqn.invars[1]
        window = eqn.params["slice_sizes"]
    elif name == "dynamic_update_slice":
        operand, start = eqn.invars[0].aval, eqn.invars[2]
        window = eqn.invars[1].aval.shape
    else:
        return None
    if (operand.ndim == 0 or isinstance(start, Literal) or id(start) in constant
            or np.issubdtype(operand.dtype, np.unsignedinteger)
            or not is_constant_shape(operand.shape)
            or tuple(window[1:]) != tuple(operand.shape[1:])):
        return None
    if name == "dynamic_slice":
        return lambda x, start, *_, slice_sizes: _gather_rows(x, start, slice_sizes[0])
    return lambda x, update, start, *_: scatter_rows(x, update, start)


def _rows(x, start, m, clip=True):
    """`[[j] for j in clip(start) + arange(m)]`, int32 (`start` itself where not
    `clip`)."""
    first = clip_index(start, x.shape[0] - m) if clip else start
    return lax.add(lax.broadcast_in_dim(first, (m, 1), ()),
                   lax.broadcasted_iota(np.int32, (m, 1), 0))


def _gather_rows(x, start, m):
    """`x[clip(start):clip(start) + m]`, a gather of rows (one element of a vector:
    a point gather)."""
    if x.ndim == 1 and m == 1:
        dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                          start_index_map=(0,))
        point = lax.gather(x, lax.reshape(clip_index(start, x.shape[0] - 1), (1,)), dims,
                           (1,), mode=Mode.PROMISE_IN_BOUNDS)
        return lax.reshape(point, (1,))
    dims = lax.GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim)),
                                      collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(x, _rows(x, start, m), dims, (1, *x.shape[1:]),
                      indices_are_sorted=True, mode=Mode.PROMISE_IN_BOUNDS)


def scatter_rows(x, update, start, clip=True):
    """`x` with `x[clip(start):clip(start) + len(update)] = update`, a scatter of rows.
    `clip=False` is for positions in bounds by construction (the pushes of residual
    rows): the clip costs IREE dispatches (3 per step in the CG sample's forward)."""
    dims = lax.ScatterDimensionNumbers(update_window_dims=tuple(range(1, x.ndim)),
                                      inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
    return lax.scatter(x, _rows(x, start, update.shape[0], clip), update, dims,
                       indices_are_sorted=True, unique_indices=True,
                       mode=Mode.PROMISE_IN_BOUNDS)
