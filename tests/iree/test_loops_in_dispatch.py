"""Loops over a few numbers compiled for llvm-cpu (by default) run whole inside one
dispatch (`whilst.lowering._iree_loops_in_dispatch`): no loop is left for the host
to step, and every program gives its plain Python loop's results, on both CPU
drivers. Wide loops, large states and modules for other targets
keep host-driven loops, beside small loops in dispatches in the same module."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import nested_sin_loop, unrolled
from whilst.lowering import (
    compile_to_stream, flag_sets, has_loops_in_dispatch, loop_costs, prepare, source_for)

pytestmark = pytest.mark.iree

f32, i32, u32 = np.float32, np.int32, np.uint32
TABLE = np.linspace(1.0, 1.5, 6, dtype=f32)


def newton_sqrt(a):
    """x <- (x + a / x) / 2 until |x * x - a| <= 1e-5 a (at most 50 steps)."""
    return jax.lax.while_loop(
        lambda c: (jnp.abs(c[0] * c[0] - a) > 1e-5 * a) & (c[1] < 50),
        lambda c: ((c[0] + a / c[0]) / 2, c[1] + 1), (a, 0))


def newton_sqrt_python(a):
    x, steps = np.float32(a), 0
    while abs(x * x - a) > np.float32(1e-5) * a and steps < 50:
        x, steps = (x + a / x) / np.float32(2), steps + 1
    return x, steps


def collatz(n):
    """Steps of the Collatz map to 1, and whether an odd number above n was met."""
    return whilst.lax.while_loop(
        lambda c: c[0] != 1,
        lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[1] + 1,
                   c[2] | ((c[0] % 2 == 1) & (c[0] > n))), (n, 0, False))


def collatz_python(n):
    m, steps, odd_above = int(n), 0, False
    while m != 1:
        odd_above = odd_above or (m % 2 == 1 and m > n)
        m, steps = (m // 2 if m % 2 == 0 else 3 * m + 1), steps + 1
    return m, steps, odd_above


def xorshift(x, n):
    """n rounds of xorshift32 on an unsigned state."""
    def body(i, x):
        x = x ^ (x << 13)
        x = x ^ (x >> 17)
        return x ^ (x << 5)
    return whilst.lax.fori_loop(0, n, body, x)


def xorshift_python(x, n):
    x = np.array(x, u32)
    for _ in range(int(n)):
        x = x ^ (x << u32(13))
        x = x ^ (x >> u32(17))
        x = x ^ (x << u32(5))
    return x


def grow(m, limit):
    """m <- m @ [[1, 1], [0, 1]] * TABLE[i % 6] until its largest entry passes limit."""
    def body(c):
        m, i = c
        return m @ jnp.array([[1.0, 1.0], [0.0, 1.0]], f32) * jnp.asarray(TABLE)[i % 6], i + 1
    return jax.lax.while_loop(lambda c: jnp.max(c[0]) <= limit, body, (m, 0))


def grow_python(m, limit):
    m, i = np.array(m, f32), 0
    while m.max() <= limit:
        m, i = m @ np.array([[1.0, 1.0], [0.0, 1.0]], f32) * TABLE[i % 6], i + 1
    return m, i


def nested(y, n, scale):
    """n outer steps, each halving y then doubling it while its sum is below `scale`."""
    def inner(y):
        return jax.lax.while_loop(lambda y: jnp.sum(y) < scale, lambda y: y * 2.0, y)
    return whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, inner(y * 0.5) + 0.1),
                             [0, y])[1]


def nested_python(y, n, scale):
    y = np.array(y, f32)
    for _ in range(int(n)):
        y = y * f32(0.5)
        while y.sum() < scale:
            y = y * f32(2.0)
        y = y + f32(0.1)
    return y


CASES = {  # name -> (fn, example args, [(args, oracle's results)])
    "newton_sqrt": (newton_sqrt, (f32(2.0),),
                    [((f32(a),), newton_sqrt_python(f32(a))) for a in (2.0, 1.0, 1e4)]),
    "collatz": (collatz, (i32(6),), [((i32(n),), collatz_python(n)) for n in (6, 1, 27)]),
    "xorshift": (xorshift, (np.ones(3, u32), i32(5)),
                 [((np.array([1, 7, 2 ** 31], u32), i32(n)),
                   (xorshift_python([1, 7, 2 ** 31], n),)) for n in (0, 5, 100)]),
    "grow": (grow, (np.eye(2, dtype=f32), f32(10.0)),
             [((np.eye(2, dtype=f32) * s, f32(limit)), grow_python(np.eye(2) * s, limit))
              for s, limit in [(1.0, 10.0), (0.5, 1e3), (20.0, 10.0)]]),
    "nested": (nested, (np.ones(3, f32), i32(4), f32(5.0)),
               [((np.array(y, f32), i32(n), f32(s)), (nested_python(y, n, s),))
                for y, n, s in [([1, 2, 3], 4, 5.0), ([0.1, 0.2, 0.1], 7, 3.0),
                                ([1, 1, 1], 0, 2.0)]]),
}


@pytest.fixture(scope="module")
def compiled():
    exports = [whilst.export(fn, *args, name=name) for name, (fn, args, _) in CASES.items()]
    return prepare(exports), whilst.compile(exports)


def test_small_loops_leave_no_loop_for_the_host(compiled):
    text, module = compiled
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    assert loop_costs(compile_to_stream(text)) == []
    assert loop_costs(compile_to_stream(text, loops_in_dispatch=False)) != []


@pytest.mark.parametrize("driver", ["local-sync", "local-task"])
@pytest.mark.parametrize("name", CASES)
def test_small_loops_in_a_dispatch_match_python(compiled, name, driver):
    run = compiled[1].load(driver)[name]
    for args, want in CASES[name][2]:
        got = jax.tree_util.tree_leaves(run(*args))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if np.asarray(w).dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-5)
            else:
                np.testing.assert_array_equal(g, w)


def in_dispatch_form(fn, *args, targets=("llvm-cpu",)):
    """The module text whilst tries first for `targets` with loops in dispatches, or
    None where it has no such flag set or no loop qualifies."""
    sets = [f for f in flag_sets(targets) if has_loops_in_dispatch(f)]
    return sets and source_for(prepare([whilst.export(fn, *args)]), sets[0])


def test_wide_loops_and_large_states_stay_on_the_host():
    def sines(x, n):  # whilst unrolls it: 16 steps over 64 floats per iteration
        return whilst.lax.while_loop(lambda c: c[0] < n,
                                     lambda c: (c[0] + 1, jnp.sin(c[1]) * 0.9 + 0.1), (0, x))[1]

    assert in_dispatch_form(sines, np.ones(64, f32), i32(3)) is None
    assert in_dispatch_form(sines, np.ones(4, f32), i32(3)) is not None
    big_state = lambda x: jax.lax.while_loop(lambda x: x[0] < 1.0, lambda x: x + 0.1, x)
    assert in_dispatch_form(big_state, np.zeros(2048, f32)) is None
    assert in_dispatch_form(big_state, np.zeros(8, f32)) is not None


def test_only_modules_for_llvm_cpu_and_cuda_run_loops_in_dispatches():
    """cuda runs such a dispatch in one thread (test_gpu_exports.py); Vulkan and ROCm
    step every loop from the host."""
    loop = lambda x: jax.lax.while_loop(lambda x: x < 1.0, lambda x: x + 0.1, x)
    for targets in [("llvm-cpu", "cuda"), ("cuda",)]:
        assert in_dispatch_form(loop, f32(0.0), targets=targets)
    for targets in [("llvm-cpu", "vulkan-spirv"), ("vulkan-spirv",), ("rocm",)]:
        assert not in_dispatch_form(loop, f32(0.0), targets=targets)


def sines(x, n):
    """n steps of x <- sin(x) * 0.9 + 0.1 (whilst unrolls it)."""
    return whilst.lax.while_loop(lambda c: c[0] < n,
                                 lambda c: (c[0] + 1, jnp.sin(c[1]) * 0.9 + 0.1), (0, x))[1]


def sines_numpy(x, n):
    for _ in range(n):
        x = np.sin(x) * f32(0.9) + f32(0.1)
    return x


def test_a_wide_loop_stays_on_the_host_beside_a_small_loop_in_a_dispatch():
    """One module, one function with both: the wide loop is stepped from the host,
    the small one runs in a dispatch, and both give numpy's results."""
    both = lambda wide, small, n: (sines(wide, n), sines(small, n))   # noqa: E731
    args = (np.linspace(-1, 1, 64, dtype=f32), np.linspace(0, 1, 4, dtype=f32))
    module = whilst.compile(both, *args, i32(3))
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    assert len(loop_costs(compile_to_stream(prepare([whilst.export(both, *args, i32(3))])))) == 1
    run = module.load()
    for n in [0, 1, 5, 37]:
        for got, x in zip(run.main(*args, i32(n)), args):
            np.testing.assert_allclose(got, sines_numpy(x, n), rtol=1e-5, atol=1e-6)


