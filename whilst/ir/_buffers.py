"""Initial values of the carries whilst's own loops create.

IREE 3.13 gives two carries of one `stablehlo.while` a single buffer when they
start from equal values (see whilst.lowering._iree). So carries of one type are
stacked into one (`StackedByType`: residual stacks, zero-started accumulators),
residual stacks start `uninitialized` (each loop has at most one per type), and
checkpoint slots start from a fill that is distinct per buffer.
"""
from __future__ import annotations

import numpy as np
from jax import lax
from jax._src import core, dispatch
from jax._src.ad_util import Zero
from jax._src.interpreters import ad

uninitialized_p = core.Primitive("uninitialized")
uninitialized_p.def_impl(lambda **params: dispatch.apply_primitive(uninitialized_p, **params))
uninitialized_p.def_abstract_eval(lambda *, shape, dtype: core.ShapedArray(shape, dtype))
ad.primitive_jvps[uninitialized_p] = lambda primals, tangents, **params: (
    uninitialized_p.bind(**params),
    Zero(core.ShapedArray(params["shape"], params["dtype"]).to_tangent_aval()))


def uninitialized(shape, dtype):
    """An array whose contents are never read before they are written.

    Lowered as zeros tagged `whilst.uninitialized`, which the IREE preparation
    turns into `tensor.empty`: a residual stack then costs no fill, whatever
    `maximum_iterations` is.
    """
    return uninitialized_p.bind(shape=tuple(shape), dtype=np.dtype(dtype))


def distinct_fill(shape, dtype, j):
    """`full(shape, 7 + j % 100)`: a fill distinct for each `j < 100` (booleans have
    only two values, which is why residual stacks store booleans as int8)."""
    fill = j % 2 == 1 if np.dtype(dtype) == np.bool_ else 7 + j % 100
    return lax.full(shape, fill, dtype)


class StackedByType:
    """Arrays of one shape and stored dtype stacked into one `[m, *shape]` array
    (an array alone in its group is kept as it is); `stored` maps each dtype to
    the dtype kept (booleans as int8 for residual stacks).

    Used for every group of carries of whilst's own loops that would otherwise
    start from equal values (zero-started accumulators and cotangents, residual
    stacks): one carry per type, so IREE cannot give two of them one buffer.
    """

    def __init__(self, avals, stored=np.dtype):
        self.dtypes = [np.dtype(a.dtype) for a in avals]
        keys = list(dict.fromkeys((tuple(a.shape), stored(a.dtype)) for a in avals))
        members = [[j for j, a in enumerate(avals) if (tuple(a.shape), stored(a.dtype)) == key]
                   for key in keys]
        self.slots = [None] * len(avals)
        self.avals = []
        for group, ((shape, dtype), js) in enumerate(zip(keys, members)):
            for row, j in enumerate(js):
                self.slots[j] = (group, row if len(js) > 1 else None)
            self.avals.append(core.ShapedArray(((len(js),) if len(js) > 1 else ()) + shape,
                                               dtype))

    def zeros(self):
        return [lax.full(a.shape, 0, a.dtype) for a in self.avals]

    def pack(self, values):
        """The stacked arrays holding `values`."""
        groups = [[] for _ in self.avals]
        for (g, _), v in zip(self.slots, values):
            groups[g].append(v.astype(self.avals[g].dtype))
        return [vs[0] if len(vs) == 1 else lax.concatenate(
            [lax.expand_dims(v, (0,)) for v in vs], 0) for vs in groups]

    def unpack(self, stacked):
        return [(stacked[g] if row is None else stacked[g][row]).astype(dtype)
                for (g, row), dtype in zip(self.slots, self.dtypes)]

    def update(self, stacked, values):
        stacked = list(stacked)
        for (g, row), v in zip(self.slots, values):
            v = v.astype(self.avals[g].dtype)
            stacked[g] = v if row is None else lax.dynamic_update_index_in_dim(
                stacked[g], v, row, 0)
        return stacked
