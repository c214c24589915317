"""Initial values of the carries whilst's own loops create.

IREE 3.13 gives two carries of one `stablehlo.while` a single buffer when they
start from equal values (see whilst.lowering._iree). So residual stacks start
`uninitialized` and are each of a distinct type, checkpoint slots start from a
fill that is distinct per buffer, and carries that must start at zero are
stacked by shape (`ZeroStarted`).
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

UNINITIALIZED_ATTR = "whilst.uninitialized"

uninitialized_p = Primitive("uninitialized")
uninitialized_p.def_impl(lambda **params: apply_primitive(uninitialized_p, **params))
uninitialized_p.def_abstract_eval(lambda *, shape, dtype: ShapedArray(shape, dtype))
ad.primitive_jvps[uninitialized_p] = lambda primals, tangents, **params: (
    uninitialized_p.bind(**params),
    Zero(ShapedArray(params["shape"], params["dtype"]).to_tangent_aval()))


try:  # built by setup.py where a C compiler is found
    from whilst._uninitialized_cpu import handler as _unwritten_cpu_handler
except ImportError:
    _unwritten_cpu_handler = None
UNWRITTEN_CPU_TARGET = "whilst_unwritten"
if _unwritten_cpu_handler is not None:
    jax.ffi.register_ffi_target(UNWRITTEN_CPU_TARGET, _unwritten_cpu_handler, platform="cpu")


def uninitialized_value(ctx, aval):
    """Lowering of an array of `aval` whose contents are never read before they are
    written (residual stacks, see `uninitialized`): under `jax.jit` on CPU, left
    unwritten (`_unwritten_cpu`); otherwise zeros, tagged so that the IREE
    preparation makes them `tensor.empty`."""
    if (_unwritten_cpu_handler is not None and ctx.module_context.platforms == ("cpu",)
            and not ctx.module_context.lowering_parameters.for_export):
        return _unwritten_cpu(ctx, aval)
    out = broadcast_in_dim(ctx, mlir.ir_constant(np.zeros((), aval.dtype)), aval,
                           broadcast_dimensions=[])
    out.owner.attributes[UNINITIALIZED_ATTR] = ir.UnitAttr.get()
    return out


def _unwritten_cpu(ctx, aval):
    """A custom call of `whilst._uninitialized_cpu`'s handler, which writes nothing
    into the buffer XLA gives its result (XLA:CPU has no op for that)."""
    (out,) = jax.ffi.ffi_lowering(UNWRITTEN_CPU_TARGET)(ctx.replace(avals_in=[],
                                                                   avals_out=[aval]))
    return out


def _uninitialized_lowering(ctx, *, shape, dtype):
    (aval,) = ctx.avals_out
    return [uninitialized_value(ctx, aval)]


mlir.register_lowering(uninitialized_p, _uninitialized_lowering)


def uninitialized(shape, dtype):
    """An array whose contents are never read before they are written.

    Lowered by `uninitialized_value`: under `jax.jit` on CPU it is left unwritten,
    and exports give IREE a `tensor.empty`, so a residual stack costs no fill,
    whatever `maximum_iterations` is. Two of one type feeding one loop would
    become one buffer on IREE, so callers give each a type of its own.
    """
    return uninitialized_p.bind(shape=tuple(shape), dtype=np.dtype(dtype))


def distinct_fill(shape, dtype, j):
    """`full(shape, 7 + j % 100)`: a fill distinct for each `j < 100` (booleans
    have only two values)."""
    fill = j % 2 == 1 if np.dtype(dtype) == np.bool_ else 7 + j % 100
    return lax.full(shape, fill, dtype)


class ZeroStarted:
    """Carries that start at zero, with those of one shape and dtype stacked into one
    `[m, *shape]` carry.

    Stacking makes every zero-started carry of a loop (a gradient While's
    accumulators and unused cotangents) a distinct type, so IREE cannot give two
    of them one buffer.
    """

    def __init__(self, avals):
        keys = list(dict.fromkeys((tuple(a.shape), np.dtype(a.dtype)) for a in avals))
        members = [[j for j, a in enumerate(avals) if (tuple(a.shape), np.dtype(a.dtype)) == key]
                   for key in keys]
        self.slots = [None] * len(avals)
        self.avals = []
        for group, (key, js) in enumerate(zip(keys, members)):
            shape, dtype = key
            for row, j in enumerate(js):
                self.slots[j] = (group, row if len(js) > 1 else None)
            self.avals.append(ShapedArray(((len(js),) if len(js) > 1 else ()) + shape,
                                               dtype))

    def initial(self):
        return [lax.full(a.shape, 0, a.dtype) for a in self.avals]

    def unpack(self, carries):
        return [carries[g] if row is None else carries[g][row] for g, row in self.slots]

    def update(self, carries, values):
        carries = list(carries)
        for (g, row), v in zip(self.slots, values):
            v = v.astype(self.avals[g].dtype)
            carries[g] = v if row is None else lax.dynamic_update_index_in_dim(
                carries[g], v, row, 0)
        return carries
