"""Loops that test a counter stepped by 1 against a loop invariant (`i < n`) are
bounded by their trip count (`whilst.ir._trip_count`): every such form runs its
steps as a Python loop does, at the edges of its integer type too, under jax.jit
(XLA) and on IREE, where the loop reads nothing back per emitted iteration."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import host_driven_stream
from whilst.ir._trip_count import counter_trips
from whilst.lowering import loop_counts, prepare

I32 = np.iinfo(np.int32)
# The limit `n * 2 - 3` of numpy scalars at the dtype's ends wraps, in the oracle and
# in the cond as traced, as the loop's int32 arithmetic does.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in scalar multiply")

# (name, cond(i, n), step(i), dtype): each a form the trip count follows from.
FORMS = [
    ("up", lambda i, n: i < n, lambda i: i + 1, np.int32),
    ("limit_first", lambda i, n: n > i, lambda i: 1 + i, np.int32),
    ("down", lambda i, n: i > n, lambda i: i - 1, np.int32),
    ("down_limit_first", lambda i, n: n < i, lambda i: i - 1, np.int32),
    ("computed_limit", lambda i, n: i < n * 2 - 3, lambda i: i + 1, np.int32),
    ("literal_limit", lambda i, n: i < 9, lambda i: i + 1, np.int32),
    ("int8", lambda i, n: i < n, lambda i: i + np.int8(1), np.int8),
    ("uint8_down", lambda i, n: i > n, lambda i: i - np.uint8(1), np.uint8),
]


def python_loop(i, n, cond, step, dtype, bound, cap=301):
    """(i, steps) after the loop in numpy arithmetic of `dtype` (wrapping as JAX's
    does), counting at most `cap` steps."""
    i, n, steps = np.array(i, dtype), np.array(n, dtype), 0
    while steps < min(bound, cap) and bool(cond(i, n)):
        i, steps = np.array(step(i), dtype), steps + 1
    return int(i), steps


def counted(form, bound=None):
    _, cond, step, dtype = form

    def f(i0, n, x):
        return whilst.while_loop(lambda i, s, x: cond(i, n),
                                 lambda i, s, x: (step(i), s + 1, x * 0.5 + 1.0),
                                 [i0, jnp.int32(0), x], maximum_iterations=bound)
    return f


def starts(dtype):
    """(i0, n) pairs: 0 to a few steps, none (i0 past n), and the dtype's extremes."""
    info = np.iinfo(dtype)
    small = [(0, n) for n in range(0, 6)] + [(5, 2), (3, 3)]
    return small + [(info.min, info.max), (info.max, info.min), (info.min + 1, info.min)]


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_counter_tested_loops_run_their_python_trip_count_under_jit(form):
    name, cond, step, dtype = form
    for bound in (None, 7):
        run = jax.jit(counted(form, bound))
        for i0, n in starts(dtype):
            want_i, want_steps = python_loop(i0, n, cond, step, dtype,
                                             I32.max if bound is None else bound)
            if want_steps > 300:
                continue  # a long loop: the bounded run covers its start
            i, s, x = run(dtype(i0), dtype(n), np.float32(3.0))
            assert (int(i), int(s)) == (want_i, want_steps), (name, bound, i0, n)
            want_x = np.float32(3.0)
            for _ in range(want_steps):
                want_x = np.float32(want_x * np.float32(0.5) + np.float32(1.0))
            assert x == want_x, (name, bound, i0, n)


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_a_known_start_and_limit_bound_the_loop_by_its_trip_count(form):
    """A counter started and limited by values known at trace time (a Python or
    numpy scalar) gives the loop its trip count as its static bound (the least of
    it and maximum_iterations), under jax.jit too, and the loop runs as in Python."""
    name, cond, step, dtype = form
    for bound in (None, 3):
        for i0, n in starts(dtype):
            want_i, want_steps = python_loop(i0, n, cond, step, dtype,
                                             I32.max if bound is None else bound)
            if want_steps > 300:
                continue
            f = functools.partial(counted(form, bound), dtype(i0), dtype(n))
            (loop,) = jax.make_jaxpr(f)(np.float32(3.0)).eqns
            assert loop.params["static_bound"] == want_steps, (name, bound, i0, n)
            i, s, x = jax.jit(f)(np.float32(3.0))
            assert (int(i), int(s)) == (want_i, want_steps), (name, bound, i0, n)


