"""Reverse mode with no extra argument: a loop with or without a bound is
differentiable, storing steps while they fit `gradient_memory` and recomputing
the later ones from checkpoints. Oracles: jax.grad of the loop unrolled in Python."""
import functools
import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import (REPO, chunk_steps, host_driven_stream, nested_in_chunks,
                     nested_in_chunks_oracle, nested_sin_oracle, unrolled)
from whilst._compile import FALLBACK_NOTE
from whilst.ir import iter_loops
from whilst.ir._xla_cpu_choice import portable_forms, xla_cpu_forms
from whilst.lowering import loop_costs, prepare

X = jnp.linspace(0.1, 1.0, 4)
W = jnp.float32(1.3)


def step(w, i, x):
    return i + 1, x + 0.01 * jnp.sin(w * x) + 0.001 * i


def loss(x, w, n, **options):
    _, x = whilst.while_loop(lambda i, x: i < n, functools.partial(step, w), [0, x],
                             **options)
    return jnp.sum(x ** 2)


def oracle(x, w, n):
    _, x = unrolled(lambda i, x: i < n, functools.partial(step, w), [0, x])
    return jnp.sum(x ** 2)


def policy(**options):
    """`(stored_steps, checkpoints)` of the loops `jax.grad(loss, (0, 1))` exports:
    the steps whose rows are stored together (the bound of the forward While that
    pushes rows, the stored path's or the last chunk's run again, or of the chunk
    loop in the checkpointed one; None if none) and the checkpoints of the
    checkpointed forward While (None if none). The trip count is traced: a known
    one bounds the loop (`_trip_count.static_trips`)."""
    grad = jax.grad(functools.partial(loss, **options), (0, 1))
    top = [e for e in portable_forms(jax.make_jaxpr(grad)(X, W, 7)).jaxpr.eqns
           if e.primitive.name == "functional_while" and e.params["role"] == "forward"]
    stored = [e.params["static_bound"] for e in top if e.params["accumulators"]]
    chunks = [loop.params["static_bound"] for e in top
              for loop in iter_loops(e.params["body_jaxpr"].jaxpr)]
    ckpt = [_checkpoints(e) for e in top if _checkpoints(e)]
    return (stored or chunks or [None])[0], (ckpt or [None])[0]


@functools.lru_cache(maxsize=None)
def whilst_grad(**options):
    """jax.grad of `loss` compiled once per options (the trip count n is data)."""
    return jax.jit(jax.grad(functools.partial(loss, **options), (0, 1)))


@functools.lru_cache(maxsize=None)
def oracle_grad(n):
    return jax.grad(oracle, (0, 1))(X, W, n)


def check_grad(options, n):
    got = whilst_grad(**options)(X, W, n)
    want = oracle_grad(n)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 7, 100, 5000])
def test_unbounded_loop_differentiates_with_no_extra_argument(n):
    check_grad({}, n)


def test_default_budget_stores_chunks_of_a_mebibyte_and_checkpoints_between_them():
    """Stored, a step keeps `cos(w x)` and `x` (32 bytes); past the budget, where
    `cos` would be computed again for each chunk run again, it keeps its input `x`
    (16 bytes), and the gradient computes `cos(w x)` from it (`_carried_rows.py`)."""
    stored, checkpoints = policy()
    rows = whilst.residual_report(functools.partial(loss, maximum_iterations=1), X, W, 7,
                                  argnums=(0, 1))
    assert rows.loops[0].bytes_per_iteration == 32
    assert whilst.ir.DEFAULT_GRADIENT_MEMORY == 1 << 20
    assert 0.9 * (1 << 20) <= stored * 16 <= 1 << 20
    assert checkpoints == 64
    # The report counts a chunk's rows, once (XLA:CPU's forms carry them).
    (chunk,) = whilst.residual_report(loss, X, W, 7, argnums=(0, 1)).loops
    assert (chunk.max_iterations, chunk.bytes_per_iteration) == (stored, 16)


@pytest.mark.parametrize("options, want_policy", [
    (dict(maximum_iterations=40), (40, None)),                 # fits: every step stored
    (dict(maximum_iterations=40, gradient_memory=0), (None, 2)),  # checkpoints only
    (dict(gradient_memory=0), (None, 2)),
    (dict(gradient_memory=60), (None, 2)),                     # 1 row: not worth chunks
    (dict(gradient_memory=136), (6, 2)),                       # chunks of 6 steps
    (dict(maximum_iterations=40, gradient_memory=136), (6, 2)),
    (dict(maximum_iterations=40, gradient_memory=500), (23, 6)),   # 23 rows: 17 + 23 steps
    (dict(maximum_iterations=40, gradient_memory=640), (40, None)),  # 40 inputs fit
])
def test_budgets_force_each_policy_and_the_switch_mid_loop(options, want_policy):
    # Rows of this loop are 2 f32[4] (32 bytes) where they fit, else its input f32[4]
    # (16 bytes), its carry 20 bytes: K >= 2 copies take at most a quarter of the
    # budget (or 2 copies), the rows the rest.
    assert policy(**options) == want_policy
    for n in [0, 1, 2, 3, 4, 22, 23, 24, 40]:
        check_grad(options, n)


