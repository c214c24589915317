"""Loops exported with a symbolic batch dimension, compiled once by IREE (llvm-cpu) and
run at several batch sizes, give the answers of plain numpy loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst

SIZES = (1, 3, 8)
(B,) = jax.export.symbolic_shape("b")


def spec():
    return jax.ShapeDtypeStruct((B,), np.float32)


def grow(x, limit):
    return whilst.while_loop(lambda i, x: x < limit, lambda i, x: (i + 1, x * 1.5 + 0.1),
                             [0, x], maximum_iterations=20)


def grow_oracle(xs, limits):
    counts, outs = [], []
    for x, limit in zip(xs, limits):
        i = 0
        while i < 20 and x < limit:
            x, i = np.float32(x * np.float32(1.5) + np.float32(0.1)), i + 1
        counts.append(i)
        outs.append(x)
    return np.array(counts, np.int32), np.array(outs, np.float32)


def newton_sqrt(a):
    """Per example: Newton steps for sqrt(a) until |x*x - a| <= 1e-4 * a."""
    def body(i, s):
        x, err = s
        x = 0.5 * (x + a / x)
        return i + 1, (x, jnp.abs(x * x - a))
    return whilst.while_loop(lambda i, s: s[1] > 1e-4 * a, body, [0, (a, jnp.abs(a * a - a))],
                             maximum_iterations=50)


def newton_oracle(values):
    counts, outs = [], []
    for a in values:
        a = np.float32(a)
        x, err, i = a, abs(a * a - a), 0
        while i < 50 and err > np.float32(1e-4) * a:
            x = np.float32(0.5) * (x + a / x)
            err, i = abs(x * x - a), i + 1
        counts.append(i)
        outs.append(x)
    return np.array(counts, np.int32), np.array(outs, np.float32)


@pytest.fixture(scope="module")
def grow_module():
    return whilst.compile(jax.vmap(grow), spec(), spec()).load()


@pytest.mark.parametrize("b", SIZES)
def test_vmapped_loop_runs_at_each_batch_size(grow_module, b):
    xs = np.linspace(0.1, 2.0, b).astype(np.float32)
    limits = np.linspace(5.0, 1.0, b).astype(np.float32)
    counts, out = grow_module(xs, limits)
    want_counts, want = grow_oracle(xs, limits)
    if b > 2:
        assert len(set(want_counts)) > 1  # trip counts differ per example
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_vmapped_pytree_loop_with_reduction_test_runs_at_each_batch_size():
    module = whilst.compile(jax.vmap(newton_sqrt), spec()).load()
    for b in SIZES:
        values = np.geomspace(0.5, 900.0, b).astype(np.float32)
        counts, (root, _) = module(values)
        want_counts, want = newton_oracle(values)
        np.testing.assert_array_equal(counts, want_counts)
        np.testing.assert_allclose(root, want, rtol=1e-5)
        np.testing.assert_allclose(root, np.sqrt(values), rtol=1e-4)


def grow_grad_oracle(xs, limits, bound):
    """d/dx of sum(x_final ** 2) per example: x_final = 1.5**n x + c, so 2 x_final 1.5**n."""
    grads = []
    for x, limit in zip(xs, limits):
        i, y = 0, np.float32(x)
        while (bound is None or i < bound) and y < limit:
            y, i = np.float32(y * np.float32(1.5) + np.float32(0.1)), i + 1
        grads.append(2.0 * np.float64(y) * 1.5 ** i)
    return np.array(grads)


@pytest.mark.parametrize("bound", [20, None], ids=["stored", "checkpointed"])
def test_gradient_of_vmapped_loop_at_each_batch_size(bound):
    """Reverse mode over a symbolic batch: residual rows (bounded loop) or checkpointed
    carries (unbounded loop) of symbolic shape are pushed and read back."""
    def loss(xs, limits):
        def one(x, limit):
            return whilst.while_loop(lambda i, x: x < limit, lambda i, x: (i + 1, x * 1.5 + 0.1),
                                     [0, x], maximum_iterations=bound)[1]
        return jnp.sum(jax.vmap(one)(xs, limits) ** 2)
    module = whilst.compile(jax.grad(loss), spec(), spec()).load()
    for b in SIZES:
        xs = np.linspace(0.1, 2.0, b).astype(np.float32)
        limits = np.linspace(5.0, 1.0, b).astype(np.float32)
        np.testing.assert_allclose(module(xs, limits), grow_grad_oracle(xs, limits, bound),
                                   rtol=1e-5)


def newton_unrolled(a, steps):
    x = a
    for _ in range(steps):
        x = 0.5 * (x + a / x)
    return x


def test_gradient_of_vmapped_pytree_loop_at_each_batch_size():
    grad = jax.grad(lambda values: jnp.sum(jax.vmap(newton_sqrt)(values)[1][0]))
    module = whilst.compile(grad, spec()).load()
    for b in SIZES:
        values = np.geomspace(0.5, 900.0, b).astype(np.float32)
        counts, _ = newton_oracle(values)
        want = [jax.grad(newton_unrolled)(a, int(n)) for a, n in zip(values, counts)]
        np.testing.assert_allclose(module(values), want, rtol=1e-5)


def test_gradient_of_loop_over_symbolic_length_at_each_size():
    """Not vmapped: the carry itself has the symbolic length, and so has every
    residual row the loop owns."""
    def step(y):
        return y * 1.25 + 0.1 * jnp.sin(y)

    def loss(x, limit):
        _, y = whilst.while_loop(lambda i, y: jnp.sum(y * y) < limit,
                                 lambda i, y: (i + 1, step(y)), [0, x], maximum_iterations=40)
        return jnp.sum(y ** 3)

    module = whilst.compile(jax.grad(loss), spec(), jax.ShapeDtypeStruct((), np.float32)).load()
    counts = set()
    for b in SIZES:
        x = np.linspace(0.2, 1.0, b).astype(np.float32)
        limit = np.float32(10.0)
        y, n = x, 0
        while n < 40 and np.sum(y * y) < limit:
            y, n = np.float32(1.25) * y + np.float32(0.1) * np.sin(y), n + 1
        counts.add(n)

        def unrolled(x, n=n):
            for _ in range(n):
                x = step(x)
            return jnp.sum(x ** 3)
        np.testing.assert_allclose(module(x, limit), jax.grad(unrolled)(x), rtol=1e-5)
    assert len(counts) == len(SIZES)  # a different trip count at each size
