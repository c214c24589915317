"""Exports for GPU targets, checked without a GPU: the stream-phase counts of their
loops for the cuda target (what each emitted iteration costs IREE's GPU drivers:
`whilst.lowering.loop_costs`, `bench/gpu_loop_costs.py`) and their results on the
CPU of the same module. The GPU runs themselves are `bench/gpu_check.py`'s."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering import compile_to_stream, loop_costs, prepare, unroll_factors

pytestmark = pytest.mark.iree


def reference_sin_steps(x, n):
    for _ in range(n):
        x = (np.sin(x) * np.float32(0.9) + np.float32(0.1)).astype(np.float32)
    return x


def tanh_loss(W, x, n):
    """sum of x after n steps of x = tanh(W x) (a 256 x 256 matvec per step)."""
    x = whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.tanh(W @ x)), [0, x],
                          maximum_iterations=64)[1]
    return jnp.sum(x)


def fixed_point(W, x):
    """x <- tanh(W x) until it moves less than 1e-4 (a test on the data)."""
    def body(i, x, dx):
        y = jnp.tanh(W @ x)
        return i + 1, y, jnp.max(jnp.abs(y - x))
    return whilst.while_loop(lambda i, x, dx: dx > 1e-4, body, [0, x, jnp.inf],
                             maximum_iterations=100)[1]


def _tanh_args():
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((256, 256)) / 32).astype(np.float32)
    return W, rng.standard_normal(256).astype(np.float32), np.int32(40)


def _stream_costs(fn, *args, target):
    text = prepare([whilst.export(fn, *args, targets=(target,))])
    return unroll_factors(text), loop_costs(compile_to_stream(text, (target,)))


def test_gpu_exports_run_more_steps_per_emitted_iteration():
    """A GPU pays a command submission per emitted iteration (tens of microseconds),
    so the tanh loop and its gradient While run several steps per iteration in a
    cuda export, one in an llvm-cpu export; each iteration is one submission that
    reads nothing back."""
    grad = jax.grad(tanh_loss)
    cpu_unroll, _ = _stream_costs(grad, *_tanh_args(), target="llvm-cpu")
    gpu_unroll, costs = _stream_costs(grad, *_tanh_args(), target="cuda")
    assert cpu_unroll == [1, 1]
    assert all(k >= 4 for k in gpu_unroll), gpu_unroll
    for loop in costs:
        assert loop["submissions"] == 1 and loop["readbacks"] == 0, costs
        assert loop["host_waits"] == 0, costs


def test_a_data_dependent_loop_reads_its_test_back_once_per_emitted_iteration():
    """The fixed-point loop's test reads the data: one readback per emitted
    iteration (around which IREE splits the iteration's work into at most three
    submissions), of many steps in a cuda export."""
    W, x, _ = _tanh_args()
    unroll, costs = _stream_costs(fixed_point, W * 0.5, x, target="cuda")
    (loop,) = costs
    assert unroll[0] >= 8, unroll
    assert loop["readbacks"] == 1 and loop["submissions"] <= 3, costs


@pytest.mark.parametrize("unroll", [None, 64])
def test_gpu_exports_unroll_at_most_16_steps_with_the_same_results(unroll):
    """IREE 3.13's cuda code of the sin loop unrolled 32 or 64 times is wrong
    (iree_limits/gpu_pick_reduction.py), so GPU exports run at most 16 steps
    per emitted iteration, an explicit `unroll=` included (the CPU export keeps
    64); the module compiled for the CPU and cuda gives the Python loop's result
    before, at and after one full iteration."""
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)

    def fn(x, n):
        return whilst.while_loop(lambda i, x: i < n,
                                 lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1), [0, x],
                                 unroll=unroll)[1]
    args = (x, np.int32(10_000))
    assert unroll_factors(whilst.export(fn, *args).text) == [64]
    assert unroll_factors(whilst.export(fn, *args, targets=("cuda",)).text) == [16]
    module = whilst.compile(fn, *args, target=["llvm-cpu", "cuda"]).load()
    for n in (0, 1, 5, 15, 16, 17, 100, 1000):
        np.testing.assert_allclose(module.main(x, np.int32(n)), reference_sin_steps(x, n),
                                   rtol=0, atol=1e-6)