def test_checkpoints_and_maximum_iterations_keep_their_meaning():
    assert policy(checkpoints=3, maximum_iterations=50) == (None, 3)
    assert policy(maximum_iterations=50) == (50, None)


@pytest.mark.parametrize("checkpoints", [40, 41, 10**9])
def test_checkpoints_covering_the_bound_store_every_step(checkpoints):
    """K >= maximum_iterations keeps no schedule: a forward While pushing rows and a
    gradient While popping them (the stored path), no checkpoint slot or restore."""
    options = dict(checkpoints=checkpoints, maximum_iterations=40)
    grad = jax.grad(functools.partial(loss, **options), (0, 1))
    jaxpr = jax.make_jaxpr(grad)(X, W, 7).jaxpr
    assert _loop_kinds(jaxpr) == [("forward", checkpoints, 1, 0), ("gradient", None, 0, 1)]
    assert not {"cond", "sort", "dynamic_update_slice", "while"} & set(_primitives(jaxpr))
    for n in [0, 1, 39, 40]:
        check_grad(options, n)


def test_checkpoints_below_the_bound_keep_their_schedule():
    options = dict(checkpoints=39, maximum_iterations=40)
    grad = jax.grad(functools.partial(loss, **options), (0, 1))
    assert _loop_kinds(jax.make_jaxpr(grad)(X, W, 7).jaxpr) == [
        ("forward", 39, 0, 0), ("gradient", 39, 0, 0)]
    check_grad(options, 40)


def test_fori_loop_with_checkpoints_covering_its_trip_count_stores_every_step():
    def f(x, checkpoints):  # more steps than reverse mode inlines
        return jnp.sum(whilst.lax.fori_loop(
            0, 12, lambda i, x: jnp.sin(x) * W + 0.1 * i, x, checkpoints=checkpoints) ** 2)

    def want(x):
        for i in range(12):
            x = jnp.sin(x) * W + 0.1 * i
        return jnp.sum(x ** 2)

    for checkpoints in [12, 2**30]:
        jaxpr = jax.make_jaxpr(jax.grad(functools.partial(f, checkpoints=checkpoints)))(X).jaxpr
        assert [k[2:] for k in _loop_kinds(jaxpr)] == [(1, 0), (0, 1)]
        np.testing.assert_allclose(jax.grad(f)(X, checkpoints), jax.grad(want)(X),
                                   rtol=2e-6, atol=1e-7)
    assert [k[2:] for k in _loop_kinds(
        jax.make_jaxpr(jax.grad(functools.partial(f, checkpoints=11)))(X).jaxpr)] == [
        (0, 0), (0, 0)]


