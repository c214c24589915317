"""whilst.TensorArray as loop variables of `whilst.while_loop` and `whilst.lax`: the
loop cases of TensorFlow's `tensor_array_ops_test.py` (values restated), under jit,
vmap with a trip count per example, grad, jvp and checkpoint, against the same
program written with preallocated arrays and `.at[i].set` in plain Python (which
`jax.grad` differentiates as straight-line code)."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

import whilst
from whilst import TensorArray

MODES = ["eager", "jit"]


def run(mode, fn, *args):
    return fn(*args) if mode == "eager" else jax.jit(fn)(*args)


def write_pack(v0, state0, var, dynamic_size):
    """testWhileLoopWritePackGradients' loop: vout[t] = v0[t] + var + state_t."""
    ta = TensorArray(jnp.float32, tensor_array_name="foo", size=0 if dynamic_size else 3,
                     dynamic_size=dynamic_size, element_shape=(5,))

    def body(time, ta_t, state):
        sliced = v0[time]
        out = sliced + var + state
        return time + 1, ta_t.write(time, out), state + sliced
    _, h_final, _ = whilst.while_loop(lambda time, ta, state: time < 3, body,
                                      (0, ta, state0), parallel_iterations=3,
                                      maximum_iterations=3)
    return h_final.stack()


def write_pack_preallocated(v0, state0, var):
    out, state = jnp.zeros((3, 5), jnp.float32), state0
    for t in range(3):
        out = out.at[t].set(v0[t] + var + state)
        state = state + v0[t]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dynamic_size", [False, True])
def test_while_loop_write_pack_gradients(mode, dynamic_size):
    # testWhileLoopWritePackGradients, testSkipEagerWhileLoopDynamicWritePackGradients
    v0 = np.arange(15, dtype=np.float32).reshape(3, 5)
    state0 = np.ones(5, np.float32)
    var = np.arange(100, 105, dtype=np.float32)
    grad_val = -np.arange(15, dtype=np.float32).reshape(3, 5)

    def grads(f):
        def g(*args):
            out, vjp = jax.vjp(f, *args)
            return out, vjp(grad_val)
        return run(mode, g, v0, state0, var)
    vout, (v0_grad, state0_grad, var_grad) = grads(
        lambda *a: write_pack(*a, dynamic_size=dynamic_size))
    expected_out, expected_grads = grads(write_pack_preallocated)
    state_per_time = np.array([state0, state0 + v0[0], state0 + v0[0] + v0[1]])
    np.testing.assert_allclose(vout, v0 + var + state_per_time)
    np.testing.assert_array_equal(vout, expected_out)
    np.testing.assert_array_equal(
        v0_grad, [grad_val[0] + grad_val[1] + grad_val[2], grad_val[1] + grad_val[2],
                  grad_val[2]])
    np.testing.assert_allclose(var_grad, grad_val.sum(axis=0))
    np.testing.assert_allclose(state0_grad, grad_val.sum(axis=0))
    for got, want in zip((v0_grad, state0_grad, var_grad), expected_grads):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", MODES)
def test_dynamic_size_zero_in_a_loop(mode):  # testWhileLoopDynamicSizeZeroXla
    def build_and_run(maximum_iterations):
        ta = TensorArray(jnp.int32, size=0, dynamic_size=True)  # the body shows the shape
        _, ta = whilst.while_loop(lambda i, ta: i < 5, lambda i, ta: (i + 1, ta.write(i, i * i + 1)),
                                  [0, ta], maximum_iterations=maximum_iterations)
        return ta.stack(), ta.size()
    stacked, size = run(mode, lambda: build_and_run(5))
    np.testing.assert_array_equal(stacked, [1, 2, 5, 10, 17])
    # With room for 8, stack() gives all 8 rows (TensorFlow's XLA rule) and size() 5.
    stacked, size = run(mode, lambda: build_and_run(8))
    np.testing.assert_array_equal(stacked, [1, 2, 5, 10, 17, 0, 0, 0])
    assert int(size) == 5


@pytest.mark.parametrize("mode", MODES)
def test_gradient_through_two_serial_loops(mode):  # testGradSerialTwoLoops
    def loop(x):
        num_steps = 100
        acc = TensorArray(jnp.float32, size=num_steps, clear_after_read=False,
                          element_shape=())

        def b(i, acc):
            x1 = jnp.where(i == 0, x, acc.read(i - 1) * 2.0)
            return i + 1, acc.write(i, x1)
        i1, acc1 = whilst.while_loop(lambda i, acc: i < 5, b, [0, acc])
        _, acc2 = whilst.while_loop(lambda i, acc: i < num_steps,
                                    lambda i, acc: (i + 1, acc.write(i, 0.0)), [i1, acc1])
        return jnp.sum(acc2.stack())
    assert float(run(mode, jax.grad(loop), np.float32(2.0))) == 31.0


