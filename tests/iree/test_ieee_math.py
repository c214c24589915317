"""`x ** y` with an array exponent and `atan2` give XLA's results on IREE, special
cases included (whilst/ir/iree_forms/_ieee_math.py): IREE 3.13 returns NaN for a negative base
with an integral exponent, for x ** 0 with x <= 0, and for atan2 of two zeros or
two infinities."""
import jax.numpy as jnp
import numpy as np

import whilst

BASES = [-np.inf, -2.5, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan]
EXPONENTS = [-np.inf, -3.0, -2.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 7.0,
             np.inf, np.nan]


def assert_as_xla(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))
    np.testing.assert_allclose(got, want, rtol=2e-6)  # equal_nan; infinities must match


def test_atan2_special_cases_as_xla():
    values = [-np.inf, -2.0, -1.0, -0.0, 0.0, 1e-30, 1.5, 3.0, np.inf, np.nan]
    y, x = (a.ravel().astype(np.float32) for a in np.meshgrid(values, values))
    got = whilst.compile(jnp.arctan2, y, x).load()(y, x)
    assert_as_xla(got, np.asarray(jnp.arctan2(jnp.asarray(y), jnp.asarray(x))))


def test_pow_special_cases_as_xla():
    x, y = (a.ravel().astype(np.float32) for a in np.meshgrid(BASES, EXPONENTS))
    module = whilst.compile(lambda x, y: x ** y, x, y).load()
    assert_as_xla(module(x, y), np.asarray(jnp.asarray(x) ** jnp.asarray(y)))


def test_pow_in_a_loop_with_a_carried_exponent():
    """A loop that raises a negative base to the carried exponent 0, 1, 2, ..."""
    def fn(base):
        return whilst.while_loop(lambda i, s: i < 6,
                                 lambda i, s: (i + 1, (s[0] + 1.0, s[1] + base ** s[0])),
                                 [0, (jnp.float32(0.0), jnp.float32(0.0))])[1][1]
    got = whilst.compile(fn, np.float32(0)).load()(np.float32(-1.5))
    np.testing.assert_allclose(got, sum((-1.5) ** k for k in range(6)), rtol=1e-6)
