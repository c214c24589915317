"""Indexing over symbolic dims in the forms IREE 3.13 compiles (whilst/ir/iree_forms/_symbolic_indexing.py):
each op, exported with a symbolic dim `b` by `whilst.export` (which rewrites it), gives
JAX's own result on XLA and on IREE at several sizes, clamped starts included."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.lowering import prepare

(B,) = jax.export.symbolic_shape("b")
SIZES = (1, 3, 8)
REJECTED = ("stablehlo.dynamic_update_slice", "stablehlo.dynamic_reshape",
            "stablehlo.dynamic_gather", "stablehlo.real_dynamic_slice")


def table(b):
    return np.arange(5 * b * 2, dtype=np.float32).reshape(5, b, 2) - 7.5


PROGRAMS = {  # name -> (fn(x: f32[5, b, 2], i: i32[]), also the IREE part)
    "dynamic_slice_row": lambda x, i: lax.dynamic_slice_in_dim(x, i, 1, 0),
    "dynamic_slice_two_rows": lambda x, i: lax.dynamic_slice(x, (i, 0, 1), (2, x.shape[1], 1)),
    "index_row": lambda x, i: x[i],
    "index_row_then_column": lambda x, i: x[i][:, 1],
    "index_rows": lambda x, i: x[jnp.stack([i, i + 1, 0])],            # batch dims first
    "index_columns": lambda x, i: x[:, :, jnp.stack([i % 2, 1 - i % 2])],  # batch dims last
    "squeeze": lambda x, i: lax.squeeze(lax.dynamic_slice_in_dim(x, i, 1, 0), (0,)),
    "reshape_unit_dims": lambda x, i: jnp.reshape(x[i], (1, x.shape[1], 1, 2)),
    "update_row": lambda x, i: lax.dynamic_update_index_in_dim(x, x[0] * 2.0, i, 0),
    "update_two_rows": lambda x, i: lax.dynamic_update_slice(x, x[:2] + 1.0, (i, 0, 0)),
    "set_row": lambda x, i: x.at[i].set(x[1] - 3.0),
}


@pytest.fixture(scope="module")
def exported():
    specs = (jax.ShapeDtypeStruct((5, B, 2), np.float32), jax.ShapeDtypeStruct((), np.int32))
    return {name: whilst.export(fn, *specs, name=name) for name, fn in PROGRAMS.items()}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewritten_ops_equal_jax_on_xla(exported, name):
    text = exported[name].text
    assert not any(op in text for op in REJECTED), text
    for b in SIZES:
        for i in (-3, 0, 2, 4, 9):  # starts outside the array clamp as in JAX
            want = PROGRAMS[name](jnp.asarray(table(b)), jnp.int32(i))
            got = exported[name].exported.call(table(b), np.int32(i))
            np.testing.assert_array_equal(got, want)


@pytest.mark.iree
def test_rewritten_ops_run_on_iree(exported):
    module = whilst.compile(list(exported.values())).load()
    for name, fn in PROGRAMS.items():
        for b in SIZES:
            for i in (-3, 2, 9):
                np.testing.assert_array_equal(getattr(module, name)(table(b), np.int32(i)),
                                              fn(jnp.asarray(table(b)), jnp.int32(i)),
                                              err_msg=name)


def test_static_shapes_are_exported_unchanged():
    def fn(x, i):
        return lax.dynamic_slice_in_dim(x, i, 1, 0)
    text = whilst.export(fn, np.zeros((5, 3, 2), np.float32), np.int32(0)).text
    assert "stablehlo.dynamic_slice" in text and "stablehlo.gather" not in text
    assert "stablehlo.dynamic_slice" in prepare([whilst.export(
        fn, np.zeros((5, 3, 2), np.float32), np.int32(0))])
