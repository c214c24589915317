"""Scatters with batching dimensions (vmapped writes at per-lane positions) in the
explicit-index form IREE 3.13 compiles (whilst.ir._batched_scatter): the same
results as JAX's own batched scatter, bit for bit, for every position in and out
of bounds."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from whilst.ir._batched_scatter import explicit_batch_indices
from whilst.ir._tracing import call

B = 3
TABLE = np.arange(B * 5 * 4, dtype=np.float32).reshape(B, 5, 4) - 7.5
ROW = -np.arange(B * 4, dtype=np.float32).reshape(B, 4)

PROGRAMS = {  # name -> the function vmapped over (table, position, row)
    "update_index": lambda t, j, r: lax.dynamic_update_index_in_dim(t, r, j, 0),
    "update_block": lambda t, j, r: lax.dynamic_update_slice(t, r[None, :2], (j, j)),
    "set": lambda t, j, r: t.at[j].set(r),
    "add_clip": lambda t, j, r: t.at[j].add(r, mode="clip"),
    "set_fill": lambda t, j, r: t.at[j].set(r, mode="drop"),
    "max_element": lambda t, j, r: t.at[j, 1].max(r[0]),
    "full_window_drop": lambda t, j, r: lax.scatter(  # start j != 0 of the whole row drops it
        t, jnp.stack([j, j]), r[None], lax.ScatterDimensionNumbers((0, 1), (), (0, 1)),
        mode="drop"),
    "nested_vmap": lambda t, j, r: jax.vmap(lambda c, v: c.at[j].set(v), (1, 0), 1)(t, r),
}


def _batching_dims(jaxpr):
    found = []
    for eqn in jaxpr.eqns:
        dn = eqn.params.get("dimension_numbers")
        if isinstance(dn, lax.ScatterDimensionNumbers):
            found.append(dn.operand_batching_dims)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _batching_dims(sub)
    return found


@pytest.mark.parametrize("name", PROGRAMS)
def test_explicit_form_equals_the_batched_scatter(name):
    fn = jax.vmap(PROGRAMS[name])
    jaxpr = jax.make_jaxpr(fn)(TABLE, np.zeros(B, np.int32), ROW)
    rewritten = explicit_batch_indices(jaxpr)
    assert any(_batching_dims(jaxpr.jaxpr)) and not any(_batching_dims(rewritten.jaxpr))
    batched = jax.jit(lambda *a: call(jaxpr, *a))
    explicit = jax.jit(lambda *a: call(rewritten, *a))
    for first in range(-7, 8):
        js = np.array([first, 2 - first, first // 2], np.int32)
        want, got = batched(TABLE, js, ROW)[0], explicit(TABLE, js, ROW)[0]
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (name, js)


def test_unbatched_scatters_are_left_alone():
    jaxpr = jax.make_jaxpr(lambda t, j, r: t.at[j].set(r))(TABLE[0], np.int32(0), ROW[0])
    assert explicit_batch_indices(jaxpr) is jaxpr
