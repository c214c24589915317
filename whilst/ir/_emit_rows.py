"""Residual rows in and out of stacks, k rows per emitted loop iteration."""
from __future__ import annotations

from functools import partial

from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from whilst._jax_compat import dynamic_slice, dynamic_update_slice, reshape, slice_op
from whilst.ir._emit_ops import broadcast_scalar, const
from whilst.ir._tracing import COUNTER_AVAL
from whilst.ir.iree_forms._device_indexing import scatter_rows
from whilst.ir.iree_forms._symbolic_indexing import has_symbolic_rows, read_row, write_row


def _row_start(row, ndim):
    zero = const(0)
    return [row, *[zero] * (ndim - 1)]


def read_rows(ctx, stack, stack_aval, start, k):
    """`[stack[start + s] for s in range(k)]`: static slices of one k-row
    `dynamic_slice`, or one gather per row for rows of symbolic shape."""
    row_aval = stack_aval.update(shape=stack_aval.shape[1:])
    if has_symbolic_rows(stack_aval.shape):
        read = mlir.lower_fun(read_row, multiple_results=False)
        rows_ctx = ctx.replace(avals_in=[stack_aval, COUNTER_AVAL], avals_out=[row_aval])
        return [read(rows_ctx, stack, hlo.add(start, const(s)))[0]
                for s in range(k)]
    chunk_aval = stack_aval.update(shape=(k, *stack_aval.shape[1:]))
    chunk = dynamic_slice(ctx, chunk_aval, stack,
                          start_indices=_row_start(start, stack_aval.ndim))
    one_aval = stack_aval.update(shape=(1, *stack_aval.shape[1:]))
    zeros = [0] * (stack_aval.ndim - 1)
    return [reshape(ctx, slice_op(ctx, chunk, one_aval, start_indices=[s, *zeros],
                                  limit_indices=[s + 1, *stack_aval.shape[1:]],
                                  strides=[1] * stack_aval.ndim), row_aval)
            for s in range(k)]


def write_rows(ctx, stack, stack_aval, rows, at, guard=None, scatter=False):
    """`stack[at:at + len(rows)] = rows`: one `dynamic_update_slice`, or one scatter
    per row for rows of symbolic shape; with `guard`, the rows there are kept where
    `guard` is false (one select of the whole chunk). With `scatter` (and rows of
    static shape, in bounds), one scatter of single rows
    (`_device_indexing.scatter_rows`): IREE 3.13 runs it as a dispatch that reads
    `at` on the device, where it turns a `dynamic_update_slice` (or a scatter of
    one window) into a copy at an offset read back to the host, one readback per
    emitted iteration (the unroll tests count them)."""
    row_aval = stack_aval.update(shape=stack_aval.shape[1:])
    if has_symbolic_rows(stack_aval.shape):
        if guard is not None:
            old = read_rows(ctx, stack, stack_aval, at, len(rows))
            rows = [hlo.select(broadcast_scalar(guard, r.type), r, o) for r, o in zip(rows, old)]
        write = mlir.lower_fun(write_row, multiple_results=False)
        rows_ctx = ctx.replace(avals_in=[stack_aval, COUNTER_AVAL, row_aval],
                               avals_out=[stack_aval])
        for s, r in enumerate(rows):
            (stack,) = write(rows_ctx, stack, hlo.add(at, const(s)), r)
        return stack
    one_aval = stack_aval.update(shape=(1, *stack_aval.shape[1:]))
    chunk_aval = stack_aval.update(shape=(len(rows), *stack_aval.shape[1:]))
    rows = [reshape(ctx, r, one_aval) for r in rows]
    chunk = rows[0] if len(rows) == 1 else hlo.concatenate(rows, 0)
    if guard is not None:
        old = dynamic_slice(ctx, chunk_aval, stack,
                            start_indices=_row_start(at, stack_aval.ndim))
        chunk = hlo.select(broadcast_scalar(guard, chunk.type), chunk, old)
    if scatter:
        rows_ctx = ctx.replace(avals_in=[stack_aval, chunk_aval, COUNTER_AVAL],
                               avals_out=[stack_aval])
        return mlir.lower_fun(partial(scatter_rows, clip=False), multiple_results=False)(
            rows_ctx, stack, chunk, at)[0]
    return dynamic_update_slice(ctx, stack_aval, stack, chunk,
                                start_indices=_row_start(at, stack_aval.ndim))
