"""Initial values of the carries whilst's own loops create.

IREE 3.13 gives two carries of one `stablehlo.while` a single buffer when they
start from equal values (see whilst.lowering._iree). So residual stacks start
`uninitialized` and are each of a distinct type, checkpoint slots start from a
fill that is distinct per buffer (`distinct_fill`; a budget loop's are left
unwritten under `jax.jit` on CPU, with its stacks), and carries that must start
at zero are stacked by shape (`ZeroStarted`).
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.extend.mlir import ir
from jax.interpreters import ad, mlir
from jax.interpreters.ad import Zero

from whilst._jax_compat import apply_primitive, broadcast_in_dim
from whilst.ir._vma import varying, vary, with_varying

UNINITIALIZED_ATTR = "whilst.uninitialized"

try:  # built by setup.py where a C compiler is found
    from whilst._uninitialized_cpu import handler as _unwritten_cpu_handler
except ImportError:
    _unwritten_cpu_handler = None
UNWRITTEN_CPU_TARGET = "whilst_unwritten"
if _unwritten_cpu_handler is not None:
    jax.ffi.register_ffi_target(UNWRITTEN_CPU_TARGET, _unwritten_cpu_handler, platform="cpu")

uninitialized_p = Primitive("uninitialized")
uninitialized_p.multiple_results = True


def uninitialized(avals, export_fills=None) -> list:
    """Arrays of `avals` whose contents are never read before they are written.

    Under `jax.jit` on CPU they are left unwritten, all by one op (one first
    thunk for XLA:CPU's executor, see `uninitialized_values`). Exported, array j
    is a `tensor.empty` for IREE if `export_fills[j]` is None (the default),
    else `distinct_fill(..., export_fills[j])`: a residual stack then costs no
    fill, whatever `maximum_iterations` is. Two `tensor.empty`s of one type
    feeding one loop would become one buffer on IREE, so callers give each a
    type of its own, or a distinct fill. Inside `jax.shard_map` each array varies
    over the manual axes its aval does (`_vma`).
    """
    fills = tuple(export_fills) if export_fills is not None else (None,) * len(avals)
    out = uninitialized_p.bind(
        avals=tuple(ShapedArray(tuple(a.shape), np.dtype(a.dtype)) for a in avals),
        export_fills=fills)
    return [vary(x, varying(a)) for x, a in zip(out, avals)]


def uninitialized_values(ctx, avals, export_fills=None) -> list:
    """Lowering of `uninitialized(avals, export_fills)`: under `jax.jit` on CPU,
    one custom call that leaves every buffer unwritten (`_unwritten_cpu`);
    otherwise fills, the `None`s zeros tagged so that the IREE preparation makes
    them `tensor.empty`."""
    if not avals:
        return []
    if (_unwritten_cpu_handler is not None and ctx.module_context.platforms == ("cpu",)
            and not ctx.module_context.lowering_parameters.for_export):
        return _unwritten_cpu(ctx, avals)
    outs = []
    for aval, fill in zip(avals, export_fills or [None] * len(avals)):
        value = np.zeros((), aval.dtype) if fill is None else _distinct_value(aval.dtype, fill)
        out = broadcast_in_dim(ctx, mlir.ir_constant(value), aval, broadcast_dimensions=[])
        if fill is None:
            out.owner.attributes[UNINITIALIZED_ATTR] = ir.UnitAttr.get()
        outs.append(out)
    return outs


def _unwritten_cpu(ctx, avals) -> list:
    """A custom call of `whilst._uninitialized_cpu`'s handler, which writes nothing
    into the buffers XLA gives its results (XLA:CPU has no op for that). In a
    program for one device it is marked as having a side effect, so that XLA neither
    hoists it out of a loop body (it has no operands; the body, writing the hoisted
    buffers in place, then copied them whole every iteration) nor merges two of them
    into one buffer. XLA's partitioner cannot replicate an op with a side effect, so
    a program for several devices keeps the copies."""
    one_device = getattr(ctx.module_context.axis_context, "num_devices", None) == 1
    return jax.ffi.ffi_lowering(UNWRITTEN_CPU_TARGET, has_side_effect=one_device)(
        ctx.replace(avals_in=[], avals_out=list(avals)))



def _distinct_value(dtype, j):
    """`7 + j % 100` as `dtype` (`j % 2 == 1` for booleans, which have two values)."""
    dtype = np.dtype(dtype)
    return np.array(j % 2 == 1 if dtype == np.bool_ else 7 + j % 100, dtype)


def distinct_fill(shape, dtype, j):
    """`full(shape, 7 + j % 100)`: a fill distinct for each `j < 100` (booleans
    have only two values)."""
    return lax.full(shape, _distinct_value(dtype, j), dtype)


class ZeroStarted:
    """Carries that start at zero, with those of one shape and dtype stacked into one
    `[m, *shape]` carry.

    Stacking makes every zero-started carry of a loop (a gradient While's
    accumulators and unused cotangents) a distinct type, so IREE cannot give two
    of them one buffer.
    """

    def __init__(self, avals):
        def key(a):
            return tuple(a.shape), np.dtype(a.dtype), varying(a)
        keys = list(dict.fromkeys(map(key, avals)))
        members = [[j for j, a in enumerate(avals) if key(a) == k] for k in keys]
        self.slots = [None] * len(avals)
        self.avals = []
        for group, ((shape, dtype, axes), js) in enumerate(zip(keys, members)):
            for row, j in enumerate(js):
                self.slots[j] = (group, row if len(js) > 1 else None)
            self.avals.append(with_varying(ShapedArray(
                ((len(js),) if len(js) > 1 else ()) + shape, dtype), axes))

    def initial(self):
        return [vary(lax.full(a.shape, 0, a.dtype), varying(a)) for a in self.avals]

    def unpack(self, carries):
        return [carries[g] if row is None else carries[g][row] for g, row in self.slots]

    def update(self, carries, values):
        carries = list(carries)
        for (g, row), v in zip(self.slots, values):
            v = v.astype(self.avals[g].dtype)
            carries[g] = v if row is None else lax.dynamic_update_index_in_dim(
                carries[g], v, row, 0)
        return carries


uninitialized_p.def_impl(lambda **params: apply_primitive(uninitialized_p, **params))
uninitialized_p.def_abstract_eval(lambda *, avals, export_fills: list(avals))
ad.primitive_jvps[uninitialized_p] = lambda primals, tangents, **params: (
    uninitialized_p.bind(**params), [Zero(a.to_tangent_aval()) for a in params["avals"]])
mlir.register_lowering(uninitialized_p, lambda ctx, *, avals, export_fills:
                       uninitialized_values(ctx, avals, export_fills))
