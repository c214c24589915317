"""Loops that carry typed PRNG keys (`jax.random.key`) run as the same loop in plain
Python does: eagerly, under jit and vmap, in reverse mode, bounded or not, and on
IREE. The oracle runs the same `jax.random` calls unrolled (`helpers.unrolled`)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
import whilst.lax
from helpers import unrolled


def noisy_body(k, x):
    k, sub = jax.random.split(k)
    return k, x * (1.2 + 0.1 * jax.random.normal(sub, x.shape)) + 0.05 * jnp.sin(x)


def noisy_cond(k, x):
    return jnp.sum(x) < 40.0


def key_data(k):
    return np.asarray(jax.random.key_data(k))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_key_loop_variable_matches_the_python_loop(impl):
    x = jnp.array([1.0, 2.0, 0.5])
    key = jax.random.key(7, impl=impl)
    steps, want_k, want_x = unrolled(lambda n, k, x: noisy_cond(k, x),
                                     lambda n, k, x: (n + 1, *noisy_body(k, x)), [0, key, x])
    assert steps > 5
    for run in (lambda k, x: whilst.while_loop(noisy_cond, noisy_body, [k, x]),
                jax.jit(lambda k, x: whilst.while_loop(noisy_cond, noisy_body, [k, x]))):
        k, y = run(key, x)
        assert k.dtype == key.dtype
        np.testing.assert_array_equal(key_data(k), key_data(want_k))
        np.testing.assert_allclose(y, want_x, rtol=1e-6)


@pytest.mark.parametrize("options", [dict(maximum_iterations=50), dict(),
                                     dict(checkpoints=2), dict(gradient_memory=0)])
def test_gradient_through_a_key_carrying_loop_matches_jax_grad_of_the_python_loop(options):
    x = jnp.array([1.0, 2.0, 0.5])
    key = jax.random.key(3)

    def loss(x, loop):
        return jnp.sum(loop(noisy_cond, noisy_body, [key, x])[1] ** 2)

    want = jax.grad(loss)(x, unrolled)
    got = jax.grad(loss)(x, lambda c, b, v: whilst.while_loop(c, b, v, **options))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_vmapped_keys_stop_each_example_on_its_own():
    xs = jnp.array([[1.0, 2.0, 0.5], [4.0, 5.0, 6.0], [0.1, 0.1, 0.1]])
    keys = jax.random.split(jax.random.key(11), 3)
    ks, ys = jax.vmap(lambda k, x: whilst.while_loop(noisy_cond, noisy_body, [k, x]))(keys, xs)
    for k0, x0, k, y in zip(keys, xs, ks, ys):
        want_k, want_x = unrolled(noisy_cond, noisy_body, [k0, x0])
        np.testing.assert_array_equal(key_data(k), key_data(want_k))
        np.testing.assert_allclose(y, want_x, rtol=1e-6)


def test_lax_fori_loop_carries_a_key():
    def body(i, carry):
        k, total = carry
        k, sub = jax.random.split(k)
        return k, total + i * jax.random.uniform(sub)

    key = jax.random.key(5)
    k, total = whilst.lax.fori_loop(0, 6, body, (key, 0.0))
    want_k, want_total = key, 0.0
    for i in range(6):
        want_k, want_total = body(i, (want_k, want_total))
    np.testing.assert_array_equal(key_data(k), key_data(want_k))
    np.testing.assert_allclose(total, want_total, rtol=1e-6)


@pytest.mark.iree
def test_a_key_carrying_loop_and_its_gradient_run_on_iree():
    def f(x, seed):
        k, y = whilst.while_loop(noisy_cond, noisy_body, [jax.random.key(seed), x])
        return y, jax.random.key_data(k)

    def loss(x, seed):
        return jnp.sum(f(x, seed)[0] ** 2)

    def oracle(x, seed):
        k, y = unrolled(noisy_cond, noisy_body, [jax.random.key(seed), x])
        return y, jax.random.key_data(k)

    x, seed = jnp.array([1.0, 2.0, 0.5], jnp.float32), np.uint32(9)
    y, k = whilst.compile(f, x, seed).load()(x, seed)
    want_y, want_k = oracle(x, seed)
    np.testing.assert_array_equal(k, want_k)
    np.testing.assert_allclose(y, want_y, rtol=1e-5)
    compiled = whilst.compile(jax.grad(loss), x, seed)
    # its chunk loop, stacks of 1 MiB written in place, runs in a dispatch
    assert "left to the host" not in compiled.stages[-1][0], compiled.stages[-1][0]
    grad = compiled.load()(x, seed)
    np.testing.assert_allclose(grad, jax.grad(lambda x: jnp.sum(oracle(x, seed)[0] ** 2))(x),
                               rtol=1e-5)


@pytest.mark.parametrize("returned, found", [
    (lambda k, x: (x[0].astype(jnp.int32), x), "int32"),
    (lambda k, x: (jax.random.key(0, impl="rbg"), x), "key<rbg>"),
    (lambda k, x: (jax.random.key_data(k), x), "uint32"),
])
def test_a_key_that_comes_back_as_something_else_is_refused(returned, found):
    with pytest.raises(TypeError, match=rf"loop_vars\[0\] has dtype {found}, but "
                                        rf"loop_vars\[0\] starts with dtype key<fry>"):
        whilst.while_loop(noisy_cond, returned, [jax.random.key(0), jnp.ones(3)])


def test_a_numeric_loop_variable_that_comes_back_a_key_is_refused():
    with pytest.raises(TypeError, match=r"init_val\[1\] has dtype key<fry>, but "
                                        r"init_val\[1\] starts with dtype float32"):
        whilst.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0], c[0]),
                              (jax.random.key(0), jnp.float32(0)))
