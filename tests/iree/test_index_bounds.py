"""Gathers and scatters at out-of-bounds indices give JAX's (XLA's) results on IREE
(whilst/ir/iree_forms/_index_bounds.py): IREE 3.13 reads past a gather's operand and writes
past a dropping scatter's (iree_limits/scatter_out_of_bounds.mlir), also where equinox's
loop buffers hide the scatter in a primitive of their own
(whilst/ir/iree_forms/_library_primitives.py)."""
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst

X = np.arange(15, dtype=np.float32).reshape(5, 3) - 7.0
INDICES = [[1, 2], [7, -1], [4, 4], [-6, 2], [100000000, -100000000], [2, 5]]


def window_add(x, idx):
    """A scatter-add of 2 x 2 windows (partly out of bounds: the window is dropped)."""
    dims = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0, 1))
    starts = jnp.stack([idx, idx % 3], axis=1)
    return lax.scatter_add(x, starts, jnp.full((2, 2, 2), 0.5, x.dtype), dims, mode="drop")


def buffer_rows(kind):
    """Rows idx[0] and idx[1] of x set to -2 x[1], one per step of an equinox loop
    of `kind` that keeps x in a buffer (written by equinox's `maybe_set` primitive)."""
    def fn(x, idx):
        def body(carry):
            k, rows = carry
            return k + 1, rows.at[idx[k]].set(-2.0 * x[1])
        return eqxi.while_loop(lambda carry: carry[0] < 2, body, (0, x), kind=kind,
                               buffers=lambda carry: carry[1], max_steps=2)[1]
    return fn


PROGRAMS = {  # name -> fn(x: f32[5, 3], idx: i32[2])
    "get": lambda x, idx: x[idx],
    "get_clip": lambda x, idx: x.at[idx].get(mode="clip"),
    "get_fill": lambda x, idx: x.at[idx].get(mode="fill", fill_value=-1.0),
    "get_fill_default": lambda x, idx: x.at[idx, 1].get(mode="fill"),
    "get_int8_index": lambda x, idx: x[idx.astype(jnp.int8)],
    "set_one": lambda x, idx: x.at[idx[0]].set(x[1] * 2.0),
    "set_rows": lambda x, idx: x.at[idx].set(-5.0),
    "set_literal_true": lambda x, idx: jnp.where(  # the update is a jaxpr Literal
        jnp.zeros(5, bool).at[idx[0]].set(True)[:, None], 0.0, x),
    "set_elements": lambda x, idx: x.at[idx, jnp.array([0, 2])].set(jnp.array([8.0, 9.0])),
    "add_rows": lambda x, idx: x.at[idx].add(10.0),
    "sub_one": lambda x, idx: x.at[idx[1]].subtract(-0.0 * x[0]),
    "mul_column": lambda x, idx: x.at[idx, 1].multiply(3.0),
    "min_rows": lambda x, idx: x.at[idx].min(-100.0),
    "max_uint8_index": lambda x, idx: x.at[idx.astype(jnp.uint8)].max(100.0),
    "scan_of_gets_and_adds": lambda x, idx: lax.scan(
        lambda c, k: (c.at[idx + k].add(1.0) + c[idx - k].sum(), None), x, jnp.arange(4))[0],
    "dynamic_slice": lambda x, idx: lax.dynamic_slice(x, (idx[0], idx[1]), (2, 2)),
    "dynamic_update_slice": lambda x, idx: lax.dynamic_update_slice(x, -x[:2, :2],
                                                                   (idx[0], idx[1])),
    "equinox_buffer_lax": buffer_rows("lax"),
    "equinox_buffer_checkpointed": buffer_rows("checkpointed"),
}
APPROXIMATE = {  # IREE's sin differs from XLA's in the last bits
    "apply_rows": lambda x, idx: x.at[idx].apply(jnp.sin),
}


