"""Higher derivatives and nested unbounded loops under the default policy
(TensorFlow's testIteratedGradients and testNestedWhileGrad tests): values against
JAX's derivatives of the loops unrolled in Python, memory from XLA's compiled memory
analysis, size from the lowered module."""
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import (chunk_steps, gradient_of_squared_gradient, pushing_loop,
                     sin_steps_loss, unrolled)
from whilst.ir import DEFAULT_GRADIENT_MEMORY, Checkpointed, EveryStep, iter_loops
from whilst.lowering import unroll_factors


def cos_twice(x, **options):
    """TensorFlow's testIteratedGradients: no bound, but `i` counts from 0 to 2, a
    trip count known at trace time, which bounds the loop."""
    return whilst.while_loop(lambda i, _: i < 2, lambda i, y: (i + 1, jnp.cos(y)), [0, x],
                             **options)[1]


def cos_twice_unbounded(x, **options):
    """The same loop counted by a float, whose trip count whilst does not read: the
    default budget's loops over chunks."""
    return whilst.while_loop(lambda t, _: t < 2.0, lambda t, y: (t + 1.0, jnp.cos(y)),
                             [0.0, x], **options)[1]


def cos_twice_unrolled(x):
    return jnp.cos(jnp.cos(x))


def derivative(f, order):
    for _ in range(order):
        f = jax.grad(f)
    return f


@pytest.mark.parametrize("order", [2, 3, 4])
def test_derivatives_of_a_counted_loop_store_its_steps_in_memory_of_its_rows(order):
    """Orders 2-4 of testIteratedGradients' loop, eagerly and under jit: its trip
    count (2) is known, so reverse mode inlines its two steps (`_inlined.py`) and
    every order differentiates straight-line code, and XLA's temporaries do not
    grow with `gradient_memory` (they were 183 MiB at order 3 and 4 GiB asked
    before the loop was bounded)."""
    want = derivative(cos_twice_unrolled, order)(1.0)
    jaxpr = jax.make_jaxpr(derivative(cos_twice, order))(1.0).jaxpr
    assert not list(iter_loops(jaxpr))
    np.testing.assert_allclose(derivative(cos_twice, order)(1.0), want, rtol=1e-5)
    temps = []
    for budget in (None, 2**30):
        f = functools.partial(cos_twice, gradient_memory=budget)
        compiled = jax.jit(derivative(f, order)).lower(1.0).compile()
        np.testing.assert_allclose(compiled(1.0), want, rtol=1e-5)
        temps.append(compiled.memory_analysis().temp_size_in_bytes)
    assert temps[0] == temps[1] < 64 * 1024


def cos_pair_unbounded(x, **options):
    """Two steps of `cos_twice_unbounded`, counted by a float: a loop inside a loop."""
    return whilst.while_loop(lambda t, _: t < 2.0,
                             lambda t, y: (t + 1.0, cos_twice_unbounded(y, **options)),
                             [0.0, x], **options)[1]


@pytest.mark.parametrize("order", [2, 3, 4])
@pytest.mark.parametrize("loop, oracle", [
    (cos_twice_unbounded, cos_twice_unrolled),
    (cos_pair_unbounded, lambda x: cos_twice_unrolled(cos_twice_unrolled(x)))])
def test_eager_derivatives_of_unbounded_loops_inline_the_steps_they_take(loop, oracle, order):
    """Eagerly the operands are values (seen through the tracers of the derivatives
    around the loop): reverse mode steps the float-counted loop once for its trip
    count (2) and inlines its steps, linearized on those values, so the loop inside
    a loop's body sees values too; every order differentiates straight-line code and
    no loop is left, whatever the budget (order 3 asked for 4 GiB when each order ran
    the budget's chunks)."""
    f = derivative(functools.partial(loop, gradient_memory=2**34), order - 1)
    want = derivative(oracle, order)(1.0)
    np.testing.assert_allclose(jax.grad(f)(1.0), want, rtol=1e-5)
    _, f_vjp = jax.vjp(f, 1.0)    # eagerly: its linear map (and transpose) traced below
    assert not list(iter_loops(jax.make_jaxpr(f_vjp)(1.0).jaxpr))


