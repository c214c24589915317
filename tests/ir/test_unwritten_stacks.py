"""Residual stacks and checkpoint slots start unwritten under jax.jit on CPU (a
custom call of whilst._uninitialized_cpu instead of a fill of maximum_iterations
rows), so every row a gradient reads must have been written first. The poisoned
tests fill them with NaN (the dtype's largest value for integers) instead: a row
read before it is written would show in the gradient. Oracles: jax.grad of the
loop unrolled in Python."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend.mlir import ir
from jax.interpreters import mlir

import whilst
from helpers import (decaying_in_steps, nested_in_chunks, nested_in_chunks_oracle,
                     nested_sin_oracle, unrolled)
from whilst._jax_compat import broadcast_in_dim
from whilst.ir import _buffers

X = jnp.linspace(0.1, 1.0, 4)
W = jnp.float32(1.3)


def step(w, i, x):
    """A float carry and an integer position: the rows hold both (x[j] is a gather)."""
    j = i % 4
    return i + 1, x.at[j].set(x[j] + 0.05 * jnp.sin(w * x[(j + 1) % 4])) + 0.001 * i


def loss(x, w, n, **options):
    _, x = whilst.while_loop(lambda i, x: i < n, functools.partial(step, w), [0, x],
                             **options)
    return jnp.sum(x ** 2)


def oracle(x, w, n):
    _, x = unrolled(lambda i, x: i < n, functools.partial(step, w), [0, x])
    return jnp.sum(x ** 2)


def _poison(ctx, avals):
    """Fills any read would show: NaN, the largest integer, or True."""
    def fill(dtype):
        return (np.nan if np.issubdtype(dtype, np.inexact) else
                np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else True)
    return [broadcast_in_dim(ctx, mlir.ir_constant(np.array(fill(a.dtype), a.dtype)), a,
                             broadcast_dimensions=[]) for a in avals]


@pytest.fixture
def poisoned_stacks(monkeypatch):
    """Stacks left unwritten under jax.jit on CPU are poisoned instead, in this test."""
    monkeypatch.setattr(_buffers, "_unwritten_cpu_handler", object())
    monkeypatch.setattr(_buffers, "_unwritten_cpu", _poison)
    jax.clear_caches()
    yield
    jax.clear_caches()


def check(options, ns):
    grad = jax.jit(jax.grad(functools.partial(loss, **options), (0, 1)))
    for n in ns:
        for got, want in zip(grad(X, W, n), jax.grad(oracle, (0, 1))(X, W, n)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6,
                                       err_msg=f"{options}, n={n}")


@pytest.mark.parametrize("options, ns", [
    (dict(maximum_iterations=40), [0, 1, 7, 40]),                  # every step stored
    (dict(maximum_iterations=40, unroll=3), [0, 1, 2, 7, 40]),      # predicated steps
    (dict(gradient_memory=160), [0, 2, 5, 6, 7, 22]),              # chunks of 6 steps, K=2
    (dict(maximum_iterations=60, gradient_memory=800), [3, 29, 30, 31, 60]),  # chunks of 30
    (dict(checkpoints=3, maximum_iterations=50), [0, 5, 50]),
    ({}, [0, 7, 300]),                                             # the default budget
])
def test_no_row_is_read_before_it_is_written(poisoned_stacks, options, ns):
    check(options, ns)


def test_vmap_per_example_trip_counts_read_written_rows_only(poisoned_stacks):
    ns = jnp.array([0, 2, 5, 30])
    xs = jnp.stack([X, X * 0.5, X + 0.3, -X])
    got = jax.jit(jax.vmap(jax.grad(lambda x, n: loss(x, W, n, gradient_memory=160))))(xs, ns)
    want = [jax.grad(oracle)(x, W, int(n)) for x, n in zip(xs, ns)]
    np.testing.assert_allclose(got, np.stack(want), rtol=2e-5, atol=1e-6)


def test_nested_loops_and_grad_of_grad_read_written_rows_only(poisoned_stacks):
    def f(x, a):
        def outer_body(i, x):
            _, y = whilst.while_loop(lambda j, y: j <= i, lambda j, y: (j + 1, jnp.sin(y) * a + x),
                                     [0, x], gradient_memory=30)
            return i + 1, y * 0.9
        return whilst.while_loop(lambda i, x: i < 6, outer_body, [0, x], gradient_memory=30)[1]

    oracle6 = lambda x, a: nested_sin_oracle(x, 6, a)  # noqa: E731
    for got, want in zip(jax.jit(jax.grad(f, (0, 1)))(0.6, 0.7),
                         jax.grad(oracle6, (0, 1))(0.6, 0.7)):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    second = jax.jit(jax.grad(lambda w: jax.grad(loss)(X, w, 9, gradient_memory=160).sum()))
    want = jax.grad(lambda w: jax.grad(oracle)(X, w, 9).sum())(W)
    np.testing.assert_allclose(second(W), want, rtol=1e-4)


def _custom_calls(lowered) -> list:
    """`(target, result element types)` of each `stablehlo.custom_call` in `lowered`."""
    module = lowered.compiler_ir("stablehlo")
    found = []

    def visit(op):
        if op.name == "stablehlo.custom_call":
            found.append((ir.StringAttr(op.attributes["call_target_name"]).value,
                          sorted(str(ir.RankedTensorType(r.type).element_type)
                                 for r in op.results)))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def test_stacks_and_slots_are_left_unwritten_by_one_op_under_jit_and_empty_in_exports():
    """Needs the extension setup.py builds (a C compiler at install time). One op
    for all: XLA:CPU's executor runs a program on its thread pool when more than
    8 first thunks are ready at once."""
    assert _buffers._unwritten_cpu_handler is not None, (
        "whilst._uninitialized_cpu was not built: reinstall whilst where a C compiler "
        "is found (pip install -e .)")
    grad = jax.grad(functools.partial(loss, gradient_memory=160))
    args = (X, W, jnp.int32(7))
    calls = _custom_calls(jax.jit(grad).lower(*args))
    # stacks of float and int rows, slots of the float and int loop variables
    assert calls == [(_buffers.UNWRITTEN_CPU_TARGET, ["f32", "f32", "i32", "i32"])], calls
    assert _buffers.UNWRITTEN_CPU_TARGET not in whilst.export(grad, *args).text


def test_a_stack_made_in_a_loop_body_is_one_buffer_not_a_copy_per_iteration():
    """A loop body that makes a stack and fills it in a loop of its own, as the
    chunk loops of a second derivative do. XLA hoisted the op that leaves it
    unwritten out of the outer loop (it has no operands) and then copied the hoisted
    stack whole every iteration, for the inner loop to write in place: two buffers,
    and a pass over the whole stack per iteration. Oracle: the same loops on a
    stack of zeros."""
    rows = 4096

    def outer(x, n, make_stack):
        def body(i, x):
            def push(j, carry):
                y, stack = carry
                return jnp.sin(y), lax.dynamic_update_index_in_dim(stack, jnp.sin(y), j, 0)
            _, stack = lax.fori_loop(0, n, push, (x, make_stack()))
            return x + lax.dynamic_index_in_dim(stack, n - 1, 0, keepdims=False)
        return lax.fori_loop(0, n, body, x)

    aval = jax.ShapeDtypeStruct((rows, 4), np.float32)
    unwritten = functools.partial(outer, make_stack=lambda: _buffers.uninitialized([aval])[0])
    compiled = jax.jit(unwritten).lower(X, 5).compile()
    np.testing.assert_allclose(compiled(X, 5), outer(X, 5, lambda: jnp.zeros(aval.shape)),
                               rtol=1e-6)
    stack_bytes = rows * 4 * 4
    assert compiled.memory_analysis().temp_size_in_bytes < 1.5 * stack_bytes


def test_the_poison_shows_a_read(poisoned_stacks):
    """The checks above can fail: a stack read before any write is NaN."""
    def read_unwritten():
        (stack,) = _buffers.uninitialized([jax.ShapeDtypeStruct((3,), np.float32)])
        return stack + 1
    assert np.isnan(jax.jit(read_unwritten)()).all()


def test_vmapped_nested_loops_in_chunks_read_written_rows_only(poisoned_stacks):
    """Under jax.vmap an example that is done still runs the batched gradient body,
    and there popped its inner loop's count from a row no step of it wrote: poisoned,
    the inner gradient While ran 2**31 steps (unpoisoned, as long as the memory said:
    tests/ir/test_budget.py's version of this program took 1767 s in CI once in a few
    runs). A lane past its bound now pops zeros: the count is 0."""
    f = functools.partial(nested_in_chunks, gradient_memory=2048)
    ns = [0, 1, 3, 7, 20]
    got = jax.jit(jax.vmap(jax.grad(f, (0, 1)), in_axes=(None, None, 0)))(X, W, jnp.array(ns))
    wants = [jax.grad(nested_in_chunks_oracle, (0, 1))(X, W, n) for n in ns]
    for g, w in zip(got, map(np.stack, zip(*wants))):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_vmapped_loops_without_bounds_nested_read_written_rows_only(poisoned_stacks):
    """The inner loops keep no rows, so store every step with no bound: their
    gradient Whiles have no bound to cap a count with. A lane that is done pops
    zeros (the poisoned count would run 2**31 steps)."""
    grad = jax.jit(jax.vmap(jax.grad(decaying_in_steps)))
    xs = np.array([0.5, 0.7, 0.9, 1.1], np.float32)
    for ns in ([0.0, 5.0, 1.0, 3.0], [0.0, 0.0, 7.0, 0.0]):
        want = [jax.grad(functools.partial(decaying_in_steps, n=n, loop=unrolled))(x)
                for x, n in zip(xs, ns)]
        np.testing.assert_allclose(grad(xs, np.array(ns, np.float32)), want, rtol=1e-5)


def _pop_all(stack, bound, pop_pad, unroll, seen):
    """A gradient While that pops one row of `stack` per step (`bound` steps) and
    sums them, one loop of `row` steps each, recording `(bound, i, row)` from its
    body at each step it runs."""
    from whilst.ir._functional_while import COUNTER_AVAL, functional_while
    from whilst.ir._tracing import always_true, trace_closed

    row, scalar = (jax.core.ShapedArray(s, jnp.float32) for s in [(1,), ()])

    def body(b, r, i, total):
        jax.debug.callback(lambda *a: seen.append(tuple(map(np.asarray, a))), b, i, r)
        # a loop of r[0] steps (as a gradient's inner loop pops its trip count)
        return [lax.fori_loop(0, r[0].astype(np.int32), lambda _, t: t + 1.0, total)]

    _, total = functional_while(
        [], [bound, stack], bound, [jnp.float32(0)],
        cond_jaxpr=always_true([COUNTER_AVAL, scalar]), static_bound=8, name="pop_all",
        body_jaxpr=trace_closed(body, [COUNTER_AVAL, row, COUNTER_AVAL, scalar], "body"),
        role="gradient", pops=1, pop_pad=pop_pad, unroll=unroll)
    return total


def _check_pops(seen, stack, pop_pad):
    """Step i < b of a loop of bound b popped `stack[b - 1 + pop_pad - i]`; a step
    past the end, zeros."""
    for b, i, r in seen:
        assert r[0] == (stack[b - 1 + pop_pad - i, 0] if i < b else 0.0), (b, i, r)


@pytest.mark.parametrize("jit", [False, True])
def test_vmapped_lanes_past_their_bound_pop_zero_rows(jit):
    """A loop that pops rows, under `jax.vmap` with a bound per lane, runs its body
    for the lanes that are done too. Those lanes get rows of zeros, never the rows
    below their first step: in a gradient those were never written, and a trip
    count popped from one sized the lane's inner gradient While (it ran 2**31 steps
    on poisoned stacks, as long as the memory said otherwise)."""
    seen = []
    stack = jnp.arange(1.0, 9.0)[:, None]                     # rows 1..8, all written
    pop_all = functools.partial(_pop_all, stack, pop_pad=0, unroll=None, seen=seen)
    bounds = np.array([0, 3, 8, 1], np.int32)
    totals = (jax.jit(jax.vmap(pop_all)) if jit else jax.vmap(pop_all))(bounds)
    np.testing.assert_array_equal(totals, [sum(range(1, b + 1)) for b in bounds])
    assert sorted((int(b), int(i)) for b, i, _ in seen) == [
        (b, i) for b in sorted(bounds) for i in range(bounds.max())]     # each lane, each step
    _check_pops(seen, stack, 0)


def test_unrolled_steps_past_the_end_pop_zero_rows():
    """A gradient While of 4 steps per iteration runs the steps left after its last
    full iteration as 4 steps whose results it picks from: those past the end pop
    zeros, not the pad rows below the first step (here 99, in a gradient never
    written)."""
    stack = jnp.concatenate([jnp.full((3, 1), 99.0), jnp.arange(1.0, 9.0)[:, None]])
    for b in range(9):
        seen = []
        total = jax.jit(functools.partial(_pop_all, stack, pop_pad=3, unroll=4, seen=seen))(b)
        assert total == sum(range(1, b + 1))
        assert sorted({int(i) for _, i, _ in seen if i < b}) == list(range(b))
        _check_pops(seen, stack, 3)
