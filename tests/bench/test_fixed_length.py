"""bench/fixed_length.py: the fixed-length twin of a whilst program (each loop a
`lax.scan` of the steps it took) records the trip counts a plain Python loop takes
and computes what the whilst program computes, forward, vmapped with per-lane
trip counts, and differentiated (on JAX; bench/iree_vs_jax.py runs it on IREE)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from fixed_length import Trips, fixed_length, trip_counts  # bench/fixed_length.py
from whilst.ir import iter_loops
from whilst.lowering import unroll_factors


def steps(x, limit):
    """x = sin(x) * 1.3 + 0.2 while sum(x^2) < limit, at most 40 steps; and the
    steps of a second loop, x = x * 0.5 while max|x| > 0.1."""
    _, x, s = whilst.while_loop(lambda i, x, s: s < limit,
                                lambda i, x, s: (i + 1, jnp.sin(x) * 1.3 + 0.2,
                                                 s + jnp.sum(x * x)),
                                [0, x, 0.0], maximum_iterations=40, name="grow")
    halvings, x = whilst.lax.while_loop(lambda c: jnp.max(jnp.abs(c[1])) > 0.1,
                                        lambda c: (c[0] + 1, c[1] * 0.5), (0, x),
                                        name="halve")
    return x, s, halvings


def python_steps(x, limit):
    """`steps` as plain numpy loops: (x, s, halvings, steps of each loop)."""
    x, s, grow = np.asarray(x, np.float64), 0.0, 0
    while grow < 40 and s < limit:
        x, s, grow = np.sin(x) * 1.3 + 0.2, s + np.sum(x * x), grow + 1
    halvings = 0
    while np.max(np.abs(x)) > 0.1:
        x, halvings = x * 0.5, halvings + 1
    return x, s, halvings, [grow, halvings]


def loss(x, limit):
    x, s, _ = steps(x, limit)
    return jnp.sum(x ** 2) + s


X = np.array([0.3, -0.2, 0.9], np.float32)


def assert_same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("limit", [-1.0, 2.0, 9.0, 1e9])
@pytest.mark.parametrize("unroll", [1, None])
def test_forward_twin_takes_python_trip_counts_and_matches(limit, unroll):
    trips = trip_counts(steps, X, np.float32(limit))
    *want_values, want_counts = python_steps(X, limit)
    assert [(t.name, t.fewest, t.most) for t in trips] == [
        (name, n, n) for name, n in zip(["grow", "halve"], want_counts)]
    twin = fixed_length(steps, trips, unroll)
    got, want = jax.jit(twin)(X, np.float32(limit)), jax.jit(steps)(X, np.float32(limit))
    assert_same(got, want)
    np.testing.assert_allclose(got[0], want_values[0], rtol=1e-4)
    assert int(got[2]) == want_values[2]


def test_vmapped_twin_masks_lanes_that_stopped():
    xs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    limits = np.array([-1.0, 2.0, 9.0, 1e9], np.float32)
    fn = jax.vmap(steps)
    trips = trip_counts(fn, xs, limits)
    per_lane = np.array([python_steps(x, limit)[-1] for x, limit in zip(xs, limits)])
    assert [(t.fewest, t.most) for t in trips] == list(zip(per_lane.min(0), per_lane.max(0)))
    assert trips[0].fewest < trips[0].most
    assert_same(jax.jit(fixed_length(fn, trips))(xs, limits), jax.jit(fn)(xs, limits))


@pytest.mark.parametrize("limit", [2.0, 1e9])
def test_gradient_twin_matches_whilst_and_unrolled_oracle(limit):
    fn = jax.grad(loss)
    trips = trip_counts(fn, X, np.float32(limit))
    counts = python_steps(X, limit)[-1]

    def oracle(x):
        s = 0.0
        for _ in range(counts[0]):
            x, s = jnp.sin(x) * 1.3 + 0.2, s + jnp.sum(x * x)
        for _ in range(counts[1]):
            x = x * 0.5
        return jnp.sum(x ** 2) + s

    got = jax.jit(fixed_length(fn, trips))(X, np.float32(limit))
    assert_same(got, jax.jit(fn)(X, np.float32(limit)))
    assert_same(got, jax.grad(oracle)(X))


def test_twin_has_scans_and_no_whilst_loop_left():
    twin = fixed_length(jax.grad(loss), trip_counts(jax.grad(loss), X, np.float32(9.0)))
    jaxpr = jax.make_jaxpr(twin)(X, np.float32(9.0)).jaxpr
    assert not list(iter_loops(jaxpr))
    assert sum(eqn.primitive.name == "scan" for eqn in jaxpr.eqns) == 4  # 2 forward, 2 back
    assert unroll_factors(whilst.export(twin, X, np.float32(9.0)).text) == []


def test_recording_of_other_loops_is_refused():
    with pytest.raises(ValueError, match="traced loop 'grow' where the recording has 'halve'"):
        fixed_length(steps, [Trips("halve", 1, 1, 1)])(X, np.float32(9.0))
    with pytest.raises(ValueError, match="traced 2 loops, but 3 were recorded"):
        fixed_length(steps, trip_counts(steps, X, np.float32(9.0)) + [Trips("x", 1, 1, 1)])(
            X, np.float32(9.0))
