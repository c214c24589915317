"""Loop bodies that read and write rows at positions the carry holds (`xs[t]`,
`ys.at[t].set(h)`), over arrays too large for one-hot selects, run on IREE as
gathers and scatters (`whilst.ir.iree_forms._device_indexing`): the same answers as Python,
and no readback of the position per step."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cg  # samples/cg.py
import whilst
from helpers import host_driven_stream
from whilst.lowering import loop_counts, prepare

ROWS, WIDTH = 600, 8  # 4800 elements: past the one-hot limit, so one step per iteration


def rnn(xs, h0, n, clock):
    """h <- tanh(h / 2 + xs[t]) for n steps, recording each h in ys[t]; the loop is
    tested on its counter (`t < n`: counted) or on a float clock (`s < n`)."""
    def body(s, t, h, ys):
        h = jnp.tanh(0.5 * h + xs[t])
        return s + 1.0, t + 1, h, ys.at[t].set(h)

    if clock == "counter":
        cond = lambda s, t, h, ys: t < n  # noqa: E731
    else:
        cond = lambda s, t, h, ys: s < n.astype(jnp.float32)  # noqa: E731
    return whilst.while_loop(cond, body, [jnp.float32(0), 0, h0, jnp.zeros_like(xs)],
                             maximum_iterations=ROWS)


def loss(xs, h0, n, clock):
    _, _, h, ys = rnn(xs, h0, n, clock)
    return jnp.sum(h) + jnp.sum(ys ** 2)


def scan_loss(xs, h0, n):
    """The same steps as JAX's own `lax.scan` over the first n rows (jax.grad
    differentiates it without whilst; compiled once per n, where the loop unrolled
    in Python compiled an indexing op per step eagerly)."""
    def step(h, x):
        h = jnp.tanh(0.5 * h + x)
        return h, h

    h, hs = jax.lax.scan(step, h0, xs[:n])
    return jnp.sum(h) + jnp.sum(hs ** 2)


@pytest.mark.parametrize("clock, loads", [("counter", (0, 0)), ("float", (1, 0))])
def test_rows_at_carried_positions_read_nothing_back_and_match_python(clock, loads):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    h0 = rng.standard_normal(WIDTH).astype(np.float32)
    grad = jax.grad(lambda xs, h0, n: loss(xs, h0, n, clock), argnums=(0, 1))
    exports = [whilst.export(lambda xs, h0, n: rnn(xs, h0, n, clock), xs, h0, np.int32(0),
                             name="forward"),
               whilst.export(grad, xs, h0, np.int32(0), name="grad")]
    assert "whilst.unroll = 1" in exports[1].text
    forward_loads = [n for n, _ in loop_counts(host_driven_stream(prepare(exports[:1])))]
    assert tuple(forward_loads) == loads[:1]
    assert tuple(n for n, _ in loop_counts(host_driven_stream(prepare(exports[1:])))) == loads
    module = whilst.compile(exports).load()
    for n in (0, 1, 7, 250):
        s, t, h, ys = module.forward(xs, h0, np.int32(n))
        want_h, want_ys = h0, np.zeros_like(xs)
        for step in range(n):
            want_h = np.tanh(0.5 * want_h + xs[step])
            want_ys[step] = want_h
        assert int(t) == n and float(s) == n
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys, want_ys, rtol=1e-5, atol=1e-6)
        want = jax.jit(jax.grad(scan_loss, (0, 1)), static_argnums=2)(xs, h0, n)
        for g, w in zip(module.grad(xs, h0, np.int32(n)), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_reads_at_clipped_positions_match_jax():
    """dynamic_slice clips its position so the window fits; the gather does too."""
    def f(xs, t):
        def body(i, t, acc):
            return i + 1, t + 7, acc + lax_rows(xs, t)
        return whilst.while_loop(lambda i, t, acc: i < 4, body,
                                 [0, t, jnp.zeros((2, WIDTH), xs.dtype)])[2]

    def lax_rows(xs, t):
        return jax.lax.dynamic_slice_in_dim(xs, t, 2, 0)

    xs = np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH)
    module = whilst.compile(f, xs, np.int32(0)).load()
    for t in (-9, 0, 5, ROWS - 10, ROWS + 3):
        np.testing.assert_array_equal(module.main(xs, np.int32(t)),
                                      jax.jit(f)(xs, np.int32(t)), err_msg=str(t))


def test_pushed_rows_are_scattered_unclipped():
    """A forward While's pushes write rows in bounds by construction, so their
    scatter clips nothing: with the clip the CG sample's forward While took 13
    dispatches per step on IREE 3.13, 10 without (its gradient While: 8)."""
    fn, args = cg.bench_program()
    loops = loop_counts(host_driven_stream(prepare([whilst.export(fn, *args)])))
    assert loops == [(1, 10), (0, 8)], loops


def test_rows_in_cond_branches_are_indexed_on_the_device():
    """The checkpointed gradient While's schedule reads its slots and levels at
    computed positions inside the branches of its `lax.switch`: gathers there too,
    so its body reads back 5 scalars (the branch predicates), not 13."""
    def loss(x, n):
        return jnp.sum(whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x)),
                                         [0, x], checkpoints=64)[1])

    exported = whilst.export(jax.grad(loss), np.ones(16, np.float32), np.int32(5))
    loops = loop_counts(host_driven_stream(prepare([exported])))
    assert [loads for loads, _ in loops] == [0, 5], loops