def test_cost_is_flat_in_maximum_iterations():
    # Past the budget, the stored rows stop growing with the bound: chunks of the
    # rows that fit, those of a loop without a bound (3 chunks for 2**17 steps).
    stored = [policy(maximum_iterations=m)[0] for m in [256, 1 << 17, 1 << 30]]
    fit = policy()[0]
    assert stored[0] == 256 and stored[1] == stored[2] == fit < 1 << 16
    assert -(-(1 << 17) // fit) == 3


def _checkpoints(eqn):
    """K of a loop whose gradient policy is `Checkpointed(K)`, else None."""
    return getattr(eqn.params["gradient"], "checkpoints", None)


def _loop_kinds(jaxpr):
    """`(role, checkpoints, pushes, pops)` of each loop at the top of `jaxpr`."""
    return [(e.params["role"], _checkpoints(e), e.params["accumulators"],
             e.params["pops"]) for e in jaxpr.eqns if e.primitive.name == "functional_while"]


def _primitives(jaxpr):
    """The names of the primitives in `jaxpr` and its sub-jaxprs."""
    for e in jaxpr.eqns:
        yield e.primitive.name
        for sub in jax.extend.core.jaxprs_in_params(e.params):
            yield from _primitives(sub)


def test_one_forward_and_one_gradient_while_over_chunks():
    """The forward While runs chunks of stored steps (6 here) and keeps K = 2
    checkpoints; exported, its chunk loop keeps no rows. One gradient While then
    reverses every chunk, the last first, with no branch (no `stablehlo.case` on
    IREE): its body runs a chunk's steps pushing their rows, and their stored
    gradient. The constants' cotangents go through the loops in one accumulator each
    (no sum after them; jax.grad with respect to w only). Its start sorts the slots
    only where the loop ran past its first chunk."""
    grad = jax.grad(functools.partial(loss, X, n=13, gradient_memory=136))
    jaxpr = portable_forms(jax.make_jaxpr(grad)(W)).jaxpr
    (guard,) = [e for e in jaxpr.eqns if e.primitive.name == "cond"]
    no_sort, sort = (set(_primitives(b.jaxpr)) for b in guard.params["branches"])
    assert "sort" in sort and "sort" not in no_sort
    forward, chunks = [e for e in jaxpr.eqns if e.primitive.name == "functional_while"]
    assert _loop_kinds(jaxpr) == [("forward", 2, 0, 0), ("gradient", 2, 0, 0)]
    # the chunk loop as exported (under jax.jit it writes stacks the While carries)
    assert _loop_kinds(forward.params["body_jaxpr"].jaxpr) == [("forward", None, 0, 0)]
    body = chunks.params["body_jaxpr"].jaxpr
    assert _loop_kinds(body) == [("forward", None, 1, 0), ("gradient", None, 0, 1)]
    assert not {"cond", "switch"} & set(_primitives(body))
    assert "add_any" not in [e.primitive.name for e in jaxpr.eqns]


def test_under_jit_rows_are_computed_for_chunk_0_and_the_last_chunk_only():
    """Under jax.jit the forward While runs chunk 0 (and the chunk a loop that runs to
    its bound ends in) writing its rows into the stacks it carries, and its other
    chunks keeping none: `cos`, which only the rows need, is computed in one of its
    two chunk loops only. The last chunk's steps then run again writing theirs (0
    steps where that chunk wrote them). A step whose rows take no computation of their
    own (`y * y`: its row is `y`, the step's input) writes every chunk's rows, and so
    does a body holding a loop (one chunk loop: the copies would multiply with the
    nesting)."""
    def forward_loops(fn, *args):
        jaxpr = xla_cpu_forms(jax.make_jaxpr(fn)(*args)).jaxpr
        return [e for e in jaxpr.eqns if e.primitive.name == "functional_while"
                and e.params["role"] == "forward"]

    def summed(x, w, n, loop=whilst.while_loop, **options):
        """A step whose rows (`cos(w s)` and `s`, 8 bytes) take fewer bytes than
        its input (`x`, 16 bytes): past the budget it keeps them (not `x`)."""
        _, x = loop(lambda i, x: i < n,
                    lambda i, x: (i + 1, x + 0.01 * jnp.sin(w * jnp.sum(x))), [0, x],
                    **options)
        return jnp.sum(x ** 2)

    grad = jax.grad(functools.partial(summed, X, n=20, gradient_memory=64))
    np.testing.assert_allclose(jax.jit(grad)(W), jax.grad(functools.partial(
        summed, X, n=20, loop=unrolled))(W), rtol=1e-5)
    forward, last = forward_loops(grad, W)
    chunk_loops = list(iter_loops(forward.params["body_jaxpr"].jaxpr))
    assert sorted("cos" in _primitives(e.params["body_jaxpr"].jaxpr)
                  for e in chunk_loops) == [False, True]
    assert "cos" in _primitives(last.params["body_jaxpr"].jaxpr)
    assert last.params["static_bound"] == 3

    def one_chunk_loop(fn, *args):
        (outer, *_) = forward_loops(jax.grad(fn), *args)
        chunk_loops = [e for e in outer.params["body_jaxpr"].jaxpr.eqns
                       if e.primitive.name == "functional_while"]
        return len(chunk_loops) == 1 and chunk_loops[0].params["static_bound"] is not None

    assert one_chunk_loop(lambda x: whilst.while_loop(
        lambda t, y: t < 3.0, lambda t, y: (t + 1.0, y * y), [0.0, x])[1], 1.0)

    def nested(x, loop=whilst.while_loop, **inner_options):
        def body(t, x):
            y = loop(lambda k, y: y < 2.0, lambda k, y: (k + 1, y * 1.5), [0, x],
                     **inner_options)[1]
            return t + 1.0, jnp.sin(y) * 0.5
        return loop(lambda t, x: t < 3.0, body, [0.0, x])[1]

    # the inner loop's steps keep no rows (none to store, whatever its budget), the
    # outer in chunks of its rows
    assert one_chunk_loop(functools.partial(nested, gradient_memory=0), 1.0)
    for v in [0.3, 1.0, 2.5]:
        want = jax.grad(functools.partial(nested, loop=unrolled))(v)
        got = jax.jit(jax.grad(functools.partial(nested, gradient_memory=0)))(v)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_jit_vmap_per_example_trip_counts_and_switch():
    ns = jnp.array([0, 2, 5, 30])
    xs = jnp.stack([X, X * 0.5, X + 0.3, -X])
    options = dict(gradient_memory=136)
    got = jax.jit(jax.vmap(jax.grad(lambda x, n: loss(x, W, n, **options))))(xs, ns)
    want = [jax.grad(oracle)(x, W, int(n)) for x, n in zip(xs, ns)]
    np.testing.assert_allclose(got, np.stack(want), rtol=2e-5, atol=1e-6)
    got = jax.grad(lambda xs: jax.vmap(lambda x, n: loss(x, W, n, **options))(xs, ns).sum())(xs)
    np.testing.assert_allclose(got, np.stack(want), rtol=2e-5, atol=1e-6)


D = 64  # the loop: y <- sin(a y) * 0.9 + 0.1 over 64 floats
SIN_ARGS = (np.random.default_rng(0).uniform(-1, 1, D).astype(np.float32), np.float32(1.1))


def sin_loss(y, a, n, bound, **options):
    """sum(y) after n steps of the issue's loop, `maximum_iterations=bound`."""
    _, y = whilst.while_loop(lambda i, y: i < n,
                             lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                             [0, y], maximum_iterations=bound, **options)
    return jnp.sum(y)


def sin_oracle(y, a, n):
    _, y = unrolled(lambda i, y: i < n, lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                    [0, y])
    return jnp.sum(y)


@pytest.mark.parametrize("n", [10**3, 10**4, 10**6])
def test_jit_temp_memory_is_the_rows_that_fit_the_budget(n):
    """XLA's compiled memory analysis (deterministic) of the default policy's gradient
    under jax.jit: n steps' rows (2 x 64 floats each) where they fit the 1 MiB budget
    (10^3 steps), else about 1 MiB, one copy of a chunk's stacks, at any length: there
    the chunk loops write the stacks both Whiles carry in place (pushing into stacks
    of their own, as exports do, took 4.1 MiB)."""
    grad = jax.jit(jax.grad(functools.partial(sin_loss, n=n, bound=n), (0, 1)))
    temp = grad.lower(*SIN_ARGS).compile().memory_analysis().temp_size_in_bytes
    rows = min(n * 2 * D * 4, whilst.ir.DEFAULT_GRADIENT_MEMORY)
    assert rows <= temp <= 1.07 * rows + 64 * 1024, (temp, rows)


def sin_grad_numpy(y, a, n):
    """`(d sin_loss / d y, d sin_loss / d a)` by hand, in float64: the steps forwards,
    then their chain rule backwards."""
    ys = [np.float64(y)]
    for _ in range(n):
        ys.append(np.sin(a * ys[-1]) * 0.9 + 0.1)
    dy, da = np.ones_like(ys[0]), 0.0
    for y in reversed(ys[:-1]):
        slope = 0.9 * np.cos(a * y)
        dy, da = dy * slope * a, da + np.sum(dy * slope * y)
    return dy, da


def _rows_and_cos(grad, *args):
    """`(pushed, chunk_rows, cos_forwards, cos_backwards)` of the loops in `grad`'s
    jaxpr (XLA:CPU's forms): the row shapes the stored forward While pushes and those
    of the budget's chunk stacks, sorted, and whether any forward loop and any
    gradient While computes `cos`."""
    loops = list(iter_loops(xla_cpu_forms(jax.make_jaxpr(grad)(*args)).jaxpr))
    pushed = sorted(tuple(a.shape) for e in loops
                    if e.params["role"] == "forward" and e.params["accumulators"]
                    for a in e.params["body_jaxpr"].out_avals[-e.params["accumulators"]:])
    chunks = sorted(shape[1:] for e in loops
                    if hasattr(e.params["gradient"], "chunk_stacks")
                    for shape, _ in e.params["gradient"].chunk_stacks)

    def cos(role):
        return any("cos" in _primitives(e.params["body_jaxpr"].jaxpr)
                   for e in loops if e.params["role"] == role)
    return pushed, chunks, cos("forward"), cos("gradient")


@pytest.mark.parametrize("on", ["jit", "eager"])
def test_past_the_budget_a_step_keeps_its_input_where_its_rows_cost_computation(on):
    """The issue's loop keeps `cos(a y)` and `y` a step (512 bytes) where they fit
    the budget (1000 steps). Past it, where each chunk run again would compute
    `cos` again, it keeps its input `y` (256 bytes) and the gradient's step computes
    `cos(a y)` from it: 4000 steps' rows then fit, stored, and 10^4 steps run in
    chunks of 4031, no forward loop computing `cos`. A step whose rows are its own
    output (`tanh(M y)`: recomputing them would cost the step again) keeps them.
    Gradients against the chain rule in numpy."""
    def grad(n):
        return jax.grad(functools.partial(sin_loss, n=n, bound=n), (0, 1))

    assert _rows_and_cos(grad(1000), *SIN_ARGS) == ([(D,), (D,)], [], True, False)
    assert _rows_and_cos(grad(4000), *SIN_ARGS) == ([(D,)], [], False, True)
    assert _rows_and_cos(grad(10**4), *SIN_ARGS)[1:] == ([(D,)], False, True)
    assert chunk_steps(grad(10**4), *SIN_ARGS) == {4031}
    for n in [1000, 4000, 10**4]:
        for got, want in zip((jax.jit(grad(n)) if on == "jit" else grad(n))(*SIN_ARGS),
                             sin_grad_numpy(*SIN_ARGS, n)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5, err_msg=f"n={n}")

    M = np.random.default_rng(1).standard_normal((D, D)).astype(np.float32) / np.sqrt(D)

    def tanh_grad(n):
        def tanh_loss(y, m):
            _, y = whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, jnp.tanh(m @ y)),
                                     [0, y], maximum_iterations=n)
            return jnp.sum(y)
        return jax.grad(tanh_loss, (0, 1))

    stored_rows = _rows_and_cos(tanh_grad(100), SIN_ARGS[0], M)[0]   # JAX's residuals
    assert len(stored_rows) > 1
    assert _rows_and_cos(tanh_grad(10**4), SIN_ARGS[0], M)[1] == stored_rows


