"""Loops exported with a symbolic batch dimension, compiled once by IREE (llvm-cpu) and
run at several batch sizes, give the answers of plain numpy loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering import CompileError

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
    return whilst.compile(jax.vmap(grow), spec(), spec(), cache=False).load()


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
    module = whilst.compile(jax.vmap(newton_sqrt), spec(), cache=False).load()
    for b in SIZES:
        values = np.geomspace(0.5, 900.0, b).astype(np.float32)
        counts, (root, _) = module(values)
        want_counts, want = newton_oracle(values)
        np.testing.assert_array_equal(counts, want_counts)
        np.testing.assert_allclose(root, want, rtol=1e-5)
        np.testing.assert_allclose(root, np.sqrt(values), rtol=1e-4)


def test_gradient_over_symbolic_batch_is_refused_before_iree():
    loss = jax.grad(lambda xs, ls: jnp.sum(jax.vmap(grow)(xs, ls)[1] ** 2))
    with pytest.raises(CompileError, match=r"residual rows with symbolic dimensions.*IREE 3.13"):
        whilst.compile(loss, spec(), spec(), cache=False)
