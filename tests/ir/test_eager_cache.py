"""Eager calls of the same loop trace once (as jax.lax.while_loop's do): counted by a
Python side effect in the body, which runs only while JAX traces it."""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
import whilst.lax
from whilst.frontend import _traced_loops


class Traces:
    """A body that counts how often it is traced."""

    def __init__(self, step):
        self.count, self.step = 0, step

    def __call__(self, *args):
        self.count += 1
        return self.step(*args)


def test_fori_loop_traces_once_per_function_bounds_and_types():
    body = Traces(lambda i, c: c + i)
    for _ in range(3):
        assert whilst.lax.fori_loop(0, 3, body, 0) == 0 + 1 + 2
    assert body.count == 1
    assert whilst.lax.fori_loop(0, 5, body, 0) == 10          # other bounds: traced again
    assert whilst.lax.fori_loop(0, 5, body, 0.0) == 10.0      # other carry type
    assert whilst.lax.fori_loop(0, 5, body, 0, unroll=2) == 10  # other options
    assert body.count == 4
    for _ in range(2):
        assert whilst.lax.fori_loop(0, 5, body, 0.0) == 10.0
    assert body.count == 4


def test_while_loops_trace_once_per_function_and_types():
    body = Traces(lambda x: x * 2.0)
    below_10 = lambda x: x < 10.0  # noqa: E731 (one function for every call)
    for x0 in (1.0, 3.0, 0.5):  # other values of the same types: no trace
        assert whilst.lax.while_loop(below_10, body, x0) == next(
            x for x in (x0 * 2 ** k for k in range(10)) if x >= 10.0)
    assert body.count == 1
    xs = np.array([1.0, 2.0], np.float32)
    whilst.lax.while_loop(lambda x: x[0] < 10.0, body, xs)       # other shape
    assert body.count == 2

    tf_body = Traces(lambda i, x: (i + 1, x * 2.0))
    tf_cond = lambda i, x: x < 10.0  # noqa: E731
    for x0 in (1.0, 3.0):
        i, x = whilst.while_loop(tf_cond, tf_body, [0, x0])
        assert (int(i), float(x)) == next((k, x0 * 2 ** k) for k in range(10)
                                          if x0 * 2 ** k >= 10.0)
    whilst.while_loop(tf_cond, tf_body, [0, 1.0], maximum_iterations=2)
    assert tf_body.count == 2


def test_values_closed_over_are_never_stale():
    # A new closure is a new function (traced again); under jax.jit, a body that
    # closes over a tracer is never kept.
    def power(w):
        return whilst.lax.fori_loop(0, 3, lambda i, c: c * w, 1.0)
    assert [float(power(w)) for w in (2.0, 3.0)] == [8.0, 27.0]
    jitted = jax.jit(power)
    assert [float(jitted(jnp.float32(w))) for w in (2.0, 3.0, 4.0)] == [8.0, 27.0, 64.0]
    np.testing.assert_allclose(jax.grad(power)(2.0), 3 * 2.0 ** 2)


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(_traced_loops, "MAX_LOOPS", 2)
    monkeypatch.setattr(_traced_loops, "_CACHE", type(_traced_loops._CACHE)())
    bodies = [Traces(lambda i, c, k=k: c + k) for k in range(3)]
    for body in bodies:
        whilst.lax.fori_loop(0, 2, body, 0)
    assert len(_traced_loops._CACHE) == 2
    whilst.lax.fori_loop(0, 2, bodies[0], 0)  # the least recently used went first
    assert [b.count for b in bodies] == [2, 1, 1]
