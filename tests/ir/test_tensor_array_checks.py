"""whilst.TensorArray's run-time checks (TensorFlow's errors for indices known only
at run time: inside loops, traced indices), reported by `checkify.checkify` and
dropped without it. Values are checked against plain Python (restated) and the
gradient against `jax.grad` of the program written with a preallocated array."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify

import whilst
import whilst.lax as wl
from whilst import TensorArray

MODES = ["eager", "jit"]


def checked(mode, fn):
    f = checkify.checkify(fn, errors=checkify.user_checks)
    return f if mode == "eager" else jax.jit(f)


def out_of_range(name, method, index, size):
    return (f"TensorArray {name!r}.{method}: index {index} is out of range for an array of "
            f"size {size}. Pass an index in [0, {size}). (`check` failed)")


def written_twice(name, method, index):
    return (f"TensorArray {name!r}.{method}: could not write to index {index}: it has already "
            f"been written to. Each element is written once; write to another index, or use "
            f"a new TensorArray. (`check` failed)")


def unwritten(name, method, index):
    return (f"TensorArray {name!r}.{method}: index {index} has not been written. Write it "
            f"before reading it, or use stack()/gather(), which read unwritten elements as "
            f"zeros. (`check` failed)")


def test_traced_index_out_of_range():  # eagerly the index is known: raised while tracing
    def fn(i, j):
        ta = TensorArray(jnp.float32, size=3, name="a", run_time_checks=True).write(i, 2.)
        return ta.stack(), ta.read(j), ta.gather(jnp.stack([j, 0]))

    f = checked("jit", fn)
    err, (stack, read, gathered) = f(1, 1)
    assert err.get() is None
    np.testing.assert_array_equal(stack, [0., 2., 0.])
    assert read == 2. and list(gathered) == [2., 0.]
    err, (stack, _, _) = f(5, 1)
    assert err.get() == out_of_range("a", "write", 5, 3)
    np.testing.assert_array_equal(stack, [0., 0., 0.])  # the write was dropped
    err, _ = f(-1, 1)
    assert err.get() == out_of_range("a", "write", -1, 3)
    err, (_, read, gathered) = f(1, 3)
    assert err.get() == out_of_range("a", "read", 3, 3)
    assert read == 0. and list(gathered) == [0., 0.]  # what the unchecked program reads
    with pytest.raises(IndexError, match="index 5 is out of range"):
        checked("eager", fn)(5, 1)


@pytest.mark.parametrize("run_time_checks", [False, True])
def test_unchecked_programs(run_time_checks):
    def fn(i):
        ta = TensorArray(jnp.float32, size=3, run_time_checks=run_time_checks).write(i, 2.)
        return ta.stack(), ta.read(i + 1)

    stack, read = jax.jit(fn)(7)  # no error: a write out of range is dropped
    np.testing.assert_array_equal(stack, [0., 0., 0.])
    assert read == 0.
    # Arrays without run-time checks hold no check (jit calls a program with a
    # debug_check through a slower path) and no mask of written elements.
    assert bool(jax.make_jaxpr(fn)(7).effects) == run_time_checks
    array = TensorArray(jnp.float32, size=3, element_shape=(), run_time_checks=run_time_checks)
    assert len(jax.tree.leaves(array)) == 1 + run_time_checks


def write_each_step(n, index_of_step, run_time_checks=True):
    """A loop writing x * (k + 1) to index_of_step(k) at each step k."""
    def fn(x):
        ta = TensorArray(jnp.float32, size=4, name="out", run_time_checks=run_time_checks)
        return wl.fori_loop(0, n, lambda k, ta: ta.write(index_of_step(k), x * (k + 1.)),
                            ta).stack()
    return fn


@pytest.mark.parametrize("mode", MODES)
def test_write_twice_in_a_loop(mode):
    err, out = checked(mode, write_each_step(4, lambda k: k))(2.)
    assert err.get() is None
    np.testing.assert_array_equal(out, [2., 4., 6., 8.])
    err, out = checked(mode, write_each_step(3, lambda k: k // 2))(2.)
    assert err.get() == written_twice("out", "write", 0)
    np.testing.assert_array_equal(out, [4., 6., 0., 0.])  # the second write replaced the first
    err, _ = checked(mode, write_each_step(3, lambda k: k // 2, run_time_checks=False))(2.)
    assert err.get() is None  # not checked
    err, _ = checked(mode, write_each_step(3, lambda k: k + 2))(2.)
    assert err.get() == out_of_range("out", "write", 4, 4)


@pytest.mark.parametrize("mode", MODES)
def test_known_index_written_twice_in_a_loop(mode):  # the index is a Python int
    err, _ = checked(mode, write_each_step(2, lambda k: 3))(1.)
    assert err.get() == written_twice("out", "write", 3)
    err, _ = checked(mode, write_each_step(1, lambda k: 3))(1.)
    assert err.get() is None


@pytest.mark.parametrize("mode", MODES)
def test_read_unwritten_in_a_loop(mode):
    def fn(x, lag):
        def body(k, c):
            ta, acc = c
            ta = ta.write(k, x * k)
            return ta, acc + ta.read(k - lag)
        ta = TensorArray(jnp.float32, size=5, name="h", run_time_checks=True)
        return wl.fori_loop(1, 5, body, (ta.write(0, x), 0.))[1]

    def oracle(x, lag):
        h, acc = [x], 0.
        for k in range(1, 5):
            h.append(x * k)
            acc += h[k - lag]
        return acc

    for lag in (0, 1):
        err, acc = checked(mode, fn)(3., lag)
        assert err.get() is None
        np.testing.assert_allclose(acc, oracle(3., lag))
    err, _ = checked(mode, fn)(3., -1)
    assert err.get() == unwritten("h", "read", 2)
    err, _ = checked(mode, fn)(3., 5)
    assert err.get() == out_of_range("h", "read", -4, 5)


def test_read_past_a_dynamic_arrays_size():
    def fn(x, j):
        ta = TensorArray(jnp.float32, size=0, dynamic_size=True, name="d", element_shape=(),
                         run_time_checks=True)

        def body(i, ta, x):
            return i + 1, ta.write(i, x), x * 2.
        _, ta, _ = whilst.while_loop(lambda i, ta, x: x < 10., body, [0, ta, x],
                                     maximum_iterations=6)
        return ta.read(j), ta.size()

    err, (v, size) = checked("jit", fn)(1., 3)
    assert err.get() is None and v == 8. and size == 4
    err, _ = checked("jit", fn)(1., 4)
    assert err.get() == unwritten("d", "read", 4)
    err, _ = checked("jit", fn)(1., 6)
    assert err.get() == (
        "TensorArray 'd'.read: index 6 is out of range for an array of size 6 (a dynamic "
        "array grows past it only at indices known while tracing; in a loop its room is "
        "maximum_iterations more elements). Pass an index in [0, 6). (`check` failed)")


def test_scatter_with_traced_indices():
    def fn(idx):
        ta = TensorArray(jnp.int32, size=4, name="s", run_time_checks=True)
        return ta.scatter(idx, jnp.array([7, 8, 9], jnp.int32)).stack()

    err, out = checked("jit", fn)(jnp.array([3, 0, 1]))
    assert err.get() is None
    np.testing.assert_array_equal(out, [8, 9, 0, 7])
    err, _ = checked("jit", fn)(jnp.array([3, 0, 3]))
    assert err.get() == written_twice("s", "scatter", 3)
    err, _ = checked("jit", fn)(jnp.array([3, 9, 1]))
    assert err.get() == out_of_range("s", "scatter", 9, 4)


def test_vmap_of_checkify_gives_errors_per_example():
    def fn(x, n):
        ta = TensorArray(jnp.float32, size=4, name="out", run_time_checks=True)
        return wl.fori_loop(0, n, lambda k, ta: ta.write(k // 2, x * (k + 1.)), ta).stack()

    f = jax.jit(jax.vmap(checkify.checkify(fn, errors=checkify.user_checks)))
    err, out = f(jnp.array([1., 2., 3.]), jnp.array([1, 3, 0]))
    assert err.get() == "at mapped index 1: " + written_twice("out", "write", 0)
    np.testing.assert_array_equal(out, [[1., 0., 0., 0.], [4., 6., 0., 0.], [0., 0., 0., 0.]])
    err, _ = f(jnp.array([1., 2., 3.]), jnp.array([1, 1, 0]))
    assert err.get() is None


def test_gradient_through_a_checked_loop():
    def fn(x):
        ta = TensorArray(jnp.float32, size=4, run_time_checks=True)
        ta = wl.fori_loop(0, 4, lambda k, ta: ta.write(k, jnp.sin(x * k)), ta)
        return jnp.sum(ta.stack() ** 2)

    def preallocated(x):
        return jnp.sum(lax.fori_loop(0, 4, lambda k, a: a.at[k].set(jnp.sin(x * k)),
                                     jnp.zeros(4)) ** 2)

    f = checkify.checkify(fn, errors=checkify.user_checks)
    grad = jax.jit(jax.grad(lambda x: f(x)[1]))
    np.testing.assert_allclose(grad(0.7), jax.grad(preallocated)(0.7), rtol=1e-6)
    err, g = jax.jit(checkify.checkify(jax.grad(fn), errors=checkify.user_checks))(0.7)
    assert err.get() is None
    np.testing.assert_allclose(g, jax.grad(preallocated)(0.7), rtol=1e-6)
