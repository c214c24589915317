"""whilst.TensorArray on IREE: a loop that writes one element per step, its gradient
and its vmap (a trip count per example), compiled for llvm-cpu and run by the embedded
runtime, give the answers of a plain numpy loop and of `jax.grad` of the preallocated
program, and the writes stay in place (no copy of the array's buffer in the stream
phase)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import host_driven_stream, pushing_loop, vulkan_or_skip
from whilst import TensorArray
from whilst.lowering import prepare, stream_copy_sizes

pytestmark = pytest.mark.iree

ROWS, WIDTH = 64, 32


def emit(x, scale):
    """Rows h <- tanh(scale * h + 0.1) while max(h) < 0.9 (at most ROWS), each h written
    to a dynamic TensorArray; the rows, their count, and a loss of the rows."""
    ta = TensorArray(jnp.float32, size=0, dynamic_size=True, element_shape=(WIDTH,))

    def body(i, ta, h):
        h = jnp.tanh(scale * h + 0.1)
        return i + 1, ta.write(i, h), h
    _, ta, _ = whilst.while_loop(lambda i, ta, h: jnp.max(h) < 0.9, body, [0, ta, x],
                                 maximum_iterations=ROWS)
    rows = ta.stack()
    return rows, ta.size(), jnp.sum(rows * jnp.arange(ROWS, dtype=jnp.float32)[:, None])


def emit_and_gradient(x, scale):
    rows, size, _ = emit(x, scale)
    return rows, size, jax.grad(lambda x, s: emit(x, s)[2], (0, 1))(x, scale)


def emit_numpy(x, scale):
    rows, h = np.zeros((ROWS, WIDTH), np.float32), x
    n = 0
    while n < ROWS and h.max() < 0.9:
        h = np.tanh(scale * h + np.float32(0.1))
        rows[n] = h
        n += 1
    return rows, n


def loss_preallocated(x, scale, n):
    rows, h = jnp.zeros((ROWS, WIDTH), jnp.float32), x
    for i in range(n):
        h = jnp.tanh(scale * h + 0.1)
        rows = rows.at[i].set(h)
    return jnp.sum(rows * jnp.arange(ROWS, dtype=jnp.float32)[:, None])


X = np.linspace(-0.5, 0.2, WIDTH, dtype=np.float32)
SCALE = np.float32(1.6)


XS = np.stack([X, X - 0.4, X + 0.3])  # a trip count per example under vmap


def emit_each(xs, scale):
    return jax.vmap(lambda x: emit(x, scale)[:2])(xs)


@pytest.fixture(scope="module")
def exported():
    return [whilst.export(emit_and_gradient, X, SCALE, name="emit_and_gradient"),
            whilst.export(emit_each, XS, SCALE, name="emit_each")]


@pytest.fixture(scope="module")
def module(exported):
    return whilst.compile(exported).load()


def test_loop_writing_one_element_per_step_runs_on_iree(module):
    rows, size, (grad_x, grad_scale) = module.emit_and_gradient(X, SCALE)
    want_rows, n = emit_numpy(X, SCALE)
    assert 3 < n < ROWS and int(size) == n
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-6)
    want_x, want_scale = jax.grad(loss_preallocated, (0, 1))(X, SCALE, n)
    np.testing.assert_allclose(grad_x, want_x, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grad_scale, want_scale, rtol=1e-4)


def test_vmapped_loops_stop_per_example_on_iree(module):
    rows, sizes = module.emit_each(XS, SCALE)
    want = [emit_numpy(x, SCALE) for x in XS]
    assert len({n for _, n in want}) == 3 and sizes.tolist() == [n for _, n in want]
    for got, (want_rows, _) in zip(rows, want):
        np.testing.assert_allclose(got, want_rows, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", [0, 1], ids=["with_gradient", "vmapped"])
def test_writes_stay_in_place(exported, which):
    sizes = stream_copy_sizes(host_driven_stream(prepare([exported[which]])))
    buffer_bytes = ROWS * WIDTH * 4
    assert all(s is not None and s < buffer_bytes for s in sizes), sizes


@pytest.mark.parametrize("target, driver", [("llvm-cpu", "local-sync"),
                                            ("vulkan-spirv", "vulkan")])
def test_nested_loops_pushing_onto_lists_and_their_gradient_on_iree(target, driver):
    """TensorFlow's testThreeNestWithLists (tests/ir/test_higher_order.py): three
    nested loops counted by `i < 2`, each pushing onto a dynamic TensorArray sized
    by that trip count; the gradient runs on IREE as `jax.grad` of the loops
    unrolled in Python computes it."""
    if driver == "vulkan":
        vulkan_or_skip()
    nest, oracle = (pushing_loop(pushing_loop(pushing_loop(jnp.sin, loop), loop), loop)
                    for loop in (True, False))
    x = np.float32(0.7)
    module = whilst.compile(jax.grad(nest), x, target=target).load(driver)
    np.testing.assert_allclose(module.main(x), jax.grad(oracle)(x), rtol=1e-5)