@pytest.mark.iree
def test_chunk_loops_run_as_many_steps_per_iteration_as_the_stored_path_on_iree():
    """Past the budget, the chunk loop that keeps rows (the gradient While's
    recomputation of each chunk, the last one's included) pushes them as the stored
    path's forward While does, so IREE runs them as it runs that
    loop: as many steps per emitted iteration, with the same dispatches and
    submissions each, and nothing read back (they wrote their rows themselves, one
    step and one submission per iteration). The forward While's chunk loop, which
    keeps none, costs no more per iteration than the stored path's. The module
    compiles with aggressive fusion, as the stored path's does (its checkpoint slot
    writes unflagged, `iree_limits/rereading_scatter.mlir`; with the default fusion the
    chunk loops ran 52 and 106 dispatches per iteration against 10 and 55), and its
    gradient, 1000 steps in chunks of 192, equals the chain rule's in numpy. (With
    respect to `y` only: its rows, `cos(a y)`, take as many bytes as its input `y`,
    which it would keep instead with respect to `a` too, `_carried_rows.py`.)"""
    def exported(**options):
        grad = jax.grad(functools.partial(sin_loss, n=1000, bound=1000, **options))
        return whilst.export(grad, *SIN_ARGS)

    def costs(exported):
        costs = loop_costs(host_driven_stream(prepare([exported])))
        return sorted((c["readbacks"], c["dispatches"], c["submissions"]) for c in costs)

    stored = costs(exported())                    # 1000 rows fit the default budget
    chunked_export = exported(gradient_memory=1 << 16)    # chunks of 240 steps
    chunked = costs(chunked_export)
    assert len(stored) == 2 and all(loads == 0 for loads, _, _ in stored), stored
    forward = next(cost for cost in stored if cost in chunked)
    rowless = list(chunked)
    for cost in stored:
        assert cost in rowless, (chunked, stored)
        rowless.remove(cost)
    assert len(rowless) == 1 and rowless[0] <= forward, (chunked, stored)
    compiled = whilst.compile(chunked_export)
    assert FALLBACK_NOTE not in compiled.stages[-1][0], compiled.stages
    got = compiled.load("local-sync")(*SIN_ARGS)
    np.testing.assert_allclose(got, sin_grad_numpy(*SIN_ARGS, 1000)[0], rtol=1e-3, atol=1e-5)


