"""Loop-carried booleans as int32 in exports for Vulkan.

With loop-carried i1 tensors the SPIR-V code of IREE 3.13 reads wrong values (loops
stopped after 0-2 steps whatever their data; the LSTM sample's boolean residuals came
back wrong), and int8 storage fails too (`iree_limits/carried_booleans.py`). Exports
for Vulkan therefore carry the booleans of their loops (the loop test, boolean
carries, residual stacks of booleans) as int32 0 or 1; other exports keep i1, the
form all other targets were tested with. Stacks of booleans take 4 bytes per element
in Vulkan exports; `gradient_memory` counts 1.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

VULKAN_BOOLEANS = np.int32
_carried_booleans = contextvars.ContextVar("whilst_carried_booleans", default=np.bool_)


@contextlib.contextmanager
def booleans_carried_as(dtype):
    """Within the block, exported loops carry their booleans as `dtype`."""
    token = _carried_booleans.set(dtype)
    try:
        yield
    finally:
        _carried_booleans.reset(token)


def boolean_storage(ctx):
    """The dtype the loop being lowered carries its booleans as."""
    return (_carried_booleans.get() if ctx.module_context.lowering_parameters.for_export
            else np.bool_)


def stored(aval, storage):
    """The aval a `stablehlo.while` carries for `aval`: booleans as `storage`."""
    return aval.update(dtype=storage) if aval.dtype == np.bool_ else aval


def to_storage(ctx, values, avals, storage):
    """`values` (of `avals`) as the loop carries them: booleans converted to
    `storage` (0 or 1)."""
    return [hlo.convert(mlir.aval_to_ir_type(ctx.module_context, stored(a, storage)), v)
            if a.dtype == np.bool_ and storage != np.bool_ else v
            for v, a in zip(values, avals)]


def from_storage(ctx, values, avals, storage):
    """Inverse of `to_storage`: `stored != 0` for booleans."""
    return [hlo.convert(mlir.aval_to_ir_type(ctx.module_context, a), v)
            if a.dtype == np.bool_ and storage != np.bool_ else v
            for v, a in zip(values, avals)]