def test_element_shape_after_a_loop():  # testShapeAfterWhileLoop
    ta = TensorArray(jnp.float32, size=10)
    _, ta = whilst.while_loop(lambda i, _: i < 10, lambda i, ta: (i + 1, ta.write(i, [[0.0]])),
                              [0, ta], parallel_iterations=1)
    assert ta.element_shape == (1, 1)


def test_lax_while_loop_and_fori_loop():
    def squares_while(n):
        init = {"i": 0, "ta": TensorArray(jnp.int32, size=0, dynamic_size=True,
                                          element_shape=())}
        out = whilst.lax.while_loop(
            lambda c: c["i"] < n, lambda c: {"i": c["i"] + 1, "ta": c["ta"].write(c["i"], c["i"] ** 2)},
            init, maximum_iterations=6)
        return out["ta"].stack(), out["ta"].size()

    def squares_fori():
        ta = TensorArray(jnp.int32, size=0, dynamic_size=True, element_shape=())
        return whilst.lax.fori_loop(0, 4, lambda i, ta: ta.write(i, i * i), ta).stack()
    stacked, size = jax.jit(squares_while)(4)
    np.testing.assert_array_equal(stacked, [0, 1, 4, 9, 0, 0])
    assert int(size) == 4
    np.testing.assert_array_equal(squares_fori(), [0, 1, 4, 9])


STEPS = 12


def emit_until(x, threshold):
    """x <- sin(x) * 1.5 + 0.1 while x < threshold (at most STEPS steps), each x
    written to a dynamic TensorArray; its stack and size."""
    ta = TensorArray(jnp.float32, size=0, dynamic_size=True, element_shape=())

    def body(i, ta, x):
        x = jnp.sin(x) * 1.5 + 0.1
        return i + 1, ta.write(i, x), x
    _, ta, _ = whilst.while_loop(lambda i, ta, x: x < threshold, body, [0, ta, x],
                                 maximum_iterations=STEPS)
    return ta.stack(), ta.size()


def emit_preallocated(x, n):
    """emit_until's n steps with a preallocated buffer, in plain Python."""
    out = jnp.zeros(STEPS, jnp.float32)
    for i in range(n):
        x = jnp.sin(x) * 1.5 + 0.1
        out = out.at[i].set(x)
    return out


def trip_count(x, threshold):
    n = 0
    while n < STEPS and x < threshold:
        x = np.sin(x) * np.float32(1.5) + np.float32(0.1)
        n += 1
    return n


X = np.float32([0.3, 0.9, 1.25, -0.4])
THRESHOLD = np.float32(1.2)
WEIGHTS = np.linspace(1.0, 2.0, STEPS, dtype=np.float32)


def test_vmap_per_example_trip_counts():
    stacked, sizes = jax.jit(jax.vmap(emit_until, (0, None)))(X, THRESHOLD)
    counts = [trip_count(x, THRESHOLD) for x in X]
    assert len(set(counts)) > 2 and sizes.tolist() == counts
    for row, x, n in zip(stacked, X, counts):
        np.testing.assert_allclose(row, emit_preallocated(x, n), rtol=1e-6)


def test_grad_jvp_and_checkpoint_of_vmapped_loops_match_preallocated_arrays():
    counts = [trip_count(x, THRESHOLD) for x in X]

    def loss(xs):
        return jnp.sum(jax.vmap(emit_until, (0, None))(xs, THRESHOLD)[0] ** 2 * WEIGHTS)

    def oracle(xs):
        return sum(jnp.sum(emit_preallocated(xs[k], n) ** 2 * WEIGHTS)
                   for k, n in enumerate(counts))
    expected = jax.grad(oracle)(X)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(X), expected, rtol=1e-5)
    np.testing.assert_allclose(jax.grad(jax.checkpoint(loss))(X), expected, rtol=1e-5)
    tangent = np.float32([1.0, -0.5, 2.0, 0.25])
    (_, t_out), (_, t_want) = (jax.jvp(f, (X,), (tangent,)) for f in (loss, oracle))
    np.testing.assert_allclose(t_out, t_want, rtol=1e-5)