@pytest.mark.iree
@pytest.mark.parametrize("memory, bound, literal_n", [
    (64, 100, None),      # less than a carry: checkpoints only
    (1024, None, None),   # 1 KiB, no bound: checkpoints only
    (8192, 100, 41),      # chunks of 24 steps, the trip count a literal
])
def test_tiny_budgets_and_chunks_on_iree(memory, bound, literal_n):
    """Budgets of 64 bytes to 8 KiB compile and run on IREE, with a bound and without;
    against jax.grad of the unrolled loop. With a literal trip count: a module that
    IREE 3.13 compiled with default fusion only while its slot writes were flagged
    `unique_indices` (`iree_limits/rereading_scatter.mlir`), and whose every call past
    the first chunk failed so ("ref is null") while gathers from a `stablehlo.case`'s
    results were fenced (`iree_limits/budget_chunk_stacks.py`); it now compiles with
    aggressive fusion, those gathers fenced."""
    if literal_n is None:
        grad = jax.grad(functools.partial(sin_loss, bound=bound, gradient_memory=memory),
                        (0, 1))
        module = whilst.compile(grad, *SIN_ARGS, np.int32(0)).load("local-sync")
        runs = [(n, module(*SIN_ARGS, np.int32(n))) for n in (0, 1, 23, 24, 97)]
    else:
        grad = jax.grad(functools.partial(sin_loss, n=literal_n, bound=bound,
                                          gradient_memory=memory), (0, 1))
        runs = [(literal_n, whilst.compile(grad, *SIN_ARGS).load("local-sync")(*SIN_ARGS))]
    for n, got in runs:
        want = jax.grad(sin_oracle, (0, 1))(*SIN_ARGS, n)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"n={n}")


@pytest.mark.iree
def test_vmap_of_grad_over_a_batch_of_one_on_iree():
    """A batch of one: IREE 3.13 folds its unit dimension, and each lane's gather of one
    element became a read at a computed position after a reduction, which crashed
    iree-compile (`iree_limits/point_gather_after_reduction.mlir`)."""
    grad = jax.vmap(jax.grad(lambda x, n: loss(x, W, n, gradient_memory=136)))
    xs = X[None].astype(np.float32)
    module = whilst.compile(grad, xs, np.zeros(1, np.int32)).load()
    for n in [0, 2, 5, 30]:
        want = jax.grad(oracle)(xs[0], W, n)
        np.testing.assert_allclose(module(xs, np.array([n], np.int32))[0], want, rtol=2e-5,
                                   atol=1e-6, err_msg=f"n={n}")