@pytest.mark.parametrize("budget", [DEFAULT_GRADIENT_MEMORY, 4 * DEFAULT_GRADIENT_MEMORY])
def test_second_derivative_of_an_unbounded_loop_eagerly_and_under_jit(budget):
    """XLA's temporaries keep to about the budget: the first derivative's chunks take
    a 32nd of it under the second (they took 26 times the budget when a chunk's
    rows filled it: the second derivative stores rows for each of its loops)."""
    grad2 = jax.grad(jax.grad(functools.partial(cos_twice_unbounded, gradient_memory=budget)))
    want = jax.grad(jax.grad(cos_twice_unrolled))(1.0)
    np.testing.assert_allclose(grad2(1.0), want, rtol=1e-6)
    compiled = jax.jit(grad2).lower(1.0).compile()
    np.testing.assert_allclose(compiled(1.0), want, rtol=1e-6)
    assert compiled.memory_analysis().temp_size_in_bytes < 1.25 * budget


def cos_steps_unbounded(x, n, loop=whilst.while_loop, **options):
    """n steps of `cos`, counted by a float: no bound known."""
    return loop(lambda t, _: t < n, lambda t, y: (t + 1.0, jnp.cos(y)), [0.0, x], **options)[1]


@pytest.mark.parametrize("n", [10, 24, 25, 60])
def test_under_further_derivatives_a_loop_past_its_budget_stores_a_head_and_branches(n):
    """Under a second derivative a loop with no bound stores a head of S steps (the
    rows a chunk holds: 24 in a budget of 4 KiB, a 32nd of it for rows and copies)
    and runs the budget's chunks only where it runs past them, inside a `lax.cond`
    (`_headed.py`): no While over chunks outside a branch, so that a loop ending
    within its head runs none of their second derivatives. Loops ending within the
    head, at its end and past it, under jit and eagerly, against the unrolled loop."""
    f = functools.partial(cos_steps_unbounded, n=float(n), gradient_memory=4096)
    second = jax.grad(jax.grad(f))
    assert chunk_steps(second, 0.9) == {24}
    top = [e for e in jax.make_jaxpr(second)(0.9).jaxpr.eqns
           if e.primitive.name == "functional_while"]
    assert not [e for e in top if hasattr(e.params["gradient"], "checkpoints")]
    assert [e.params["static_bound"] for e in top
            if e.params["role"] == "forward" and e.params["accumulators"]] == [24]
    want = jax.grad(jax.grad(functools.partial(cos_steps_unbounded, n=n, loop=unrolled)))(0.9)
    np.testing.assert_allclose(jax.jit(second)(0.9), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(second(0.9), want, rtol=1e-5, atol=1e-7)


@pytest.mark.iree
def test_second_derivative_of_an_unbounded_loop_of_64_floats_runs_on_iree():
    """Its gradient While over chunks carries checkpoints too wide to run inside a
    dispatch, so IREE steps it and its branches from the host; a re-plan branching
    inside the branch that stores a step made iree-compile 3.13 fail to solve for
    timepoint coverage. 96 steps per chunk: 1, 100 and 300 steps end in the first,
    second and fourth. Run by hand (tests/conftest.py): a minute of iree-compile."""
    def loss(y, n, loop):
        step = lambda t, y: (t + 1.0, y + 0.001 * jnp.sin(3.0 * y))
        y = (whilst.while_loop if loop else unrolled)(lambda t, _: t < n, step, [0.0, y])[1]
        return jnp.sum(y ** 2)

    y = np.linspace(-1, 1, 64, dtype=np.float32)
    grad2 = lambda y, n: gradient_of_squared_gradient(lambda y: loss(y, n, True))(y)
    module = whilst.compile(grad2, y, np.float32(1.0)).load("local-sync")
    for n in [1.0, 100.0, 300.0]:
        want = jax.jit(gradient_of_squared_gradient(lambda y: loss(y, n, False)))(y)
        np.testing.assert_allclose(module(y, np.float32(n)), want, rtol=2e-5, atol=1e-4)


def test_loops_reverse_mode_builds_store_every_step_when_differentiated_again():
    """A chunk's loops and the stored gradient Whiles have the `EveryStep` policy: the
    next derivative stores their steps' rows instead of cutting them into chunks of
    a budget of their own, so the second derivative runs no loop in chunks."""
    first = jax.make_jaxpr(jax.grad(cos_twice_unbounded))(1.0).jaxpr
    bounded = [e for e in iter_loops(first) if e.params["static_bound"] is not None]
    # a chunk's steps and their gradient: under jax.jit chunk 0's writing rows, the
    # others' keeping none, the last chunk's again, the last chunk's gradient and the
    # gradient While's two; exported the forward's chunk loop keeping none and the
    # gradient While's two
    assert len(bounded) == 9
    assert all(isinstance(e.params["gradient"], EveryStep) for e in bounded)
    second = jax.make_jaxpr(jax.grad(jax.grad(cos_twice_unbounded)))(1.0).jaxpr
    policies = [e.params["gradient"] for e in iter_loops(second)]
    # the one While over chunks is the first derivative's, run as it is (in a branch,
    # past the stored head), its chunks of a 32nd of the budget: (2**15 - 64 slots *
    # 8 bytes) / 4 bytes a row
    assert [p.chunk_steps for p in policies if hasattr(p, "chunk_steps")] == [8064]
    # 61 loops when each started a budget of its own; 31 now (both forms of choices,
    # the XLA:CPU form of a checkpointed gradient While stepping forwards in one
    # branch), 4 of them the head's (2048 steps of 4 bytes, `_headed.py`)
    assert len(policies) == 31 and sum(isinstance(p, Checkpointed) for p in policies) == 6
    assert [(e.params["static_bound"], e.params["gradient"]) for e in second.eqns
            if e.primitive.name == "functional_while"] == [(2048, EveryStep())] * 4


def test_the_second_derivative_reads_the_cotangents_of_pushed_rows_in_place():
    """The second derivative of a stored loop transposes its forward's row pushes: each
    step reads its row of the cotangent stack, which stays a constant of that
    gradient While. It was a carry, each step zeroing its row, and XLA copied it whole
    every step (order 2 took time quadratic in the steps: 11.4 ms at 1000 steps of 64
    floats, 1.0 ms now). The only stack-sized carry left accumulates the cotangents of
    the rows the first gradient pops."""
    y0 = jnp.linspace(-1.0, 1.0, 8)
    second = gradient_of_squared_gradient(sin_steps_loss(True))
    want = gradient_of_squared_gradient(sin_steps_loss(False))(y0)
    np.testing.assert_allclose(jax.jit(second)(y0), want, rtol=2e-5)
    jaxpr = jax.make_jaxpr(second)(y0).jaxpr
    carries = [e.outvars[1:len(e.outvars) - e.params["accumulators"]]  # not its pushes
               for e in iter_loops(jaxpr) if e.params["role"] == "gradient"]
    stacks_carried = [v.aval.shape for vs in carries for v in vs if v.aval.ndim == 2]
    assert len(stacks_carried) == 1, stacks_carried


def test_a_loop_that_stored_its_rows_stores_every_step_when_differentiated_again():
    """40 steps of 8 floats in a budget of 2000 bytes: the first derivative stores the
    rows (1280 bytes), so its forward pushes them; the second stores every step of
    that forward too. It cut it into chunks, whose checkpoints held the pushed stacks:
    here a checkpoint schedule over single steps (Checkpointed), 18.7 s a call at 3000
    steps of 64 floats in the default budget, 3.9 ms now."""
    y0 = jnp.linspace(-1.0, 1.0, 8)
    loss = sin_steps_loss(True, gradient_memory=2000)
    second = gradient_of_squared_gradient(loss)
    first = jax.make_jaxpr(jax.grad(loss))(y0).jaxpr
    assert [e.params["accumulators"] for e in iter_loops(first)] == [1, 0]
    policies = [e.params["gradient"] for e in iter_loops(jax.make_jaxpr(second)(y0).jaxpr)]
    assert policies == [EveryStep()] * 4
    want = gradient_of_squared_gradient(sin_steps_loss(False))(y0)
    np.testing.assert_allclose(second(y0), want, rtol=2e-5)
    np.testing.assert_allclose(jax.jit(second)(y0), want, rtol=2e-5)


@pytest.mark.parametrize("batched", [False, True])
def test_chunks_take_a_32nd_of_the_budget_per_further_reverse_derivative(batched):
    """The linearize rule sees the next derivatives through the tracers of its
    primals, under vmap too (inside or outside the second `jax.grad`)."""
    xs = jnp.full(3, 0.9)

    def first_of(f):
        return jax.vmap(jax.grad(f)) if batched else jax.grad(f)

    def second_of(f):
        if batched:
            return jax.grad(lambda x: jnp.sum(jax.vmap(jax.grad(f))(x * xs)))
        return jax.grad(jax.grad(f))

    def a_share(f, x, share):   # the checkpoints' copies take the rest of the share
        [steps] = chunk_steps(f, x)
        return first // (2 * share) < steps <= first // share

    [first] = chunk_steps(first_of(cos_twice_unbounded), xs if batched else 0.9)
    assert a_share(second_of(cos_twice_unbounded), 0.9, 32)
    if batched:   # vmap outside every derivative
        assert a_share(jax.vmap(jax.grad(jax.grad(cos_twice_unbounded))), xs, 32)


def test_second_derivative_of_a_vmapped_unbounded_loop_eagerly_and_under_jit():
    """The issue's loop batched, each example with its own trip count (1, 2, 3 steps of
    `cos`), differentiated twice."""
    def cos_steps(loop, x, n):
        return loop(lambda i, _: i < n, lambda i, y: (i + 1, jnp.cos(y)), [0, x])[1]

    def f(x):
        return jnp.sum(jax.vmap(functools.partial(cos_steps, whilst.while_loop))(
            x * jnp.arange(1.0, 4.0), jnp.arange(1, 4)))

    def f_unrolled(x):
        return sum(cos_steps(unrolled, x * (n + 0.0), n) for n in (1, 2, 3))

    want = jax.grad(jax.grad(f_unrolled))(0.9)
    np.testing.assert_allclose(jax.grad(jax.grad(f))(0.9), want, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(jax.grad(f)))(0.9), want, rtol=1e-6)


