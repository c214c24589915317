"""Loops compiled by IREE (llvm-cpu) and run by the embedded runtime give the answers of
plain Python / numpy loops, and keep loop-carried buffers in place."""
import collections
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import REPO, host_driven_stream, op_names, unrolled
from whilst._compile import FALLBACK_NOTE
from iree_limits.reproduce import recording_cg  # the reproducer's program, shared
from whilst.lowering import loop_counts, prepare, stream_copy_sizes

pytestmark = pytest.mark.iree


Particle = collections.namedtuple("Particle", "pos, vel")


def run_on_iree(fn, *args):
    return whilst.compile(fn, *args).load()(*args)


def sine_map(x):
    return whilst.while_loop(lambda i, x: i < 100, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                             [0, x])


def collatz(n):
    return whilst.while_loop(lambda n, s: n != 1,
                             lambda n, s: (jnp.where(n % 2 == 0, n // 2, 3 * n + 1), s + 1),
                             [n, 0])


def bouncing(p0, v0):
    def body(t, p):
        vel = jnp.where(p.pos + p.vel * 0.1 < 0.0, -p.vel * 0.8, p.vel - 0.98)
        return t + 1, Particle(jnp.maximum(p.pos + vel * 0.1, 0.0), vel)
    return whilst.while_loop(lambda t, p: jnp.any(jnp.abs(p.vel) > 0.5), body,
                             [0, Particle(p0, v0)], maximum_iterations=500)


def power_iteration(A):
    def body(i, v, lam, delta):
        w = A @ v
        w = w / jnp.linalg.norm(w)
        new_lam = w @ A @ w
        return i + 1, w, new_lam, jnp.abs(new_lam - lam)
    n = A.shape[0]
    return whilst.while_loop(lambda i, v, lam, d: d > 1e-6, body,
                             [0, jnp.ones(n) / jnp.sqrt(n), 0.0, jnp.inf],
                             maximum_iterations=1000)


def nested(x):
    def outer(i, acc):
        inner = whilst.while_loop(lambda j, s: j <= i, lambda j, s: (j + 1, s + j * x), [0, 0.0])
        return i + 1, acc + inner[1]
    return whilst.while_loop(lambda i, a: i < 6, outer, [0, 0.0])


def test_sine_map():
    i, y = run_on_iree(sine_map, np.ones(64, np.float32))
    ref = np.ones(64, np.float32)
    for _ in range(100):
        ref = np.sin(ref) * np.float32(0.9) + np.float32(0.1)
    assert int(i) == 100
    np.testing.assert_allclose(y, ref, rtol=1e-5)


def test_collatz():
    module = whilst.compile(collatz, np.int32(27)).load()
    for n in [1, 7, 27, 97]:
        steps, ref = 0, n
        while ref != 1:
            ref, steps = (ref // 2 if ref % 2 == 0 else 3 * ref + 1), steps + 1
        assert int(module(np.int32(n))[1]) == steps


def test_namedtuple_bouncing_ball():
    args = (np.float32(10.0), np.float32(0.0))
    t, p = run_on_iree(bouncing, *args)
    ref_t, ref_p = bouncing(*args)
    assert int(t) == int(ref_t)
    assert type(p).__name__ == "Particle"
    np.testing.assert_allclose([p.pos, p.vel], [ref_p.pos, ref_p.vel], rtol=1e-4, atol=1e-5)


def test_power_iteration():
    rng = np.random.RandomState(0)
    B = rng.randn(6, 6).astype(np.float32)
    A = B @ B.T
    i, v, lam, _ = run_on_iree(power_iteration, A)
    assert np.isclose(lam, np.linalg.eigvalsh(A)[-1], rtol=1e-4)
    assert 0 < int(i) < 1000


def test_nested_loops():
    i, acc = run_on_iree(nested, np.float32(0.5))
    assert float(acc) == pytest.approx(0.5 * sum(sum(range(k + 1)) for k in range(6)))


def test_vmapped_loop_with_per_example_trip_counts():
    ns = np.array([1, 6, 27, 97], np.int32)
    _, steps = run_on_iree(jax.vmap(collatz), ns)
    np.testing.assert_array_equal(steps, np.asarray(jax.vmap(collatz)(ns)[1]))


def test_gradient_runs_on_iree():
    rng = np.random.RandomState(1)
    W = (rng.randn(8, 8) * 0.3).astype(np.float32)
    x0 = rng.randn(8).astype(np.float32)

    def loss(W, x):
        out = whilst.while_loop(lambda i, x: jnp.sum(x * x) > 1e-3, lambda i, x: (i + 1, jnp.tanh(W @ x)),
                                [0, x], maximum_iterations=40)
        return jnp.sum(out[1])

    def loss_unrolled(W, x):
        i = 0
        while i < 40 and jnp.sum(x * x) > 1e-3:
            x, i = jnp.tanh(W @ x), i + 1
        return jnp.sum(x)

    got = run_on_iree(jax.grad(loss, argnums=(0, 1)), W, x0)
    want = jax.grad(loss_unrolled, argnums=(0, 1))(W, x0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def two_row_writers(x):
    def body(i, a, b):
        return i + 1, a.at[i].set(x * i), b.at[i].set(x + i)
    zeros = jnp.zeros((ROWS, WIDTH))
    return whilst.while_loop(lambda i, a, b: i < ROWS, body, [0, zeros, zeros])


def scan_with_equal_inits(xs):
    def step(c, x):
        a, b = c
        return (a.at[0].add(x), b.at[1].add(x * 0.5)), x * 2.0
    zeros = jnp.zeros((ROWS, WIDTH))
    return jax.lax.scan(step, (zeros, zeros), xs)


def test_loop_variables_starting_from_one_value_stay_separate():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, a, b = run_on_iree(two_row_writers, np.ones(WIDTH, np.float32))
        (c, d), ys = run_on_iree(scan_with_equal_inits, np.ones((5, WIDTH), np.float32))
    rows = np.arange(ROWS, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(a, np.broadcast_to(rows, (ROWS, WIDTH)))
    np.testing.assert_array_equal(b, np.broadcast_to(1 + rows, (ROWS, WIDTH)))
    np.testing.assert_array_equal(c[0], 5.0)
    np.testing.assert_array_equal(d[1], 2.5)
    np.testing.assert_array_equal(ys, np.full((5, WIDTH), 2.0))
    assert np.all(c[1:] == 0) and np.all(d[0] == 0) and np.all(d[2:] == 0)


def test_export_of_one_loop_has_one_stablehlo_while():
    text = whilst.export(sine_map, np.ones(4, np.float32)).text
    assert text.count("stablehlo.while") == 1
    assert 'whilst.role = "forward"' in text and 'whilst.name = "while"' in text


ROWS, WIDTH = 1000, 64


def row_writer(x):
    def body(i, x, buf):
        return i + 1, jnp.sin(x) * 0.9 + 0.1, buf.at[i].set(x)
    return whilst.while_loop(lambda i, x, b: i < ROWS, body, [0, x, jnp.zeros((ROWS, WIDTH))])


def pushing_loss(x):
    out = whilst.while_loop(lambda i, x: i < ROWS, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                            [0, x], maximum_iterations=ROWS)
    return jnp.sum(out[1])


@pytest.mark.parametrize("fn, shape", [
    (row_writer, (WIDTH,)), (jax.grad(pushing_loss), (WIDTH,)), (two_row_writers, (WIDTH,)),
    (scan_with_equal_inits, (5, WIDTH))],
    ids=["row_writer", "accumulators_and_gradient_while", "two_carries_from_one_value",
         "scan_with_equal_inits"])
def test_loop_carried_buffers_are_not_copied_per_iteration(fn, shape):
    text = prepare([whilst.export(fn, np.ones(shape, np.float32))])
    assert text.count("stream.affinity") == 1
    sizes = stream_copy_sizes(host_driven_stream(text))
    full_buffer = ROWS * WIDTH * 4
    assert all(s is not None and s < full_buffer for s in sizes), sizes


def test_the_check_sees_copies_when_the_device_is_not_named():
    from whilst.lowering._iree_ir import ir

    text = prepare([whilst.export(row_writer, np.ones(WIDTH, np.float32))])
    with ir.Context():
        module = ir.Module.parse(text)
        (main,) = module.body.operations
        del main.attributes["stream.affinity"]
        unpinned = str(module)
    assert any(s is not None and s >= ROWS * WIDTH * 4
               for s in stream_copy_sizes(host_driven_stream(unpinned)))


def test_cond_on_a_value_the_body_recomputes_from_a_tensor():
    # The usual convergence test: the tested carry is recomputed from scratch each
    # step and never read by the body (IREE 3.13 crashed on this loop shape).
    def f(v):
        return whilst.while_loop(lambda v, total: total < 500.0,
                                 lambda v, total: (v * 2.0, jnp.sum(v)), [v, 0.0])

    v = np.ones(6, np.float32)
    got_v, got_total = run_on_iree(f, v)
    ref_v, ref_total = v, 0.0
    while ref_total < 500.0:
        ref_v, ref_total = ref_v * 2.0, ref_v.sum()
    np.testing.assert_allclose(got_v, ref_v)
    assert float(got_total) == ref_total


def _second(x, **options):
    return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x),
                             [0, x], **options)[1]


def _second_unrolled(x):
    return unrolled(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x), [0, x])[1]


def test_second_derivatives_of_a_loop_without_bound_run():
    # Forward over reverse runs on IREE with the default budget; when loops carried
    # their test as an int32 (commit 1c4c2ff), IREE 3.13's module of such a program
    # failed at run time ("indirect buffer reference slot 0 is out range").
    x = np.float32(0.8)
    want = jax.grad(jax.grad(_second_unrolled))(x)
    hvp = lambda x: jax.jvp(jax.grad(_second), (x,), (np.float32(1),))[1]
    np.testing.assert_allclose(run_on_iree(hvp, x), want, rtol=1e-5)
    # Reverse over reverse nests the chunked budget's loops in loop bodies; iree-compile
    # 3.13 failed on them ("failed to solve for timepoint coverage") until loop results
    # went behind an optimization barrier.
    np.testing.assert_allclose(run_on_iree(jax.grad(jax.grad(_second)), x), want, rtol=1e-5)
    bounded = functools.partial(_second, maximum_iterations=8)
    np.testing.assert_allclose(run_on_iree(jax.grad(jax.grad(bounded)), x), want, rtol=1e-5)


def test_readme_example_runs():
    import re

    readme = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    W, x = namespace["W"], namespace["x"]
    got = whilst.runtime.load(namespace["module"].data).main(W, x)
    np.testing.assert_allclose(got, namespace["grad_W"], rtol=1e-5, atol=1e-7)


def predator_prey(y, n):
    """Euler steps of a 2-species system written as users write small states: the
    state's elements picked apart, restacked with jnp.stack, and a step kept or
    halved by jnp.where on a scalar flag."""
    def body(i, y):
        prey, predator = y[0], y[1]
        f = jnp.stack([1.1 * prey - 0.4 * prey * predator,
                       0.1 * prey * predator - 0.4 * predator])
        y_next = y + 0.01 * f
        return i + 1, jnp.where(jnp.sum(f * f) < 1e4, y_next, y * 0.5)
    return whilst.while_loop(lambda i, y: i < n, body, [0, y], unroll=1)


def predator_prey_oracle(y, n):
    y = np.asarray(y, np.float32)
    for _ in range(n):
        f = np.array([1.1 * y[0] - 0.4 * y[0] * y[1], 0.1 * y[0] * y[1] - 0.4 * y[1]],
                     np.float32)
        y = y + np.float32(0.01) * f if np.sum(f * f) < 1e4 else y * np.float32(0.5)
    return y


def test_small_state_steps_fuse_and_read_nothing_back():
    """IREE 3.13 would read the scalar flag back to the host every step and give each
    stacked element its own dispatch and copy; after preparation
    (`_iree_fusion.fusible_small_tensor_code`) each iteration runs at most 3
    dispatches and reads nothing back (the loop is tested `i < n`, so it is bounded
    by its trip count: its test is not read back either)."""
    y0 = np.array([10.0, 5.0], np.float32)
    exported = whilst.export(predator_prey, y0, np.int32(0))
    ((loads, dispatches),) = loop_counts(host_driven_stream(prepare([exported])))
    assert loads == 0 and dispatches <= 3, (loads, dispatches)
    module = whilst.compile(exported).load()
    for n in [0, 1, 7, 300]:
        np.testing.assert_allclose(module.main(y0, np.int32(n))[1], predator_prey_oracle(y0, n),
                                   rtol=1e-4)


def test_preparation_keeps_large_selects_and_concatenates():
    """Only small tensors are rewritten: a select of a large array by a scalar flag
    stays a choice of buffers, and a large concatenate stays one."""
    from whilst.lowering._iree_ir import ir

    def f(flag, a, b):
        return jnp.where(flag, a, b), jnp.stack([a, b])

    big = np.zeros(4096, np.float32)   # past the stacks exported as selects (_stacked_lines)
    text = prepare([whilst.export(f, np.bool_(True), big, big)])
    ops = []
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        module.operation.walk(lambda op: ops.append(op.operation) or ir.WalkResult.ADVANCE)
        predicates = [ir.RankedTensorType(op.operands[0].type).rank for op in ops
                      if op.name == "stablehlo.select"]
        assert predicates == [0]
        assert "stablehlo.concatenate" in [op.name for op in ops]


def test_results_computed_from_constants_alone():
    """A table returned beside a loop's result (iree_limits/computed_constant_result.mlir
    failed to compile before preparation copied such results), a reduction of
    constants, and the counter of a loop of constant trip count whose other carry
    reads an argument (IREE evaluates that counter at compile time)."""
    def fn(x):
        n, y = whilst.while_loop(lambda i, y: y < 10.0, lambda i, y: (i + 1, y * 2.0), [0, x])
        count, z = whilst.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z + x), [0, x])
        return (y, jnp.linspace(0.0, 1.0, 5), jnp.arange(4) * 3, jnp.sum(jnp.arange(5.0) ** 2),
                count, z)
    y, table, steps, total, count, z = whilst.compile(fn, np.float32(1.5)).load()(
        np.float32(1.5))
    assert y == 12.0
    np.testing.assert_array_equal(table, np.linspace(0.0, 1.0, 5).astype(np.float32))
    np.testing.assert_array_equal(steps, np.arange(4) * 3)
    assert total == 30.0 and count == 3 and z == 6.0


