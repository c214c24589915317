"""Unrolling k loop steps per emitted stablehlo.while iteration changes nothing but
speed: counters, outputs and gradients equal those of k = 1 for every trip count."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.ir import unroll_factor

UNROLLS = [1, 2, 3, 5, 8]


def loop(k, bound=16):
    def f(x, limit):
        return whilst.while_loop(
            lambda i, x, s: s < limit,
            lambda i, x, s: (i + 1, jnp.sin(x) * 1.3 + 0.2, s + jnp.sum(x * x)),
            [0, x, 0.0], maximum_iterations=bound, unroll=k)
    return f


def loss(k):
    return lambda x, limit: jnp.sum(loop(k)(x, limit)[1])


# Limits that make the loop stop after 0, 1, ..., 16 steps (16: cut by the bound).
LIMITS = [-1.0, 0.5, 2.0, 5.0, 9.0, 14.0, 20.0, 40.0, 1e9]


@pytest.mark.parametrize("k", UNROLLS[1:])
def test_forward_matches_k1_for_every_trip_count(k):
    x = np.array([0.3, -0.2, 0.9], np.float32)
    f1, fk = jax.jit(loop(1)), jax.jit(loop(k))
    trips = set()
    for limit in LIMITS:
        want, got = f1(x, limit), fk(x, limit)
        trips.add(int(want[0]))
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
    assert {0, 1, 16} <= trips and len(trips) >= 6


@pytest.mark.parametrize("k", UNROLLS[1:])
def test_gradients_match_k1_for_every_trip_count(k):
    x = np.array([0.3, -0.2, 0.9], np.float32)
    g1, gk = jax.jit(jax.grad(loss(1))), jax.jit(jax.grad(loss(k)))
    for limit in LIMITS:
        np.testing.assert_allclose(gk(x, limit), g1(x, limit), rtol=1e-6, atol=1e-7)


def test_vmap_with_unrolling_keeps_per_example_trip_counts():
    xs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    limits = np.array([-1.0, 2.0, 9.0, 1e9], np.float32)
    want = jax.vmap(loop(1))(xs, limits)
    got = jax.vmap(loop(4))(xs, limits)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_iree_unrolled_forward_and_gradient_match_k1():
    x = np.array([0.3, -0.2, 0.9], np.float32)
    module = whilst.compile(
        [whilst.export(loop(3), x, np.float32(0), name="fwd"),
         whilst.export(jax.grad(loss(3)), x, np.float32(0), name="grad")]).load()
    assert "whilst.unroll = 3" in whilst.export(loop(3), x, np.float32(0)).text
    for limit in LIMITS:
        limit = np.float32(limit)
        for w, g in zip(loop(1)(x, limit), module.fwd(x, limit)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(module.grad(x, limit), jax.grad(loss(1))(x, limit),
                                   rtol=1e-5, atol=1e-7)


def test_emitted_loop_records_its_unroll_factor():
    text = whilst.export(loop(5), np.ones(3, np.float32), np.float32(1)).text
    assert "whilst.unroll = 5" in text


def test_automatic_unroll_prefers_tiny_bodies():
    def k_of(body, x):
        jaxpr = whilst.trace(lambda x: whilst.while_loop(lambda i, x: i < 10, body, [0, x]), x)
        (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "functional_while"]
        return unroll_factor(eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"], None)

    tiny = k_of(lambda i, x: (i + 1, jnp.sin(x)), np.ones(8, np.float32))
    W = np.ones((256, 256), np.float32)
    matvec = k_of(lambda i, x: (i + 1, jnp.tanh(W @ x)), np.ones(256, np.float32))
    big_carry = k_of(lambda i, x: (i + 1, x * 2.0), np.ones((200, 200), np.float32))
    indexing = k_of(lambda i, x: (i + 1, x.at[i % 8].set(1.0)), np.ones(8, np.float32))
    assert tiny > 8 and matvec == 1 and big_carry == 1 and indexing == 1


def test_unroll_must_be_a_positive_int():
    with pytest.raises(ValueError, match="unroll must be None"):
        whilst.while_loop(lambda i: i < 2, lambda i: i + 1, [0], unroll=0)