def shrink_to_one(x, cap):
    """Lanes of different trip counts: `y <- 0.5 y + 0.1 sin(y)` while `y > 1`, at most
    `cap` steps."""
    return whilst.while_loop(lambda y: y > 1.0, lambda y: 0.5 * y + 0.1 * jnp.sin(y), [x],
                             maximum_iterations=cap)


def shrink_to_one_trips(x, cap):
    y, steps = np.float32(x), 0
    while steps < cap and y > 1.0:
        y, steps = np.float32(0.5) * y + np.float32(0.1) * np.sin(y), steps + 1
    return steps


@pytest.mark.parametrize("order", [1, 2, 3])
def test_eager_derivatives_under_vmap_bound_the_loop_by_its_lanes_trips(order):
    """`jax.vmap(jax.grad(f))` eagerly: reverse mode takes the trip count from the
    batch behind the tracers, the most steps of a lane (0 to 7 here), and bounds the
    loop by it, each lane still stopping at its own test and its own
    `maximum_iterations`; against `jax.grad` of each lane's steps unrolled."""
    xs = jnp.array([0.5, 1.5, 3.0, 9.0, 40.0, 90.0])
    caps = jnp.array([5, 5, 5, 2, 5, 9])
    got = jax.vmap(derivative(shrink_to_one, order))(xs, caps)
    for x, cap, g in zip(xs, caps, got):
        steps = shrink_to_one_trips(x, int(cap))
        want = derivative(lambda y: unrolled(lambda y: True, lambda y: 0.5 * y + 0.1 * jnp.sin(y),
                                             [y], steps)[0], order)(x)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_eager_derivatives_under_vmap_inline_the_steps_every_lane_takes(order, caplog):
    """Every lane of the nested pair takes the same steps: reverse mode inlines them on
    the batch, so once JAX has compiled the ops a call compiles no program (each
    compiled the budget's loops, 30 s at order 3)."""
    f = jax.vmap(derivative(cos_pair_unbounded, order))
    xs = jnp.linspace(0.1, 1.0, 4)
    jax.block_until_ready(f(xs))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
        got = f(xs)
    assert not [r for r in caplog.records if r.getMessage().startswith("Compiling ")]
    want = jax.vmap(derivative(lambda x: cos_twice_unrolled(cos_twice_unrolled(x)), order))(xs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_third_derivative_of_an_unbounded_loop_under_jit():
    """TensorFlow's testIteratedGradients one order further, its loop counted by a
    float (no bound known): the third derivative compiles and matches. Its
    temporaries (XLA's memory analysis) are the stacks of the loops that store every
    step, S rows each, S the first derivative's chunk of a 1024th of the 1 MiB
    budget: a few times the budget, where it once asked for 4 GiB (and 155 times
    the budget with chunks of the whole budget)."""
    compiled = jax.jit(derivative(cos_twice_unbounded, 3)).lower(1.0).compile()
    want = jax.grad(jax.grad(jax.grad(cos_twice_unrolled)))(1.0)
    np.testing.assert_allclose(compiled(1.0), want, rtol=1e-5)
    assert compiled.memory_analysis().temp_size_in_bytes < 4 * DEFAULT_GRADIENT_MEMORY


def test_third_derivative_of_a_checkpointed_loop_keeps_k_squared_copies():
    """`checkpoints=64` on the float-counted loop: the Whiles each derivative builds
    keep copies of carries that hold the previous order's copies. Those of order 2
    keep 64 (64^2 of the loop's carry), those of order 3 fit the same bytes: XLA's
    temporaries were 16.6 MB at order 3 with 64 copies at every order (64^3),
    about 2 GB at order 4."""
    f = functools.partial(cos_twice_unbounded, checkpoints=64)
    compiled = jax.jit(derivative(f, 3)).lower(1.0).compile()
    want = derivative(cos_twice_unrolled, 3)(1.0)
    np.testing.assert_allclose(compiled(1.0), want, rtol=1e-5)
    assert compiled.memory_analysis().temp_size_in_bytes < 2 * 2**20


def _cos_pair(loop):
    """Two float-counted loops, one inside the other: the outer's two steps each run
    the inner's two steps of `cos`."""
    def inner(y):
        return loop(lambda s, _: s < 2.0, lambda s, y: (s + 1.0, jnp.cos(y)), [0.0, y])[1]
    return lambda x: loop(lambda t, _: t < 2.0, lambda t, x: (t + 1.0, inner(x) * 1.1),
                          [0.0, x])[1]


def test_second_derivative_of_nested_unbounded_loops_keeps_to_their_budgets():
    """The inner loop's copies that the outer loop's first derivative traces (its
    body's vjp in the gradient While among them) are differentiated again too, and
    take a 32nd of their budget: with the whole budget, 38 MB of temporaries."""
    compiled = jax.jit(derivative(_cos_pair(whilst.while_loop), 2)).lower(0.9).compile()
    want = derivative(_cos_pair(_unrolled_loop), 2)(0.9)
    np.testing.assert_allclose(compiled(0.9), want, rtol=1e-5)
    assert compiled.memory_analysis().temp_size_in_bytes < 2 * DEFAULT_GRADIENT_MEMORY


def _unrolled_loop(cond, body, loop_vars):
    """`helpers.unrolled` returning as `whilst.while_loop` does (one loop variable: it
    alone), so that one program definition serves both sides."""
    out = unrolled(cond, body, loop_vars)
    return out[0] if len(out) == 1 else out


def _simple_nested(loop):
    """TensorFlow's testNestedWhileGrad_Simple: unbounded loops, one inside the other."""
    def inner(s):
        return loop(lambda x: x < 4.0, lambda x: x * 2.0, [s])
    return lambda v: loop(lambda x: x < 2.0, lambda x: inner(x) * 2.0, [v])


def test_nested_unbounded_loops_emit_one_step_per_iteration_under_jit():
    """The budget's chunk gradients run their loop's own `unroll` (none: one step per
    `stablehlo.while` iteration under jax.jit), not the factor their stacks are laid
    out for: 64 unrolled copies in every nested chunk made this 20 MB of HLO. (Eight
    loops: the inner loop's steps keep no rows, so it stores every step, no chunks.)"""
    lowered = jax.jit(jax.grad(_simple_nested(whilst.while_loop))).lower(1.0)
    factors = unroll_factors(lowered.as_text())
    assert len(factors) == 8 and set(factors) == {1}
    for v in [0.3, 1.0, 1.5, 3.0]:
        np.testing.assert_allclose(lowered.compile()(v),
                                   jax.grad(_simple_nested(_unrolled_loop))(v), rtol=1e-6)


def _counted_inner(loop):
    """TensorFlow's inner loops of these tests: `x * 2` four times, counted by `i < 4`."""
    return lambda s: loop(lambda i, x: i < 4, lambda i, x: [i + 1, x * 2.0], [0, s])[1]


def _serial_inner(loop):
    inner = _counted_inner(loop)
    return lambda v: loop(lambda x: x < 128.0, lambda x: inner(inner(x)), [v])


def _parallel_inner(loop):
    inner = _counted_inner(loop)
    return lambda v: loop(lambda x: x < 128.0, lambda x: inner(x) * inner(x), [v])


def _while_in_cond(loop):
    inner = _counted_inner(loop)
    return lambda v: loop(lambda x: x < 128.0, lambda x: jax.lax.cond(
        x > 0.0, lambda x: jnp.square(inner(x)), lambda x: x * 2.0, x), [v])


@pytest.mark.parametrize("program, tf_gradient", [
    (_serial_inner, 256.0),     # testNestedWhileGrad_SerialInner
    (_parallel_inner, 512.0),   # testNestedWhileGrad_ParallelInner
    (_while_in_cond, 512.0),    # testNestedWhileCondWhileGrad
], ids=["serial_inner", "parallel_inner", "while_in_cond"])
def test_tensorflows_nested_loop_gradients_eagerly_and_under_jit(program, tf_gradient):
    """TensorFlow's nested-loop gradient tests, every loop unbounded (the default
    budget): at v = 1 TensorFlow's asserted value, at v = 0.3 (two outer steps) the
    gradient of the loops unrolled in Python."""
    grad = jax.grad(program(whilst.while_loop))
    want = jax.grad(program(_unrolled_loop))
    compiled = jax.jit(grad).lower(1.0).compile()
    np.testing.assert_allclose(compiled(1.0), tf_gradient, rtol=1e-6)
    np.testing.assert_allclose(compiled(0.3), want(0.3), rtol=1e-6)
    np.testing.assert_allclose(grad(0.3), want(0.3), rtol=1e-6)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_iterated_gradients_with_a_list(order):
    """TensorFlow's testIteratedGradientsWithList: orders 1-3, eagerly and under jit,
    against the loop unrolled in Python; each order differentiates straight-line
    code (no loop left in the jaxpr)."""
    f, oracle = (derivative(pushing_loop(lambda y: y, loop), order) for loop in (True, False))
    want = oracle(1.0)
    np.testing.assert_allclose(f(1.0), want, rtol=1e-5)
    np.testing.assert_allclose(jax.jit(f)(1.0), want, rtol=1e-5)
    assert not list(iter_loops(jax.make_jaxpr(f)(1.0).jaxpr))


def test_three_loops_with_lists_nested():
    """TensorFlow's testThreeNestWithLists: `_WrapInWhile` three deep around `sin`,
    its value and gradient eagerly and under jit, against the loops unrolled."""
    nest, oracle = (pushing_loop(pushing_loop(pushing_loop(jnp.sin, loop), loop), loop)
                    for loop in (True, False))
    for x in [1.0, 0.3]:
        np.testing.assert_allclose(nest(x), oracle(x), rtol=1e-6)
        want = jax.grad(oracle)(x)
        np.testing.assert_allclose(jax.grad(nest)(x), want, rtol=1e-5)
        np.testing.assert_allclose(jax.jit(jax.grad(nest))(x), want, rtol=1e-5)


def test_gradient_of_a_loop_whose_body_takes_a_loops_gradient():
    """TensorFlow's testGradWhileGradWhileWithVariable: each of two outer steps takes
    the gradient of an inner loop `y <- cos(v + y)` (two steps) at its carry; the
    outer loop's gradient with respect to x and v, eagerly and under jit, against
    the loops unrolled."""
    def func(loop, x, v):
        def inner(a):
            return jax.grad(lambda a: loop(lambda i, _: i < 2,
                                           lambda i, y: (i + 1, jnp.cos(v + y)), [0, a])[1])(a)
        return loop(lambda i, _: i < 2, lambda i, y: (i + 1, inner(y)), [0, x])[1]

    grad = jax.grad(functools.partial(func, whilst.while_loop), (0, 1))
    want = jax.grad(functools.partial(func, _unrolled_loop), (0, 1))(1.0, 1.0)
    for got in [grad(1.0, 1.0), jax.jit(grad)(1.0, 1.0)]:
        np.testing.assert_allclose(got, want, rtol=1e-5)

