"""Float-to-integer conversions give XLA's saturated results on IREE
(whilst/ir/iree_forms/_saturating_casts.py): IREE 3.13 turns NaN, infinities and
out-of-range values into 0x80000000 on x86."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst

VALUES = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483520.0, 2147483648.0, -2147483648.0,
          65504.0, 70000.0, 3.7, -3.7, 255.5, 256.0, -0.5, -1.0, 0.0, -0.0, 127.9, -128.9]
SOURCES = [np.float32, np.float16, jnp.bfloat16]
TARGETS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


@pytest.fixture(scope="module")
def module():
    exports = [whilst.export(lambda x, t=t: x.astype(t), np.zeros(len(VALUES), s),
                             name=f"{np.dtype(s).name}_to_{np.dtype(t).name}")
               for s in SOURCES for t in TARGETS]
    return whilst.compile(exports).load()


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: np.dtype(s).name)
def test_conversions_equal_xla_bit_for_bit(module, source):
    with np.errstate(over="ignore"):
        x = np.array(VALUES, np.float64).astype(source)
    for target in TARGETS:
        got = getattr(module, f"{np.dtype(source).name}_to_{np.dtype(target).name}")(x)
        want = jnp.asarray(x).astype(target)  # XLA on CPU
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=np.dtype(target).name)


def test_index_computed_from_a_float_in_a_loop():
    """A loop that indexes a table at `int(t / dt)`, t running past the table and
    to infinity: the index saturates and the gather clamps, as on XLA."""
    def fn(table, dt):
        def body(i, s):
            t, total = s
            return i + 1, (t * 8.0 + 1.0, total + table[(t / dt).astype(jnp.int32)])
        return whilst.while_loop(lambda i, s: i < 50, body, [0, (jnp.float32(0.5), 0.0)])[1]

    table = np.linspace(-1, 1, 7).astype(np.float32)
    got = whilst.compile(fn, table, np.float32(1)).load()(table, np.float32(0.25))
    t, total = jnp.float32(0.5), jnp.float32(0.0)
    for _ in range(50):  # the same steps in plain JAX (XLA)
        t, total = t * 8.0 + 1.0, total + jnp.asarray(table)[(t / 0.25).astype(jnp.int32)]
    assert not np.isfinite(t)
    np.testing.assert_array_equal(got[1], total)