def test_reverse_mode_stores_one_element_per_step_not_the_buffer():
    """The residual stacks of a loop that writes an f32[64] per step hold rows of
    at most a few elements beside that value, whatever the array's capacity."""
    def loss(x, capacity):
        ta = TensorArray(jnp.float32, size=capacity, element_shape=(64,))

        def body(i, ta, h):
            h = jnp.tanh(h * 1.1 + 0.1)
            return i + 1, ta.write(i, h), h
        _, ta, _ = whilst.while_loop(lambda i, ta, h: i < 10, body, [0, ta, x],
                                     maximum_iterations=capacity)
        return jnp.sum(ta.stack() ** 2)
    x = np.linspace(-1.0, 1.0, 64, dtype=np.float32)
    reports = [whilst.residual_report(lambda x: loss(x, c), x) for c in (16, 512)]
    rows = [[shape[1:] for shape, _ in r.loops[0].stack_shapes] for r in reports]
    assert rows[0] == rows[1]
    assert reports[0].bytes_per_iteration == reports[1].bytes_per_iteration
    assert all(int(np.prod(row)) <= 64 for row in rows[0])  # no f32[512, 64] buffer row
    # One f32[64] row per step; jax 0.10.2's linearization of this body keeps two
    # (still one element's size per step, whatever the capacity).
    rows_kept = 1 if jax.__version_info__ >= (0, 11) else 2
    assert reports[0].bytes_per_iteration <= rows_kept * 64 * 4 + 16


def test_unbounded_loop_with_a_dynamic_array_names_both_fixes():
    ta = TensorArray(jnp.float32, size=0, dynamic_size=True, element_shape=())
    with pytest.raises(ValueError, match=r"while_loop: loop_vars\[1\] is a TensorArray with "
                       r"dynamic_size=True.*trip count known at trace time.*this loop has "
                       r"neither. Pass maximum_iterations=N.*create the array with "
                       r"dynamic_size=False and size=N"):
        jax.jit(lambda n: whilst.while_loop(lambda i, ta: i < n,
                                            lambda i, ta: (i + 1, ta.write(i, 1.0)), [0, ta]))(3)
    with pytest.raises(ValueError, match=r"whilst.lax.fori_loop: init_val\[1\] is a "
                       r"TensorArray with dynamic_size=True"):
        jax.jit(lambda n: whilst.lax.fori_loop(0, n, lambda i, ta: ta.write(i, 1.0), ta))(3)


@pytest.mark.parametrize("loop", ["while_loop", "lax.while_loop"])
def test_a_trip_count_known_at_trace_time_gives_dynamic_arrays_their_room(loop):
    """`i < 3` from `i = 0` runs 3 steps, known while tracing: a dynamic array gets
    room for 3 more elements, as with maximum_iterations=3 (TensorFlow 2 grows its
    lists without a bound; its XLA path, like whilst, needs one)."""
    ta = TensorArray(jnp.float32, size=1, dynamic_size=True).write(0, -1.0)

    def step(i, ta):
        return i + 1, ta.write(i + 1, i * 2.0)

    if loop == "while_loop":
        _, out = whilst.while_loop(lambda i, ta: i < 3, step, [0, ta])
    else:
        _, out = whilst.lax.while_loop(lambda c: c[0] < 3, lambda c: step(*c), (0, ta))
    np.testing.assert_array_equal(out.stack(), [-1.0, 0.0, 2.0, 4.0])
    assert int(out.size()) == 4


def test_a_trip_count_that_cannot_be_read_is_the_refusals_cause():
    """A dynamic array that nested loops both grow: its room cannot come from the outer
    loop's trip count (the body, traced with room for one element, grows the array),
    so the loop is refused, with the tracing error as the refusal's cause."""
    def outer(j, ta):
        inner = whilst.while_loop(lambda i, ta: i < 2,
                                  lambda i, ta: (i + 1, ta.write(2 * j + i, 1.0)), [0, ta])
        return j + 1, inner[1]

    ta = TensorArray(jnp.float32, size=0, dynamic_size=True, element_shape=())
    with pytest.raises(ValueError, match=r"loop_vars\[1\] is a TensorArray with "
                       r"dynamic_size=True.*this loop has neither") as refused:
        whilst.while_loop(lambda j, ta: j < 2, outer, [0, ta])
    assert "whilst loops keep fixed shapes" in str(refused.value.__cause__)


def test_element_shape_is_taken_from_the_body_or_asked_for():
    ta = TensorArray(jnp.float32, size=3)
    out = whilst.lax.while_loop(
        lambda c: c["i"] < 3,
        lambda c: {"i": c["i"] + 1, "ta": c["ta"].write(c["i"], jnp.full(2, 1.0) * c["i"])},
        {"i": 0, "ta": ta})
    np.testing.assert_array_equal(out["ta"].stack(), [[0, 0], [1, 1], [2, 2]])
    with pytest.raises(ValueError, match=r"whilst.lax.while_loop: init_val\['ta'\] is a "
                       r"TensorArray whose element shape is not known.*reads the array before "
                       r"writing it.*element_shape="):
        whilst.lax.while_loop(
            lambda c: c["i"] < 3,
            lambda c: {"i": c["i"] + 1, "ta": c["ta"].write(c["i"], c["ta"].read(0))},
            {"i": 0, "ta": ta})