@pytest.fixture(scope="module")
def module():
    exports = [whilst.export(fn, X, np.zeros(2, np.int32), name=name)
               for name, fn in {**PROGRAMS, **APPROXIMATE}.items()]
    return whilst.compile(exports).load()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_equals_jax_bit_for_bit(module, name):
    for idx in INDICES:
        idx = np.array(idx, np.int32)
        want = PROGRAMS[name](jnp.asarray(X), jnp.asarray(idx))
        np.testing.assert_array_equal(getattr(module, name)(X, idx), want, err_msg=str(idx))


def test_apply_equals_jax(module):
    for idx in INDICES:
        idx = np.array(idx, np.int32)
        np.testing.assert_allclose(module.apply_rows(X, idx),
                                   APPROXIMATE["apply_rows"](jnp.asarray(X), jnp.asarray(idx)),
                                   rtol=1e-6, atol=1e-6)


def test_partly_out_of_bounds_windows_are_dropped_whole():
    """On XLA (`Exported.call` of the rewritten function): IREE 3.13 rejects
    scatters whose indexed dims have windows wider than 1 ("'iree_linalg_ext.scatter'
    op expected indices to be equal to batch rank or batch rank + 1"), with or
    without the rewrite."""
    exported = whilst.export(window_add, X, np.zeros(2, np.int32)).exported
    assert "stablehlo.clamp" in exported.mlir_module()  # the rewritten form
    for idx in INDICES:
        idx = np.array(idx, np.int32)
        np.testing.assert_array_equal(exported.call(X, idx),
                                      window_add(jnp.asarray(X), jnp.asarray(idx)))


def test_scatter_of_a_literal_update():
    """`x.at[i].set(True)` scatters a jaxpr literal (a Python bool, as in diffrax's
    gradients); on XLA (`Exported.call` of the rewritten function), in and out of bounds."""
    def fn(flags, counts, i):
        return flags.at[i].set(True), counts.at[i].add(2)
    args = np.zeros(4, np.bool_), np.arange(4, dtype=np.int32)
    exported = whilst.export(fn, *args, np.int32(0)).exported
    assert "stablehlo.clamp" in exported.mlir_module()  # the rewritten form
    for i in [0, 3, -1, 4, 10**8]:
        want_all = fn(*map(jnp.asarray, args), i)
        for got, want in zip(exported.call(*args, np.int32(i)), want_all):
            np.testing.assert_array_equal(got, want, err_msg=str(i))


def test_negative_zero_kept_by_dropped_add():
    """The dropped window (index 6) is sent to x[1] = -0.0 with the identity -0.0,
    which leaves it -0.0 (adding 0.0 would make it 0.0)."""
    x = np.array([1.0, -0.0], np.float32)

    def fn(x, i):
        return x.at[jnp.stack([i, i + 6])].add(jnp.float32(2.0))
    got = whilst.compile(fn, x, np.int32(0)).load()(x, np.int32(0))
    want = fn(jnp.asarray(x), 0)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("unroll", [1, None])
def test_loop_writing_and_reading_past_its_table(unroll):
    """A loop body that indexes a table at computed positions, some outside it
    (k = 1 keeps the scatter, auto-unrolling may turn it into selects)."""
    def fn(table, n):
        def body(i, s):
            t, total = s
            j = i * 3 - 2  # -2, 1, 4, 7, ...
            return i + 1, (t.at[j].add(1.0), total + t[j])
        return whilst.while_loop(lambda i, s: i < n, body, [0, (table, jnp.float32(0.0))],
                                 maximum_iterations=12, unroll=unroll)

    table = np.linspace(-1, 1, 6).astype(np.float32)
    module = whilst.compile(fn, table, np.int32(0)).load()
    for n in (0, 1, 3, 5, 12):
        t, total = jnp.asarray(table), jnp.float32(0.0)
        for i in range(n):  # the same steps in plain JAX (XLA), unrolled in Python
            j = i * 3 - 2
            t, total = t.at[j].add(1.0), total + t[j]
        count, (got_t, got_total) = module(table, np.int32(n))
        assert count == n
        np.testing.assert_array_equal(got_t, t)
        np.testing.assert_array_equal(got_total, total)