def test_a_gradient_runs_its_forward_and_gradient_whiles_in_dispatches():
    """jax.grad of a loop with a data-dependent stop: the forward While (a few
    numbers, and 40 rows it writes in place) and the gradient While move, no loop
    is left for the host; the gradient is `jax.grad` of the loop unrolled in Python."""
    def loss(x, a):
        return jnp.sum(whilst.lax.while_loop(lambda c: c[1][0] < 10.0,
                                             lambda c: (c[0] + 1, c[1] * a + 0.1),
                                             (0, x), maximum_iterations=40)[1])

    def unrolled_loss(x, a):
        while x[0] < 10.0:
            x = x * a + 0.1
        return jnp.sum(x)

    grad = jax.grad(loss, argnums=(0, 1))
    args = (np.array([1.0, 0.5], f32), f32(1.3))
    module = whilst.compile(grad, *args)
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    text = prepare([whilst.export(grad, *args)])
    assert loop_costs(compile_to_stream(text)) == []
    assert len(loop_costs(compile_to_stream(text, loops_in_dispatch=False))) == 2
    run = module.load()
    for a in [1.3, 1.9, 2.5]:
        for got, want in zip(run.main(args[0], f32(a)),
                             jax.grad(unrolled_loss, argnums=(0, 1))(args[0], f32(a))):
            np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_budgets_chunk_loops_over_a_few_numbers_run_in_dispatches():
    """jax.grad of an unbounded loop over 3 floats (default policy): the forward While
    over chunks moves into a dispatch whole (its chunk loop keeps no rows), and so
    do the chunk loops of the gradient While over chunks (the recomputed chunk,
    unrolled with its rows stacked by selects (`stacked_lines`), which become a
    concatenation (`_concatenated`), and its stored gradient). Only the gradient
    While over chunks steps from the host, and the gradient (with respect to the start and to a
    factor every step uses; the steps drift without converging) matches jax.grad of
    the same steps as a `lax.fori_loop`, within the first chunk (43648 steps) and
    past it."""
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where
    from whilst.ir._loop_emitter import OVER_CHUNKS_ATTR
    from whilst.lowering._iree_loops_in_dispatch import (
        _stacked_lines, loops_in_dispatch, LOOP_ATTR)

    step = lambda y, a: y + 1e-5 * jnp.cos(a * y)

    def loss(y, a, t_end):
        return jnp.sum(whilst.while_loop(lambda t, y: t < t_end,
                                         lambda t, y: (t + 1.0, step(y, a)), [0.0, y])[1])

    def loss_fori(y, a, steps):
        return jnp.sum(jax.lax.fori_loop(0, steps, lambda _, y: step(y, a), y))

    grad = jax.grad(loss, (0, 1))
    args = (np.array([0.1, 0.5, 1.0], f32), f32(3.0), f32(10.0))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(prepare([whilst.export(grad, *args)]))
        assert any(map(_stacked_lines, ops_where(module, lambda op: op.name == "stablehlo.while")))
        assert loops_in_dispatch(module) == 3
        on_host = ops_where(module, lambda op: op.name == "stablehlo.while" and not any(
            LOOP_ATTR in parent.attributes for parent in _parents(op)))
        assert [op.attributes["whilst.role"] for op in on_host] == [
            ir.StringAttr.get("gradient")]
        assert all(OVER_CHUNKS_ATTR in op.attributes for op in on_host)
        assert [op for region in ops_where(module, lambda op: LOOP_ATTR in op.attributes)
                for op in ops_where(region, lambda op: op.name == "stablehlo.concatenate")]
    compiled = whilst.compile(grad, *args)
    assert "left to the host" not in compiled.stages[-1][0], compiled.stages[-1][0]
    run = compiled.load()
    oracle = jax.jit(jax.grad(loss_fori, (0, 1)), static_argnums=2)
    for steps in [0, 3, 1000, 100_000]:
        for got, want in zip(run.main(*args[:2], f32(steps)), oracle(*args[:2], steps)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


def _parents(op):
    """The ops that hold `op`, innermost first."""
    parent = op.parent
    while parent is not None and parent.name != "builtin.module":
        yield parent
        parent = parent.parent


@pytest.mark.parametrize("n", [8, 100_000])
def test_a_short_unbounded_loops_gradient_runs_its_forward_over_chunks_in_a_dispatch(n):
    """jax.grad of `i < n` from `jnp.int32(0)` over 3 floats (no bound known: the
    default policy's chunks). Its forward While over chunks, which carries no stacks,
    runs whole in a dispatch, and the gradient While over chunks on the host starts
    from and reads copies of its results (`_host_loop_inits_copied`; copies of the
    carries alone made a module that failed on every call,
    `iree_limits/dispatch_result_as_loop_init.py`). Matches jax.grad of the loop
    unrolled within the first chunk, and of `lax.fori_loop` past it."""
    def loss(y, a):
        return jnp.sum(whilst.while_loop(lambda i, y: i < n,
                                         lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                                         [jnp.int32(0), y])[1])

    def oracle(y, a):
        return jnp.sum(jax.lax.fori_loop(0, n, lambda _, y: jnp.sin(a * y) * 0.9 + 0.1, y))

    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where
    from whilst.lowering._iree_loops_in_dispatch import loops_in_dispatch, LOOP_ATTR

    args = (np.array([0.1, 0.5, 1.0], f32), f32(1.1))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(prepare([whilst.export(jax.grad(loss, (0, 1)), *args)]))
        loops_in_dispatch(module)
        on_host = ops_where(module, lambda op: op.name == "stablehlo.while" and not any(
            LOOP_ATTR in parent.attributes for parent in _parents(op)))
        assert [op.attributes["whilst.role"] for op in on_host] == [
            ir.StringAttr.get("gradient")]
    compiled = whilst.compile(jax.grad(loss, (0, 1)), *args)
    assert "left to the host" not in compiled.stages[-1][0], compiled.stages[-1][0]
    for got, want in zip(compiled.load()(*args), jax.grad(oracle, (0, 1))(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("order", [1, 2])
def test_derivatives_of_a_float_counted_loop_compile_with_every_loop_in_place(order,
                                                                             monkeypatch):
    """TensorFlow's testIteratedGradients loop counted by a float, `t < 2.0` (no bound
    known). Its gradient While reads its stacks at a clamped position shared by two
    gathers and a scatter, kept apart in the dispatch as one element: kept as a
    scalar, llvm-cpu codegen failed and the loop went back to the host
    (`iree_limits/scalar_index_kept_apart_in_dispatch.py`). Matches the derivative of
    `cos(cos(x))`. (No time limit on the in-dispatch compile here: on a loaded machine
    the second derivative's passed the 60 s after which `compile_module` goes on to
    the host-driven flag sets.)"""
    from whilst.lowering import _iree

    monkeypatch.setattr(_iree, "LOOPS_IN_DISPATCH_SECONDS", None)
    def loop(x):
        return whilst.while_loop(lambda t, _: t < 2.0, lambda t, y: (t + 1.0, jnp.cos(y)),
                                 [0.0, x])[1]

    f, oracle = loop, lambda x: jnp.cos(jnp.cos(x))
    for _ in range(order):
        f, oracle = jax.grad(f), jax.grad(oracle)
    compiled = whilst.compile(f, f32(1.0), cache=False)
    assert has_loops_in_dispatch(compiled.flags), compiled.stages[-1][0]
    assert "left to the host" not in compiled.stages[-1][0], compiled.stages[-1][0]
    run = compiled.load()
    for x in (f32(1.0), f32(-0.4)):
        np.testing.assert_allclose(run.main(x), oracle(x), rtol=1e-5, atol=1e-6)


def test_a_stack_filled_in_a_host_loops_body_is_filled_in_the_dispatch():
    """A loop writing rows into a stack of 20000 rows (160 KB) started from a fill of
    -1 made in the body of a loop the host steps (three trips, each summing the stack):
    the fill is written in the inner loop's dispatch, which compiles at once (IREE
    would keep the fill as a constant in the kernel's stack memory,
    `iree_limits/fill_into_dispatch_loop.py`), and gives numpy's results."""
    rows = 20000

    def passes(x, n):
        def one_pass(j, c):
            total, x = c

            def body(s):
                i, x, stack = s
                x = jnp.cos(x) * 0.9 + 0.1 * j.astype(f32)
                return i + 1, x, jax.lax.dynamic_update_slice(stack, x[None], (i, 0))

            _, x, stack = jax.lax.while_loop(lambda s: s[0] < n, body,
                                             (0, x, jnp.full((rows, 2), -1.0, f32)))
            return total + jnp.sum(stack * jnp.arange(rows, dtype=f32)[:, None]), x
        return jax.lax.fori_loop(0, 3, one_pass, (f32(0), x))

    def passes_numpy(x, n):
        total, x = np.float64(0), np.array(x, f32)
        for j in range(3):
            stack = np.full((rows, 2), -1.0, f32)
            for i in range(n):
                x = np.cos(x) * f32(0.9) + f32(0.1) * f32(j)
                stack[min(i, rows - 1)] = x
            total += np.sum(stack.astype(np.float64) * np.arange(rows)[:, None])
        return total, x

    args = (np.array([0.3, -1.0], f32), i32(5))
    module = whilst.compile(passes, *args)
    assert has_loops_in_dispatch(module.flags), module.stages[-1][0]
    assert "left to the host" not in module.stages[-1][0], module.stages[-1][0]
    run = module.load()
    for n in [0, 1, 7, rows + 3]:
        total, x = run.main(args[0], i32(n))
        want_total, want_x = passes_numpy(args[0], n)
        np.testing.assert_allclose(x, want_x, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(total, want_total, rtol=1e-4)


def test_rows_past_the_state_bound_are_written_in_place_in_the_dispatch():
    """A loop of 2 floats writing a row per step into a stack of 2000 rows (16 KB,
    past MAX_CARRIED_BYTES as state) at `i + 2`, and 3 rows per step into another at
    `3 i`, clamped into bounds as `dynamic_update_slice` clamps: it runs in a
    dispatch, its rows written in place, and gives numpy's results for stops before,
    at and past the stacks' ends."""
    from whilst.lowering._iree_loops_in_dispatch import MAX_CARRIED_BYTES

    rows = 2000

    def record(x, n):
        def body(c):
            i, x, stack, triples = c
            x = jnp.cos(x) * 0.9 + 0.05 * i.astype(f32)
            return (i + 1, x, jax.lax.dynamic_update_slice(stack, x[None], (i + 2, 0)),
                    jax.lax.dynamic_update_slice(triples, jnp.stack([x, 2 * x, 3 * x]),
                                                 (3 * i, 0)))
        return jax.lax.while_loop(lambda c: c[0] < n, body,
                                  (0, x, jnp.full((rows, 2), -1.0, f32),
                                   jnp.zeros((rows, 2), f32)))[1:]

    def record_numpy(x, n):
        x, stack, triples = np.array(x, f32), np.full((rows, 2), -1.0, f32), np.zeros(
            (rows, 2), f32)
        for i in range(n):
            x = np.cos(x) * f32(0.9) + f32(0.05) * f32(i)
            stack[min(i + 2, rows - 1)] = x
            start = min(3 * i, rows - 3)
            triples[start:start + 3] = [x, 2 * x, 3 * x]
        return x, stack, triples

    assert rows * 2 * 4 > MAX_CARRIED_BYTES
    args = (np.array([0.3, -1.0], f32), i32(5))
    assert in_dispatch_form(record, *args) is not None
    module = whilst.compile(record, *args)
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    assert loop_costs(compile_to_stream(prepare([whilst.export(record, *args)]))) == []
    run = module.load()
    for n in [0, 1, 3, 500, rows + 2, rows + 40]:
        for got, want in zip(run.main(args[0], i32(n)), record_numpy(args[0], n)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_rows_of_unsigned_integers_and_booleans_are_written_in_place():
    """Stacks of 2000 uint32 rows (xorshift states) and of booleans (their low bit),
    kept as the dispatch stores them (signless integers, booleans as bytes), give
    numpy's rows."""
    rows = 2000

    def record(x, n):
        def body(c):
            i, x, words, bits = c
            x = x ^ (x << 13)
            x = x ^ (x >> 17)
            x = x ^ (x << 5)
            return (i + 1, x, jax.lax.dynamic_update_slice(words, x[None], (i, 0)),
                    jax.lax.dynamic_update_slice(bits, (x & 1 == 1)[None], (i, 0)))
        return jax.lax.while_loop(lambda c: c[0] < n, body,
                                  (0, x, jnp.zeros((rows, 2), u32),
                                   jnp.zeros((rows, 2), bool)))[1:]

    def record_numpy(x, n):
        x, words, bits = np.array(x, u32), np.zeros((rows, 2), u32), np.zeros((rows, 2), bool)
        for i in range(n):
            x = x ^ (x << u32(13))
            x = x ^ (x >> u32(17))
            x = x ^ (x << u32(5))
            words[i], bits[i] = x, x & 1 == 1
        return x, words, bits

    args = (np.array([1, 2 ** 31 + 7], u32), i32(3))
    module = whilst.compile(record, *args)
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    assert loop_costs(compile_to_stream(prepare([whilst.export(record, *args)]))) == []
    run = module.load()
    for n in [0, 3, rows]:
        for got, want in zip(run.main(args[0], i32(n)), record_numpy(args[0], n)):
            np.testing.assert_array_equal(got, want)


def test_a_stack_the_loop_reads_stays_state():
    """A stack the body reads (its last row) is state, not rows written in place: past
    MAX_CARRIED_BYTES its loop stays on the host."""
    from whilst.lowering._iree_loops_in_dispatch import MAX_CARRIED_BYTES

    rows = 2000
    assert rows * 2 * 4 > MAX_CARRIED_BYTES

    def running(x, n):
        def body(c):
            i, stack = c
            row = jax.lax.dynamic_slice(stack, (jnp.maximum(i - 1, 0), 0), (1, 2))[0]
            return i + 1, jax.lax.dynamic_update_slice(stack, (row * 0.5 + 1.0)[None], (i, 0))
        return jax.lax.while_loop(lambda c: c[0] < n, body,
                                  (1, jnp.zeros((rows, 2), f32).at[0].set(x)))[1]

    assert in_dispatch_form(running, np.ones(2, f32), i32(4)) is None


def test_a_small_loop_inside_a_wide_loop_runs_in_a_dispatch_of_its_own():
    """The outer loop steps 2048 floats (left on the host); the inner Newton iteration
    over one number moves into a dispatch inside the outer loop's body. Both give the
    plain Python loops' results."""
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where
    from whilst.lowering._iree_loops_in_dispatch import loops_in_dispatch

    def f(x, n):
        def body(c):
            i, x = c
            root = newton_sqrt(jnp.sum(x * x) + 1.0)[0]       # sqrt(|x|^2 + 1)
            return i + 1, jnp.sin(x) / root
        return jax.lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    def f_numpy(x, n):
        for _ in range(n):
            x = np.sin(x) / newton_sqrt_python(np.sum(x * x) + f32(1.0))[0]
        return x

    args = (np.linspace(-1, 1, 2048, dtype=f32), i32(3))
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(prepare([whilst.export(f, *args)]))
        assert loops_in_dispatch(module) == 1
        (outer,) = ops_where(module, lambda op: op.name == "stablehlo.while")
        assert ops_where(outer, lambda op: op.name == "flow.dispatch.region")
    compiled = whilst.compile(f, *args)
    assert has_loops_in_dispatch(compiled.flags), compiled.stages[-1]
    run = compiled.load()
    for n in [0, 1, 4]:
        np.testing.assert_allclose(run.main(args[0], i32(n)), f_numpy(args[0], n), rtol=2e-5,
                                   atol=1e-6)


def test_a_loop_whose_dispatch_fails_to_compile_alone_goes_back_to_the_host(monkeypatch):
    """A gradient While whose dispatch llvm-cpu codegen fails on (the pad of a scalar
    broadcast, with `_scalar_pads`' workaround taken out:
    `iree_limits/pad_of_broadcast_in_dispatch.py`): iree-compile's error points into
    that loop's dispatch, and the module is compiled again with that loop alone
    stepped from the host, its forward While still in a dispatch; the gradient is
    `jax.grad` of the loop unrolled in Python."""
    from helpers import unrolled
    from whilst.lowering import _iree_loops_in_dispatch

    def loss(loop):
        return lambda u, theta, n: jnp.sum(loop(
            lambda i, u: i < n, lambda i, u: (i + 1, u * jnp.cos(u) + theta[0]), [0, u],
            maximum_iterations=6)[1] ** 2)

    monkeypatch.setattr(_iree_loops_in_dispatch, "_scalar_pads", lambda loop: None)
    grad = jax.grad(loss(whilst.while_loop), argnums=(0, 1))
    args = (np.array([0.1, 0.5, -0.3], f32), np.array([0.3, 0.7], f32), i32(2))
    module = whilst.compile(grad, *args, cache=False)
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    label = module.stages[-1][0]
    assert "'memref.expand_shape' op rank 0" in label and "in the dispatch of loop 1: left to " \
        "the host" in label, label
    want = jax.grad(loss(unrolled), argnums=(0, 1))
    run = module.load()
    for n in (0, 2, 6):
        for got, expected in zip(run.main(*args[:2], i32(n)), want(*args[:2], n)):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_gradient_under_a_budget_of_a_few_rows_runs_in_dispatches():
    """jax.grad of a loop under a budget of a few rows (64 bytes; 32 to 256 failed
    alike when its gradient While, which writes slots, stayed on the host with
    carries that start from the results of its moved forward While:
    `iree_limits/dispatch_result_as_loop_init.py`): every loop runs in a dispatch,
    and the gradient is `jax.grad` of the loop unrolled in Python, at 0 to 10
    steps, on both CPU drivers."""
    from iree_limits.dispatch_result_as_loop_init import f, unrolled

    assert loop_costs(compile_to_stream(prepare([whilst.export(jax.grad(f), f32(1.0))]))) == []
    module = whilst.compile(jax.grad(f), f32(1.0))
    assert has_loops_in_dispatch(module.flags), module.stages[-1]
    for driver in ("local-sync", "local-task"):
        run = module.load(driver)
        for x in [11.0, 9.0, 1.0, 0.1, 1e-4]:
            np.testing.assert_allclose(run(f32(x)), jax.grad(unrolled)(f32(x)), rtol=1e-5)



def sine_step(i, y):
    return i + 1, jnp.sin(y) * 0.9 + 0.1


def sines_with_checkpoints(x, n, checkpoints):
    """sum(y) after n steps of y <- sin(y) * 0.9 + 0.1, `checkpoints` kept."""
    return jnp.sum(whilst.while_loop(lambda i, y: i < n, sine_step, [0, x],
                                     checkpoints=checkpoints)[1])


def sines_unrolled(x, n):
    return jnp.sum(unrolled(lambda i, y: i < n, sine_step, [0, x])[1])


@pytest.mark.parametrize("checkpoints", [1, 4, 90])
def test_a_checkpointed_gradient_leaves_no_loop_for_the_host(checkpoints):
    """The gradient While of a loop under `checkpoints=K` writes its slots as it
    goes; it runs in a dispatch like the forward While (its checkpoint schedule's
    sort reads a copy: `iree_limits/sort_of_shared_operand.py`), also with 90 slots
    of 16 floats (5.6 KiB, within MAX_CARRIED_BYTES). Gradients match `jax.grad` of
    the loop unrolled in Python, on both CPU drivers."""
    grad = jax.grad(lambda x, n: sines_with_checkpoints(x, n, checkpoints))
    x = np.linspace(0.1, 0.9, 16).astype(f32)
    text = prepare([whilst.export(grad, x, i32(3))])
    assert loop_costs(compile_to_stream(text)) == []
    module = whilst.compile(grad, x, i32(3))
    wants = {n: jax.grad(sines_unrolled)(x, n) for n in (0, 1, 3, 17, 130)}
    for driver in ("local-sync", "local-task"):
        run = module.load(driver)
        for n, want in wants.items():
            np.testing.assert_allclose(run(x, i32(n)), want, rtol=1e-5, atol=1e-6)


def test_the_text_of_loops_in_dispatches_is_one_from_call_to_call():
    """The second derivative of a nested loop: the barriers and constant copies that
    moving its loops makes come in the order of the module's ops, not of a set's
    (whose order follows the ops' addresses), so each call gives one text."""
    text = prepare([whilst.export(jax.grad(jax.grad(nested_sin_loop)), f32(0.6))])
    flags = flag_sets(["llvm-cpu"])[0]
    assert has_loops_in_dispatch(flags)
    texts = {source_for(text, flags) for _ in range(6)}
    assert len(texts) == 1 and None not in texts
