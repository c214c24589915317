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


def test_small_loops_run_whole_in_one_thread_of_a_cuda_kernel(monkeypatch):
    """The quickstart's gradient for llvm-cpu and cuda: its forward While (writing its
    stacks) and its gradient While move into dispatches of their own, as for a CPU, so
    no loop is left for the host to step (no submission or readback per iteration);
    each such cuda dispatch runs in one thread (`_iree_gpu_loop_kernels`: IREE's own
    pipeline fails to compile the gradient's, iree_limits/gpu_loop_dispatch.py). The
    module's CPU code gives `jax.grad` of the loop unrolled in Python. (No time limit
    on the in-dispatch compile here: on a loaded machine it may pass the 60 s after
    which `compile_module` goes on to the host-driven flag sets.)"""
    from iree_limits.gpu_loop_dispatch import quickstart_gradient
    from whilst.lowering import _iree, has_loops_in_dispatch
    from whilst.lowering._iree import (
        LOOPS_IN_DISPATCH, SOURCES_PHASE, _iree_compile, compile_flags, source_for)
    from whilst.lowering._iree_gpu_loop_kernels import (
        SINGLE_THREAD, loop_kernels_single_threaded)
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where

    targets = ("llvm-cpu", "cuda")
    grad, (W, x) = quickstart_gradient()
    text = prepare([whilst.export(grad, W, x, targets=targets)])
    assert loop_costs(compile_to_stream(text, targets)) == []

    flags = [*compile_flags(targets, aggressive_fusion=True), *LOOPS_IN_DISPATCH]
    sources = _iree_compile(source_for(text, flags), [*flags, f"--compile-to={SOURCES_PHASE}"])
    with ir.Context():
        module = ir.Module.parse(sources)
        assert loop_kernels_single_threaded(module) == 2
        kernels = {}
        for variant in ops_where(module, lambda op: op.name == "hal.executable.variant"):
            target = str(variant.attributes["target"]).split('"')[1]
            for f in ops_where(variant, lambda op: op.name == "func.func"):
                if ops_where(f, lambda op: op.name == "scf.while"):
                    kernels.setdefault(target, []).append(
                        str(f.attributes["translation_info"])
                        if "translation_info" in f.attributes else None)
    assert kernels["cuda"] == [SINGLE_THREAD] * 2, kernels
    assert kernels["llvm-cpu"] == [None] * 2, kernels  # llvm-cpu codegen picks its own

    monkeypatch.setattr(_iree, "LOOPS_IN_DISPATCH_SECONDS", None)
    compiled = whilst.compile(grad, W, x, target=list(targets), cache=False)
    assert has_loops_in_dispatch(compiled.flags), compiled.stages[-1][0]
    assert "failed" not in compiled.stages[-1][0], compiled.stages[-1][0]
    steps, y = 0, x.astype(np.float64)
    while True:  # the loop's trip count, from numpy
        y_next = np.tanh(W @ y)
        steps += 1
        if np.abs(y_next - y).max() <= 1e-4 or steps == 100:
            break
        y = y_next

    def unrolled(W, x):
        for _ in range(steps):
            x = jnp.tanh(W @ x)
        return jnp.sum(x ** 2)
    np.testing.assert_allclose(compiled.load().main(W, x), jax.grad(unrolled)(W, x),
                               rtol=1e-5, atol=1e-7)


def test_the_ode_samples_solver_and_its_gradient_leave_no_loop_to_the_host_on_cuda():
    """The ODE sample's loss and gradient (an adaptive Dormand-Prince solver's forward
    and gradient Whiles, over a few numbers each) for cuda: every loop runs inside a
    kernel (on an H200, 0.9 ms a call where the host-stepped loops took 66 ms;
    `bench/gpu_check.py`)."""
    import ode_fit

    fn, args = ode_fit.bench_program()
    text = prepare([whilst.export(fn, *args, targets=("cuda",))])
    assert loop_costs(compile_to_stream(text, ("cuda",))) == []
    assert loop_costs(compile_to_stream(text, ("cuda",), loops_in_dispatch=False))


def test_a_loops_row_writes_run_over_threads_in_cuda_code():
    """IREE 3.13 runs a loop's in-place row write (a scatter at one index, not flagged
    unique) in one cuda thread, element after element; flagged unique in cuda's
    executables (`_iree_gpu_scatters`), it is tiled over threads
    (iree_limits/gpu_serial_scatter.py). The llvm-cpu variants are left as they are,
    and the module still gives the loop's result on the CPU."""
    from iree_limits.gpu_serial_scatter import scatter_configurations, write_rows

    assert scatter_configurations(flagged=False) == [("Distribute", "[1, 1, 1]")]
    assert scatter_configurations(flagged=True) == [("TileAndFuse", "[32, 1, 1]")]

    rows, x0 = np.zeros((3, 64), np.float32), np.linspace(-1.0, 1.0, 64, dtype=np.float32)
    module = whilst.compile(write_rows, rows, x0, np.int32(5),
                            target=["llvm-cpu", "cuda"], cache=False).load()
    want, x = rows.copy(), x0
    for i in range(5):
        x = np.sin(x)
        want[i % 3] = x
    np.testing.assert_allclose(module.main(rows, x0, np.int32(5)), want, rtol=0, atol=1e-6)