def test_constant_expressions_are_computed_at_load_not_by_iree_constant_evaluation():
    """iree-compile runs without constant evaluation (compile time): an expression of
    constants alone that IREE does not fold (a cumsum: a table the loop reads) stays, after
    global optimization, in an initializer that runs when the module loads (constant
    evaluation would have replaced it by its value), and the results are right."""
    from whilst.lowering import flag_sets, has_loops_in_dispatch
    from whilst.lowering._iree import NO_CONST_EVAL

    assert all(NO_CONST_EVAL in flags for targets in (("llvm-cpu",), ("llvm-cpu", "cuda"))
               for flags in flag_sets(targets))

    def fn(x):
        table = jnp.cumsum(jnp.arange(8, dtype=jnp.float32)) / 10.0
        return whilst.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * table + 1.0),
                                 [0, x])[1]
    x = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    from iree.compiler import tools
    host_driven = next(f for f in flag_sets(("llvm-cpu",)) if not has_loops_in_dispatch(f))
    flags = [*host_driven, "--compile-to=global-optimization"]
    folded = tools.compile_str(prepare([whilst.export(fn, x)]), extra_args=flags).decode()
    assert "util.initializer" in op_names(folded)
    want = x
    for _ in range(3):
        want = want * (np.cumsum(np.arange(8, dtype=np.float32)) / 10.0) + 1.0
    np.testing.assert_allclose(whilst.compile(fn, x).load()(x), want, rtol=1e-6)