@pytest.mark.iree
@pytest.mark.parametrize("memory", [136, 260])  # chunks of 3 and 6 steps, K = 2 and 3
def test_vmap_of_grad_across_the_switch_on_iree(memory):
    """Lanes that end in the first chunk, at its end, and many chunks later, in one
    batch, compiled by IREE; against jax.grad of the unrolled loop."""
    grad = jax.vmap(jax.grad(lambda x, n: loss(x, W, n, gradient_memory=memory)))
    xs = np.stack([X, X * 0.5, X + 0.3, -X]).astype(np.float32)
    module = whilst.compile(grad, xs, np.zeros(4, np.int32)).load()
    for ns in [[0, 2, 5, 30], [3, 4, 1, 17]]:
        ns = np.array(ns, np.int32)
        want = [jax.grad(oracle)(x, W, int(n)) for x, n in zip(xs, ns)]
        np.testing.assert_allclose(module(xs, ns), np.stack(want), rtol=2e-5, atol=1e-6,
                                   err_msg=f"ns={ns}")


@pytest.mark.parametrize("on", ["jit", "eager", pytest.param("iree", marks=pytest.mark.iree)])
def test_a_bounded_loop_past_its_budget_ends_its_last_chunk_at_the_bound(on):
    """A budget of 12 rows (260 bytes) and a bound of 20 steps: chunk 0 of 8 steps
    and chunk 1 of 12, so that a loop that runs to its bound ends a full chunk (the
    one whose rows the forward keeps under jit) and the chunk run again is the short
    one; with no bound, chunks of 12 from step 0. The gradient at every trip count,
    across both chunks' ends, against the unrolled loop's."""
    def bounded(x, w, n):
        return loss(x, w, n, gradient_memory=260, maximum_iterations=20)

    assert chunk_steps(jax.grad(lambda x, n: loss(x, W, n, gradient_memory=260)), X, 20) == {12}
    assert chunk_steps(jax.grad(bounded), X, W, 20) == {12}
    _, linear = jax.linearize(lambda x: bounded(x, W, 20), X)
    assert [(e.params["chunks"].S, e.params["chunks"].lead)
            for e in jax.make_jaxpr(linear)(X).eqns
            if e.primitive.name == "budget_linear_while"] == [(12, 4)]
    grad = jax.grad(bounded, (0, 1))
    if on == "jit":
        grad = jax.jit(grad)
    elif on == "iree":
        grad = whilst.compile(grad, X, W, np.int32(20)).load("local-sync")
    for n in range(21):
        for got, want in zip(grad(X, W, np.int32(n)), jax.grad(oracle, (0, 1))(X, W, n)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=f"n={n}")


