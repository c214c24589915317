"""Reverse mode of loops that run a few steps known at trace time: the steps are
inlined (`whilst/ir/reverse/_inlined.py`), while the loop itself stays one While.
Oracles: JAX's derivatives of the loop unrolled in Python (`helpers.unrolled`)."""
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import unrolled
from whilst.ir import iter_loops
from whilst.ir.reverse._inlined import MAX_INLINED_STEPS

W = np.float32(1.3)
X = np.linspace(0.1, 0.9, 3).astype(np.float32)


def cond(steps):
    return lambda i, y, w: i < steps


def body(i, y, w):
    return i + 1, jnp.sin(w * y) + 0.1 * jnp.float32(i) * y, w


def loss(x, w, steps=3, **options):
    return jnp.sum(whilst.while_loop(cond(steps), body, [0, x, w], **options)[1] ** 2)


def oracle(x, w, steps=3):
    return jnp.sum(unrolled(cond(steps), body, [0, x, w])[1] ** 2)


def loop_roles(fn, *args):
    return [e.params["role"] for e in iter_loops(jax.make_jaxpr(fn)(*args).jaxpr)]


def assert_close(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_gradients_of_a_loop_of_known_steps_differentiate_straight_line_code():
    """No While in the gradient, nor in any higher derivative; the forward pass and
    forward mode keep their one While."""
    grad = jax.grad(loss, (0, 1))
    assert loop_roles(grad, X, W) == []
    assert_close(grad(X, W), jax.grad(oracle, (0, 1))(X, W))
    assert_close(jax.jit(grad)(X, W), jax.grad(oracle, (0, 1))(X, W))
    assert loop_roles(loss, X, W) == ["forward"]
    tangent = jax.jvp(loss, (X, W), (np.ones_like(X), np.float32(0.5)))
    assert_close(tangent, jax.jvp(oracle, (X, W), (np.ones_like(X), np.float32(0.5))))
    assert loop_roles(lambda x: jax.jvp(loss, (x, W), (x, W)), X) == ["forward"]
    hessian = jax.hessian(loss)
    assert loop_roles(hessian, X, W) == []
    assert_close(hessian(X, W), jax.hessian(oracle)(X, W))


def test_fori_loops_with_concrete_bounds_are_inlined():
    def f(x, lax=whilst.lax):
        return jnp.sum(lax.fori_loop(1, 4, lambda i, x: jnp.sin(x) * W + 0.1 * i, x) ** 2)

    assert loop_roles(jax.grad(f), X) == []
    assert loop_roles(f, X) == ["forward"]
    assert_close(jax.grad(f)(X), jax.grad(functools.partial(f, lax=jax.lax))(X))


def summed_grad(f, order):
    """`x -> grad(sum(grad(... sum(f(x)))))`, `order` gradients."""
    for _ in range(order):
        f = jax.grad(lambda x, f=f: jnp.sum(f(x)))
    return f


@pytest.mark.parametrize("steps", [0, 1, MAX_INLINED_STEPS])
def test_any_order_matches_the_unrolled_loop(steps):
    f = summed_grad(lambda x: loss(x, W, steps=steps), 3)
    assert_close(f(X), summed_grad(lambda x: oracle(x, W, steps=steps), 3)(X))
    assert loop_roles(f, X) == []


def test_transformations_of_the_inlined_gradient_match_the_unrolled_loop():
    grad = jax.grad(loss)
    want = jax.grad(oracle)
    xs = np.stack([X, X * 2, -X])
    assert_close(jax.vmap(grad, (0, None))(xs, W), jax.vmap(want, (0, None))(xs, W))
    assert_close(jax.grad(lambda x: jnp.sum(jax.vmap(loss, (0, None))(x, W)))(xs),
                 jax.grad(lambda x: jnp.sum(jax.vmap(oracle, (0, None))(x, W)))(xs))
    assert_close(jax.grad(jax.checkpoint(loss))(X, W), want(X, W))
    assert_close(jax.jacfwd(grad)(X, W), jax.jacfwd(want)(X, W))


@pytest.mark.parametrize("options, steps", [
    ({}, MAX_INLINED_STEPS + 1),                  # more steps than inlined
    (dict(checkpoints=2), 3),                     # the user's policy recomputes
    (dict(gradient_memory=0), 3),
])
def test_loops_that_keep_their_gradient_while(options, steps):
    f = functools.partial(loss, steps=steps, **options)
    roles = loop_roles(jax.grad(f), X, W)
    assert "gradient" in roles
    assert_close(jax.grad(f, (0, 1))(X, W), jax.grad(oracle, (0, 1))(X, W, steps))


def test_a_loop_bounded_by_a_traced_value_keeps_its_gradient_while():
    f = lambda x, w, m: loss(x, w, maximum_iterations=m)
    assert "gradient" in loop_roles(jax.grad(f), X, W, 3)
    assert_close(jax.jit(jax.grad(f))(X, W, 2), jax.grad(oracle)(X, W, 2))


def test_a_large_body_keeps_its_gradient_while():
    """A body of 100 equations inside a `jax.jit` (one equation at its level), 3 steps."""
    @jax.jit
    def heavy(y):
        for _ in range(100):
            y = jnp.sin(y) * 1.01
        return y

    def heavy_body(i, y, w):
        return i + 1, heavy(y) * w, w

    f = lambda x: jnp.sum(whilst.while_loop(cond(3), heavy_body, [0, x, W])[1])
    want = lambda x: jnp.sum(unrolled(cond(3), heavy_body, [0, x, W])[1])
    assert "gradient" in loop_roles(jax.grad(f), X)
    assert_close(jax.grad(f)(X), jax.grad(want)(X))


def test_a_body_with_effects_keeps_its_gradient_while():
    calls = []

    def noisy(i, y, w):
        jax.debug.callback(lambda i: calls.append(int(i)), i)
        return body(i, y, w)

    f = lambda x: jnp.sum(whilst.while_loop(cond(3), noisy, [0, x, W])[1] ** 2)
    assert "gradient" in loop_roles(jax.grad(f), X)
    assert_close(jax.grad(f)(X), jax.grad(oracle)(X, W))


@pytest.mark.parametrize("steps", [0, 3, MAX_INLINED_STEPS])
def test_eager_gradients_inline_the_steps_a_loop_takes_compiling_nothing(steps, caplog):
    """Counted by a float, the loop has no trip count known at trace time; eagerly
    its operands are values, so reverse mode steps it op by op for its trip count
    and inlines the steps: once JAX has compiled those ops (the first call), a
    call compiles no program, at first and second order."""
    def by_value(loop, x, w):
        return jnp.sum(loop(lambda t, y, w: t < float(steps), body, [0.0, x, w])[1] ** 2)

    f = functools.partial(by_value, whilst.while_loop)
    want = jax.grad(functools.partial(by_value, unrolled), (0, 1))
    second = jax.grad(lambda w: jnp.sum(jax.grad(f)(X, w)))
    for grad, args, oracle in [(jax.grad(f, (0, 1)), (X, W), want),
                               (second, (W,), jax.grad(lambda w: jnp.sum(want(X, w)[0])))]:
        jax.block_until_ready(grad(*args))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
            got = grad(*args)
        assert not [r for r in caplog.records if r.getMessage().startswith("Compiling ")]
        assert_close(got, oracle(*args))


def test_eager_gradients_step_the_loops_in_a_body_too_compiling_nothing(caplog):
    """Counting an outer loop's trips eagerly, reverse mode steps the loop in its body
    op by op too, so a nest of loops that each end within the inlined steps compiles
    no program once JAX has compiled the ops."""
    def inner(y):
        return whilst.while_loop(lambda t, _: t < 2.0, lambda t, y: (t + 1.0, jnp.cos(y)),
                                 [0.0, y])[1]

    def f(x):
        return whilst.while_loop(lambda t, _: t < 3.0, lambda t, y: (t + 1.0, inner(y) * 1.5),
                                 [0.0, x])[1]

    def unrolled(x):
        for _ in range(3):
            x = jnp.cos(jnp.cos(x)) * 1.5
        return x

    for grad, oracle in [(jax.grad(f), jax.grad(unrolled)),
                         (jax.grad(jax.grad(f)), jax.grad(jax.grad(unrolled)))]:
        jax.block_until_ready(grad(0.3))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
            got = grad(0.3)
        assert not [r for r in caplog.records if r.getMessage().startswith("Compiling ")]
        assert_close(got, oracle(0.3))


def test_eager_derivatives_run_each_step_once_counting_it_as_it_runs():
    """Eagerly, reverse mode counts a loop's steps as it linearizes them (it ends
    within the steps inlined): each step of the loop, and of one in its body, runs
    once per call at orders 1-3, where counting the trips apart ran them twice. A
    `jax.pure_callback` on the counter (no tangent) counts the steps run."""
    runs = []

    def one(t):
        runs.append(t)
        return np.ones_like(t)

    def step(t):
        return t + jax.pure_callback(one, jax.ShapeDtypeStruct((), jnp.float32), t)

    def inner(y):
        return whilst.while_loop(lambda t, _: t < 2.0, lambda t, y: (step(t), jnp.cos(y)),
                                 [0.0, y])[1]

    def loop(x):
        return whilst.while_loop(lambda t, _: t < 3.0, lambda t, y: (step(t), jnp.cos(y)),
                                 [0.0, x])[1]

    def nest(x):
        return whilst.while_loop(lambda t, _: t < 3.0, lambda t, y: (t + 1.0, inner(y)),
                                 [0.0, x])[1]

    for f, steps, oracle in [(loop, 3, lambda x: jnp.cos(jnp.cos(jnp.cos(x)))),
                             (nest, 6, lambda x: functools.reduce(
                                 lambda y, _: jnp.cos(y), range(6), x))]:
        grad, want = f, oracle
        for order in (1, 2, 3):
            grad, want = jax.grad(grad), jax.grad(want)
            runs.clear()
            got = grad(0.3)
            assert len(runs) == steps, (f.__name__, order, len(runs))
            assert_close(got, want(0.3))

    # Past the steps inlined, the steps tried inlined are not stepped again while
    # counting: the count runs as one program, then the loop storing its rows.
    def long(x):
        return whilst.while_loop(lambda t, _: t < 20.0, lambda t, y: (step(t), jnp.cos(y)),
                                 [0.0, x])[1]

    runs.clear()
    got = jax.grad(long)(0.3)
    assert len(runs) <= MAX_INLINED_STEPS + 2 * 20, len(runs)
    assert_close(got, jax.grad(lambda x: functools.reduce(lambda y, _: jnp.cos(y),
                                                          range(20), x))(0.3))


def test_the_inlined_gradient_compiles_and_runs_on_iree():
    grad = jax.grad(loss, (0, 1))
    module = whilst.compile(grad, X, W).load("local-sync")
    assert_close(module.main(X, W), jax.grad(oracle, (0, 1))(X, W))