def sin_steps(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                             [0, x], maximum_iterations=1000)


def test_unrolled_steps_fuse_across_steps():
    """With IREE 3.13's default fusion each unrolled step of a tiny body costs about a
    dispatch (64 steps of x = sin(x)*0.9 + 0.1: 59 dispatches per emitted iteration;
    their push/pop gradient: 101 in the forward While); whilst compiles llvm-cpu
    modules with aggressive fusion, which fuses across steps (23 and 26)."""
    from whilst.lowering import unroll_factors

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    forward = whilst.export(sin_steps, x, np.int32(0))
    grad = whilst.export(jax.grad(lambda x, n: jnp.sum(sin_steps(x, n)[1])), x, np.int32(0))
    for exported in (forward, grad):
        ks = unroll_factors(exported.text)
        loops = loop_counts(host_driven_stream(prepare([exported])))
        assert min(ks) >= 32 and len(loops) == len(ks), (ks, loops)
        assert loops[0][1] <= ks[0] // 2, (ks, loops)  # the forward While
    forward_module, grad_module = whilst.compile(forward).load(), whilst.compile(grad).load()
    for n in [0, 1, 63, 64, 65, 200, 1000]:
        want = x
        for _ in range(n):
            want = np.sin(want) * np.float32(0.9) + np.float32(0.1)
        np.testing.assert_allclose(forward_module.main(x, np.int32(n))[1], want,
                                   rtol=1e-5, atol=1e-6)
        if n <= 200:
            def unrolled_loss(x):
                for _ in range(n):
                    x = jnp.sin(x) * 0.9 + 0.1
                return jnp.sum(x)
            np.testing.assert_allclose(grad_module.main(x, np.int32(n)),
                                       jax.grad(unrolled_loss)(x), rtol=1e-5, atol=1e-6)


