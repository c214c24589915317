"""whilst.lax.while_loop / fori_loop against jax.lax's (values, types, jit, vmap, jvp)
and against jax.grad of the Python-unrolled loop (reverse mode)."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst

Point = collections.namedtuple("Point", "x y")


def leaves_match(got, want):
    got_l, want_l = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(got_l, want_l):
        assert jax.typeof(g) == jax.typeof(w), (jax.typeof(g), jax.typeof(w))
        np.testing.assert_allclose(g, w, rtol=1e-6)


WHILE_CASES = {
    "python_int": (lambda v: v < 10, lambda v: v * 2 + 1, 1),
    "weak_float": (lambda v: v < 10.0, lambda v: v * 1.5 + 0.5, 1.0),
    "weak_promoted": (lambda v: v < 10, lambda v: v + jnp.float32(2.5), 1),
    "strong": (lambda v: v < 10, lambda v: v + 3, jnp.int32(0)),
    "pytree": (lambda p: p.x < 4, lambda p: Point(p.x + 1, {"a": p.y["a"] * 1.1}),
               Point(0, {"a": jnp.arange(3.0)})),
    "zero_trips": (lambda v: v.sum() > 100.0, lambda v: v + 1.0, jnp.ones(2)),
}


@pytest.mark.parametrize("case", sorted(WHILE_CASES))
def test_while_loop_matches_lax(case):
    cond, body, init = WHILE_CASES[case]
    want = lax.while_loop(cond, body, init)
    leaves_match(whilst.lax.while_loop(cond, body, init), want)
    leaves_match(jax.jit(lambda: whilst.lax.while_loop(cond, body, init))(),
                 jax.jit(lambda: lax.while_loop(cond, body, init))())


def test_while_loop_vmap_stops_each_example_on_its_own():
    xs = jnp.array([0.5, 3.0, 9.0, 20.0])
    cond = lambda v: v[1] < 10.0
    body = lambda v: (v[0] + 1, v[1] * 1.7 + 0.1)
    got = jax.vmap(lambda x: whilst.lax.while_loop(cond, body, (0, x)))(xs)
    want = jax.vmap(lambda x: lax.while_loop(cond, body, (0, x)))(xs)
    leaves_match(got, want)


def test_while_loop_jvp_matches_lax():
    cond = lambda v: v[0] < 5
    body = lambda v: (v[0] + 1, jnp.sin(v[1]) * 1.3)
    x, t = jnp.array([0.3, -0.4]), jnp.array([1.0, 0.5])
    got = jax.jvp(lambda x: whilst.lax.while_loop(cond, body, (0, x))[1], (x,), (t,))
    want = jax.jvp(lambda x: lax.while_loop(cond, body, (0, x))[1], (x,), (t,))
    leaves_match(got, want)


def test_while_loop_maximum_iterations_cuts_and_gives_reverse_mode():
    def f(w, x):
        return whilst.lax.while_loop(lambda v: v[1].sum() < 50.0,
                                     lambda v: (v[0] + 1, jnp.tanh(v[1] * w) + v[1]),
                                     (0, x), maximum_iterations=6)[1].sum()

    def unrolled(w, x):
        for _ in range(6):  # the cond never stops it first at these values
            x = jnp.tanh(x * w) + x
        return x.sum()

    w, x = 0.8, jnp.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(f(w, x), unrolled(w, x), rtol=1e-6)
    for argnum in (0, 1):
        np.testing.assert_allclose(jax.grad(f, argnum)(w, x), jax.grad(unrolled, argnum)(w, x),
                                   rtol=1e-5)


FORI_BOUNDS = [(0, 5), (2, 7), (3, 3), (5, 2), (np.int32(1), 4), (-2, np.int32(3))]


@pytest.mark.parametrize("lower,upper", FORI_BOUNDS)
def test_fori_loop_matches_lax(lower, upper):
    body = lambda i, v: (v[0] + i, v[1] * 0.9 + i * 0.5)
    init = (0, jnp.ones(2))
    leaves_match(whilst.lax.fori_loop(lower, upper, body, init),
                 lax.fori_loop(lower, upper, body, init))


def test_fori_loop_traced_bounds_under_jit_and_vmap():
    body = lambda i, v: v * 1.1 + i
    f = lambda n: whilst.lax.fori_loop(0, n, body, 1.0)
    g = lambda n: lax.fori_loop(0, n, body, 1.0)
    leaves_match(jax.jit(f)(6), jax.jit(g)(6))
    ns = jnp.array([0, 3, 6])
    leaves_match(jax.vmap(f)(ns), jax.vmap(g)(ns))


def test_fori_loop_jvp_matches_lax():
    body = lambda i, v: jnp.sin(v) * (i + 1.0)
    x, t = jnp.array([0.2, 0.4]), jnp.array([1.0, -1.0])
    leaves_match(jax.jvp(lambda x: whilst.lax.fori_loop(1, 4, body, x), (x,), (t,)),
                 jax.jvp(lambda x: lax.fori_loop(1, 4, body, x), (x,), (t,)))


def test_fori_loop_grad_matches_unrolled_loop():
    def body(i, v):
        x, w = v
        return jnp.tanh(x @ w) * (i + 1.0) * 0.3 + x, w

    def f(x, w):
        return jnp.sum(whilst.lax.fori_loop(2, 7, body, (x, w))[0] ** 2)

    def unrolled(x, w):
        v = (x, w)
        for i in range(2, 7):
            v = body(i, v)
        return jnp.sum(v[0] ** 2)

    x = jnp.linspace(-1.0, 1.0, 4)
    w = jnp.eye(4) * 0.5 + 0.1
    for argnum in (0, 1):
        np.testing.assert_allclose(jax.grad(f, argnum)(x, w), jax.grad(unrolled, argnum)(x, w),
                                   rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(x, w), jax.grad(unrolled)(x, w),
                               rtol=1e-5, atol=1e-6)


def test_fori_loop_traced_bounds_differentiate():
    body = lambda i, v: jnp.sin(v) + 0.1 * i

    def unrolled(x):
        for i in range(5):
            x = body(i, x)
        return x.sum()

    x = jnp.array([0.3, 0.6])
    for options in [dict(checkpoints=2), {}, dict(gradient_memory=40)]:
        f = lambda x, n: whilst.lax.fori_loop(0, n, body, x, **options).sum()
        np.testing.assert_allclose(jax.jit(jax.grad(f))(x, 5), jax.grad(unrolled)(x),
                                   rtol=1e-5)


def test_errors_name_the_argument_and_the_path():
    with pytest.raises(TypeError, match=r"whilst.lax.while_loop: body_fun must be callable"):
        whilst.lax.while_loop(lambda v: True, 3, 1.0)
    with pytest.raises(TypeError, match=r"body_fun output init_val\['b'\] is float32\[3\].*"
                                        r"carry init_val\['b'\] is int32\[3\]"):
        whilst.lax.while_loop(lambda v: v["a"] < 3,
                              lambda v: {"a": v["a"] + 1, "b": v["b"] * 0.5},
                              {"a": 0, "b": jnp.arange(3)})
    with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar"):
        whilst.lax.while_loop(lambda v: v, lambda v: v + 1, jnp.zeros(2))
    with pytest.raises(TypeError, match=r"init_val\[1\] must be an array"):
        whilst.lax.while_loop(lambda v: True, lambda v: v, (1.0, "text"))
    with pytest.raises(TypeError, match=r"fori_loop: lower and upper must have the same"):
        whilst.lax.fori_loop(jnp.int32(0), jnp.int16(3), lambda i, v: v, 1.0)
    with pytest.raises(TypeError, match=r"fori_loop: lower and upper must have the same dtype"
                                        r"; found int32 and float32"):
        whilst.lax.fori_loop(0, 2.5, lambda i, v: v, 1.0)
    with pytest.raises(TypeError, match=r"fori_loop: upper must be a numeric scalar"):
        whilst.lax.fori_loop(0, "3", lambda i, v: v, 1.0)