def test_a_traced_start_or_limit_leaves_the_loop_unbounded():
    def f(i0, n, x, **options):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5),
                                 [i0, x], **options)

    def static_bound(*args, **options):
        (loop,) = jax.make_jaxpr(functools.partial(f, **options))(*args).eqns
        return loop.params["static_bound"]

    assert static_bound(np.int32(0), np.int32(5), np.float32(1)) is None   # all traced
    assert static_bound(np.int32(0), np.int32(5), np.float32(1), maximum_iterations=9) == 9
    # i0 known, n traced (closed over) and the reverse
    assert jax.make_jaxpr(lambda n, x: f(0, n, x))(5, 1.0).eqns[0].params["static_bound"] \
        is None
    assert jax.make_jaxpr(lambda i0, x: f(i0, 5, x))(0, 1.0).eqns[0].params["static_bound"] \
        is None
    assert jax.make_jaxpr(lambda x: f(0, 5, x, maximum_iterations=9))(
        1.0).eqns[0].params["static_bound"] == 5
    two = jnp.int32(2)   # a JAX array made outside the trace is concrete
    assert jax.make_jaxpr(lambda x: f(two, 5, x))(1.0).eqns[0].params["static_bound"] == 3
    lax_loop = jax.make_jaxpr(lambda x: whilst.lax.while_loop(
        lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 2.0), (0, x)))(1.0)
    assert lax_loop.eqns[0].params["static_bound"] == 4


def test_a_trip_count_past_int32_is_capped_by_the_bound():
    """int32 from its minimum to its maximum: 2**32 - 1 steps, as an unsigned
    distance, capped at the bound (which the loop's int32 counter holds)."""
    f = jax.jit(counted(FORMS[0], 1000))
    i, s, _ = f(np.int32(I32.min), np.int32(I32.max), np.float32(0))
    assert (int(i), int(s)) == (I32.min + 1000, 1000)


@pytest.mark.iree
def test_counter_tested_loops_on_iree_read_nothing_back_and_run_every_trip_count():
    exports = [whilst.export(counted(form), form[3](0), form[3](0), np.float32(0),
                             name=form[0]) for form in FORMS]
    for e in exports:
        assert all(loads == 0 for loads, _ in loop_counts(host_driven_stream(prepare([e])))), \
            e.text[:200]
    module = whilst.compile(exports).load()
    for name, cond, step, dtype in FORMS:
        more = [(0, n) for n in [*range(60, 70), 130] if n <= np.iinfo(dtype).max]
        for i0, n in starts(dtype) + more:
            want_i, want_steps = python_loop(i0, n, cond, step, dtype, I32.max)
            if want_steps > 300:
                continue
            i, s, x = getattr(module, name)(dtype(i0), dtype(n), np.float32(3.0))
            assert (int(i), int(s)) == (want_i, want_steps), (name, i0, n)


@pytest.mark.parametrize("cond, step", [
    (lambda i, n, x: i < n, lambda i: i + 3),             # stride 3: may step over n
    (lambda i, n, x: i > n, lambda i: i + 1),             # moving away: wraps
    (lambda i, n, x: i <= n, lambda i: i + 1),            # never false at the maximum
    (lambda i, n, x: (i < n) & (x < 5.0), lambda i: i + 1),  # a second test
    (lambda i, n, x: i < x.astype(jnp.int32), lambda i: i + 1),  # limit from the carry
])
def test_other_tests_keep_their_loop_test(cond, step):
    def f(i0, n, x):
        return whilst.while_loop(lambda i, x: cond(i, n, x), lambda i, x: (step(i), x + 1.0),
                                 [i0, x])

    jaxpr = jax.make_jaxpr(f)(np.int32(0), np.int32(3), np.float32(0)).eqns[0].params
    assert counter_trips(jaxpr["cond_jaxpr"], jaxpr["cond_nconsts"], jaxpr["body_jaxpr"],
                         jaxpr["body_nconsts"]) is None


@pytest.mark.iree
def test_a_traced_negative_bound_runs_no_step_on_iree():
    """A traced maximum_iterations may be negative, as far down as int32's minimum:
    the counted loop (k = 64, full iterations tested `i < bound - 63`) takes no
    step, where the bound's arithmetic could wrap."""
    def f(x, n, m):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5 + 1.0),
                                 [0, x], maximum_iterations=m)

    x = np.ones(4, np.float32)
    module = whilst.compile(f, x, np.int32(0), np.int32(0)).load()
    for n, m in [(10, -1), (10, -63), (10, I32.min), (10, I32.min + 5), (100, 70), (5, 70)]:
        i, y = module.main(x, np.int32(n), np.int32(m))
        steps = max(0, min(n, m))
        want = x
        for _ in range(steps):
            want = want * np.float32(0.5) + np.float32(1.0)
        assert int(i) == steps, (n, m, i)
        np.testing.assert_array_equal(y, want)