def test_gradient_reading_recorded_elements_after_dot_products():
    """The gradient While reads `h_bar[k + 1]` (a one-element gather) and adds it to
    a dot product of the same step: with aggressive fusion, IREE put both into one
    dispatch its codegen failed on (iree_limits/reproduce.py
    point_gather_after_dot). Preparation fences such elements off their users with
    an optimization barrier; the module compiles with aggressive fusion, reads
    nothing back in its gradient While (a dynamic_slice, the form before, read
    back its position every step), and equals jax.grad of the unrolled loop."""
    loss, A, b = recording_cg(64)
    exported = whilst.export(jax.grad(loss, argnums=(0, 1)), A, b)
    assert "stablehlo.gather" in op_names(exported.text)
    prepared = prepare([exported])
    assert op_names(prepared).count("stablehlo.optimization_barrier") >= 1
    (_, _), (gradient_loads, _) = loop_counts(host_driven_stream(prepared))
    assert gradient_loads == 0
    compiled = whilst.compile(exported)
    assert FALLBACK_NOTE not in compiled.stages[-1][0], compiled.stages
    got = compiled.load().main(A, b)
    want = jax.grad(lambda A, b: loss(A, b, loop=unrolled), argnums=(0, 1))(A, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)


def test_one_element_gathers_clamp_or_fill_as_in_jax():
    """`A.at[i, j].get(mode="fill")` exports as a one-element gather, which preparation
    fences off its users: positions in and out of range give JAX's answers."""
    def read(A, i, j):
        return A.at[i, j].get(mode="fill", fill_value=-1.0), A.at[i].get(mode="clip")

    A = np.arange(12, dtype=np.float32).reshape(3, 4)
    exported = whilst.export(read, A, np.int32(0), np.int32(0))
    assert "stablehlo.gather" in op_names(exported.text)
    assert "stablehlo.optimization_barrier" in op_names(prepare([exported]))
    module = whilst.compile(exported).load()
    for i, j in [(0, 0), (2, 3), (1, 2), (-1, -2), (5, 7), (-7, 1), (1, 100)]:
        got = module.main(A, np.int32(i), np.int32(j))
        for g, w in zip(got, jax.jit(read)(A, i, j)):
            np.testing.assert_array_equal(g, w)


def test_modules_without_aggressive_fusion_lose_the_gathers_fences():
    """`unfenced` (what `compile_module` compiles without aggressive fusion) removes
    the barriers preparation put after one-element gathers, and only those."""
    from whilst.lowering._iree_fusion import unfenced

    def read(A, i, j):
        return (A.at[i, j].get(mode="fill", fill_value=-1.0) * 2.0,
                jax.lax.optimization_barrier(A[0] + 1.0))

    A = np.arange(12, dtype=np.float32).reshape(3, 4)
    prepared = prepare([whilst.export(read, A, np.int32(0), np.int32(0))])
    names = op_names(unfenced(prepared))
    assert op_names(prepared).count("stablehlo.optimization_barrier") == 2
    assert names.count("stablehlo.optimization_barrier") == 1
    assert names.count("stablehlo.gather") == op_names(prepared).count("stablehlo.gather") >= 1