@pytest.mark.parametrize("n", [2, 3, 9])
def test_grad_of_grad_across_the_switch(n):
    options = dict(gradient_memory=136)
    got = jax.grad(lambda w: jax.grad(loss)(X, w, n, **options).sum())(W)
    want = jax.grad(lambda w: jax.grad(oracle)(X, w, n).sum())(W)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_nested_unbounded_loops():
    # Inner and outer loops have no bound; the tiny budget makes both chunked.
    def f(x, a):
        def outer_body(i, x):
            _, y = whilst.while_loop(lambda j, y: j <= i, lambda j, y: (j + 1, jnp.sin(y) * a + x),
                                     [0, x], gradient_memory=30)
            return i + 1, y * 0.9
        return whilst.while_loop(lambda i, x: i < 6, outer_body, [0, x],
                                 gradient_memory=30)[1]

    for got, want in zip(jax.grad(f, (0, 1))(0.6, 0.7),
                         jax.grad(lambda x, a: nested_sin_oracle(x, 6, a), (0, 1))(0.6, 0.7)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("memory", [512, 2048])
def test_nested_loop_in_chunks_past_the_first(memory):
    """An outer loop in chunks of 2 (512 bytes) or 9 (2048) steps whose body holds a
    loop: under jax.jit its gradient While reverses the last chunk in its first
    trip, from the forward's stacks; eagerly the last chunk's gradient runs first.
    Trip counts from 0 to 10 chunks."""
    f = functools.partial(nested_in_chunks, gradient_memory=memory)
    jitted = jax.jit(jax.grad(f, (0, 1)))
    ns = [0, 1, 3, 7, 20]
    wants = [jax.grad(nested_in_chunks_oracle, (0, 1))(X, W, n) for n in ns]
    for n, want in zip(ns, wants):
        for got in [jitted(X, W, n), jax.grad(f, (0, 1))(X, W, n)]:
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    # each example its own trip count
    batched = jax.jit(jax.vmap(jax.grad(f, (0, 1)), in_axes=(None, None, 0)))(
        X, W, jnp.array(ns))
    for g, w in zip(batched, map(np.stack, zip(*wants))):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_data_dependent_stop_with_no_bound():
    # The trip count depends on the data only; the forward tests cond between chunks.
    def f(x):
        return whilst.while_loop(lambda x: jnp.sum(x) < 20.0, lambda x: x * 1.1 + 0.05, [x],
                                 gradient_memory=64)

    def g(x):
        return unrolled(lambda x: jnp.sum(x) < 20.0, lambda x: x * 1.1 + 0.05, [x])[0]

    for x0 in [X, X * 10, X * 0.01]:
        np.testing.assert_allclose(jax.jacrev(f)(x0), jax.jacrev(g)(x0), rtol=1e-5)
        v, t = jax.jvp(f, (x0,), (jnp.ones(4),))
        np.testing.assert_allclose(t, jax.jvp(g, (x0,), (jnp.ones(4),))[1], rtol=1e-5)


def decaying(y, c, n, **options):
    """`y` after steps `y <- y * c` while a float counter `t < n`: a step that keeps no
    residual rows where `c` is not differentiated (it is linear in the carry)."""
    return whilst.while_loop(lambda t, y: t < n, lambda t, y: (t + 1.0, y * c), [0.0, y],
                             **options)[1]


def _loops_and_schedules(jaxpr):
    """`(loops, schedules)`: the functional Whiles in `jaxpr` and its sub-jaxprs, and
    the checkpointed policies among theirs (the budget's Whiles over chunks, a
    checkpoint schedule)."""
    loops = list(iter_loops(jaxpr))
    return loops, [e.params["gradient"] for e in loops
                   if isinstance(e.params["gradient"], whilst.ir.Checkpointed)]


@pytest.mark.parametrize("gradient_memory", [None, 0])
def test_a_loop_whose_steps_keep_no_rows_stores_every_step_at_any_length(gradient_memory):
    """A loop without a bound whose steps keep no residual rows (TensorFlow's `x * 2.0`
    loops) fits any budget, 0 included: it stores every step, with no chunks, no
    schedule and no recomputation; under jax.jit one forward and one gradient While,
    and temporaries that do not grow with its steps (10^6 here). Against
    the unrolled loop (few steps) and a float32 product in numpy (10^6)."""
    options = {} if gradient_memory is None else dict(gradient_memory=gradient_memory)
    grad = jax.grad(functools.partial(decaying, **options))
    loops, schedules = _loops_and_schedules(jax.make_jaxpr(grad)(1.0, 0.5, 3.0).jaxpr)
    assert [e.params["role"] for e in loops] == ["forward", "gradient"] and not schedules
    compiled = jax.jit(grad).lower(1.0, 0.5, 3.0).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < 4096
    for y, c, n in [(1.0, 0.5, 0.0), (2.0, 0.5, 3.0), (0.7, 1.5, 40.5)]:
        want = jax.grad(lambda y: unrolled(lambda t, y: t < n, lambda t, y: (t + 1.0, y * c),
                                           [0.0, y])[1])(y)
        np.testing.assert_allclose(compiled(y, c, n), want, rtol=1e-6)
    c = np.float32(0.9999993)
    want = np.cumprod(np.full(10**6, c, np.float32))[-1]
    np.testing.assert_allclose(compiled(1.0, c, 1e6), want, rtol=1e-6)


def test_a_gradient_that_keeps_no_rows_keeps_to_the_budget_differentiated_again():
    """With respect to `y`, `decaying`'s steps keep no rows (`c` is a constant): its
    first derivative stores every step with no bound. Differentiated again with respect
    to `c`, the steps of that forward While and of its gradient While (`ct * c`) keep
    rows: both then run in the budget's chunks, as the loop would (XLA temporaries
    about the budget at 10^5 steps, not rows for every step an int32 counts)."""
    second = jax.grad(jax.grad(decaying), 1)
    loops, schedules = _loops_and_schedules(jax.make_jaxpr(second)(1.0, 0.5, 3.0).jaxpr)
    assert schedules and not [e for e in loops if e.params["static_bound"] is None
                              and isinstance(e.params["gradient"], whilst.ir.EveryStep)]
    compiled = jax.jit(second).lower(1.0, 0.5, 3.0).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < 2 * whilst.ir.DEFAULT_GRADIENT_MEMORY
    for y, c, n in [(1.0, 0.5, 0.0), (2.0, 0.5, 3.0), (0.7, 1.01, 40.5)]:
        want = jax.grad(jax.grad(lambda y, c: unrolled(
            lambda t, y: t < n, lambda t, y: (t + 1.0, y * c), [0.0, y])[1]), 1)(y, c)
        np.testing.assert_allclose(compiled(y, c, n), want, rtol=1e-5)
    c = np.float32(0.99999)
    np.testing.assert_allclose(compiled(1.0, c, 1e5), 1e5 * np.float64(c) ** (1e5 - 1),
                               rtol=2e-3)


@pytest.mark.iree
def test_a_loop_whose_steps_keep_no_rows_on_iree():
    """The same loop's gradient, exported with no bound and no stacks, on IREE."""
    module = whilst.compile(jax.grad(decaying), 1.0, 0.5, 3.0).load("local-sync")
    for y, c, n in [(1.0, 0.5, 0.0), (2.0, 0.5, 3.0), (0.7, 1.5, 40.5)]:
        want = jax.grad(lambda y: unrolled(lambda t, y: t < n, lambda t, y: (t + 1.0, y * c),
                                           [0.0, y])[1])(y)
        np.testing.assert_allclose(module(np.float32(y), np.float32(c), np.float32(n)), want,
                                   rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_a_body_with_a_debug_callback_runs_each_step_once_forwards(jit):
    """The forward While of a body with effects writes its rows as under jax.jit,
    where it runs each step once (exported, the last chunk's steps would run
    twice): the callback sees the 17 steps once each when every row fits, and the
    chunks' steps again, recomputed for their gradient, past a small budget."""
    def body(i, y):
        jax.debug.callback(lambda i: calls.append(int(i)), i)
        return i + 1, y * 1.1 + 0.01 * jnp.sin(y)

    def f(y, **options):
        return whilst.while_loop(lambda i, y: y < 5.0, body, [0, y], **options)[1]

    calls = []
    want = jax.grad(lambda y: unrolled(lambda i, y: y < 5.0, body, [0, y])[1])(1.0)
    assert calls == list(range(17))
    for options, want_calls in [({}, list(range(17))), (dict(gradient_memory=24), None)]:
        calls = []
        grad = jax.grad(functools.partial(f, **options))
        got = (jax.jit(grad) if jit else grad)(1.0)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        if want_calls is not None:
            assert calls == want_calls
        else:
            assert sorted(set(calls)) == list(range(17)) and len(calls) > 17


_EAGER_PEAK_RSS = """
import resource
import jax, jax.numpy as jnp
import whilst

def f(x, a):
    _, y = whilst.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, jnp.sin(a * y) * 0.9),
                             [0, x], gradient_memory=2**31)
    return jnp.sum(y)

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
grads = jax.grad(f, (0, 1))(jnp.linspace(0.1, 1.0, 64), jnp.float32(1.1))
jax.block_until_ready(grads)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, *map(float, grads[1:]))
"""


def test_eager_gradient_touches_only_the_rows_written_of_a_large_budget():
    """Eagerly (no jax.jit) a 2 GiB budget is allocated but, as under jax.jit, not
    written: the forward While runs in the program that makes its stacks, and the
    gradient While pushes its chunks' rows instead of carrying the forward's stacks
    (standalone programs copied them whole: the peak RSS grew by 4.1 GB)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, "-c", _EAGER_PEAK_RSS], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr
    grown_kib, grad_a = map(float, run.stdout.split())
    assert grown_kib < 256 * 1024, f"peak RSS grew by {grown_kib / 1024:.0f} MiB"

    def unrolled_f(a):
        y = jnp.linspace(0.1, 1.0, 64)
        for _ in range(5):
            y = jnp.sin(a * y) * 0.9
        return jnp.sum(y)
    np.testing.assert_allclose(grad_a, jax.grad(unrolled_f)(jnp.float32(1.1)), rtol=1e-5)


def test_eager_gradient_takes_the_trip_count_and_stores_a_loop_whose_rows_fit(caplog):
    """Eagerly each loop is a program compiled per call, and reverse mode runs the
    loop once for its trip count n, then linearizes n steps: a loop whose n rows
    fit compiles that run, its stored forward and stored gradient, and no While
    over chunks; one whose rows do not fit compiles the budget's loops for chunks
    of one length, the last chunk's stored gradient first. Counted on a second
    call, when JAX has compiled the ops it runs one by one."""
    def grow(x):
        return x * 1.1 + 0.05 * jnp.cos(x)

    def f(x, limit):   # chunks of 24 steps; the stop depends on the data alone
        return jnp.sum(whilst.while_loop(lambda x: jnp.sum(x) < limit, grow, [x],
                                         gradient_memory=512))

    def compiles(limit):
        grad = jax.grad(f)
        jax.block_until_ready(grad(X, limit))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jax"), jax.log_compiles(True):
            got = jax.block_until_ready(grad(X, limit))
        want = jax.grad(lambda x: jnp.sum(unrolled(lambda x: jnp.sum(x) < limit, grow,
                                                   [x])[0]))(X)
        np.testing.assert_allclose(got, want, rtol=1e-4)   # 63 steps grow errors 400x
        return sum(r.getMessage().startswith("Compiling ") for r in caplog.records)

    assert compiles(20.0) == 3     # 22 steps: the trip count, forward, gradient
    assert compiles(1e3) == 4      # 63 steps: and the gradient While over chunks
