"""`xla_cpu_choice`: code with a second form for XLA:CPU under jax.jit, the portable
form everywhere else (exported modules included) and in derivatives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.ir._xla_cpu_choice import xla_cpu_choice


def first_power_of_two_at_least_loop(x):
    return [lax.while_loop(lambda p: jnp.any(p < x), lambda p: jnp.where(p < x, p * 2, p),
                           jnp.ones_like(x))]


def first_power_of_two_at_least(x):
    return [jnp.left_shift(1, 32 - lax.clz(jnp.maximum(x, 1) - 1))]


def f(x):
    return xla_cpu_choice(first_power_of_two_at_least_loop, first_power_of_two_at_least, x)[0]


X = np.array([0, 1, 2, 3, 5, 64, 65, 1000], np.int32)
WANT = np.array([1, 1, 2, 4, 8, 64, 128, 1024], np.int32)


def test_both_forms_under_jit_vmap_and_export():
    np.testing.assert_array_equal(jax.jit(f)(X), WANT)
    np.testing.assert_array_equal(jax.jit(jax.vmap(f))(X), WANT)
    np.testing.assert_array_equal(jax.vmap(jax.vmap(f))(X.reshape(2, 4)), WANT.reshape(2, 4))
    assert "stablehlo.while" in jax.jit(f).lower(X).as_text()
    exported = whilst.export(f, X).text
    assert "stablehlo.while" not in exported and "count_leading_zeros" in exported


def test_no_tangents():
    def g(y):
        return y * f(X).astype(jnp.float32)
    np.testing.assert_array_equal(jax.grad(lambda y: g(y).sum())(2.0), WANT.sum())
    np.testing.assert_array_equal(jax.jvp(g, (2.0,), (1.0,))[1], WANT)


def square(x):
    """x ** 2, as `x * x` on XLA:CPU and through `abs` elsewhere."""
    return xla_cpu_choice(lambda x: [x * x], lambda x: [jnp.abs(x) * jnp.abs(x)], x)[0]


XF = np.array([-1.5, 0.0, 0.5, 2.0], np.float32)


def test_float_values_and_their_derivatives():
    np.testing.assert_allclose(jax.jit(square)(XF), XF ** 2)
    assert "abs" not in jax.jit(square).lower(XF).as_text()
    assert "abs" in whilst.export(square, XF).text
    grad = jax.grad(lambda x: square(x).sum())
    np.testing.assert_allclose(jax.jit(grad)(XF), 2 * XF)
    np.testing.assert_allclose(jax.jit(jax.vmap(grad))(XF.reshape(2, 2)), 2 * XF.reshape(2, 2))
    np.testing.assert_allclose(jax.jvp(square, (XF,), (np.ones(4, np.float32),))[1], 2 * XF)
    np.testing.assert_allclose(jax.grad(jax.grad(lambda x: square(x)))(1.5), 2.0)


def test_effects_are_refused():
    def printed(x):
        jax.debug.print("{}", x)
        return [x]
    with pytest.raises(TypeError, match="effects"):
        xla_cpu_choice(printed, lambda x: [x], jnp.float32(1.0))
