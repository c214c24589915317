"""Predicated steps that write a carried buffer at one row select that row alone
(`whilst.ir._predicated_writes`): the loop's results on IREE equal a numpy loop's at
every trip count, an iteration's inactive steps included, and the emitted loop
selects no whole buffer."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering._ir_walk import ops_where

ROWS, WIDTH, UNROLL = 8, 1024, 4   # more elements than a one-hot write selects over


def rows_written(limit, x, unroll=UNROLL):
    """Writes row i of a buffer each step while `i < ROWS` and the running sum stays
    below `limit`: a test that reads two carries, so its steps run predicated."""
    def body(i, s, buf):
        row = x * (i + 1.0) + s
        return i + 1, s + row[0] + row[1], buf.at[i].set(row)

    return whilst.while_loop(lambda i, s, buf: (i < ROWS) & (s < limit), body,
                             [0, jnp.float32(0), jnp.full((ROWS, WIDTH), -1.0, jnp.float32)],
                             unroll=unroll)


def rows_written_numpy(limit, x):
    i, s, buf = 0, np.float32(0), np.full((ROWS, WIDTH), -1.0, np.float32)
    while i < ROWS and s < limit:
        row = (x * np.float32(i + 1.0) + s).astype(np.float32)
        buf[i] = row
        i, s = i + 1, np.float32(s + row[0] + row[1])
    return i, s, buf


X = np.linspace(0.5, 0.0, WIDTH, dtype=np.float32)
X[1] = 0.25
# Running sums 0.75, 3.75, 13.5, 43.5, 134.25, 407.25, 1227, 3687: limits that stop
# after 0 .. ROWS steps.
LIMITS = [-1.0, 0.5, 1.0, 10.0, 20.0, 100.0, 200.0, 1000.0, 2000.0, 10000.0]


@pytest.mark.iree
def test_rows_written_by_predicated_steps_match_numpy_at_every_trip_count():
    """Against numpy (the sums to float rounding) and, bit for bit, against the same
    loop run one step per iteration (no predicated step)."""
    export = whilst.export(rows_written, np.float32(0), X)
    one_step = whilst.export(lambda limit, x: rows_written(limit, x, unroll=1),
                             np.float32(0), X, name="one_step")
    module = whilst.compile([export, one_step]).load()
    steps = set()
    for limit in LIMITS:
        want = rows_written_numpy(np.float32(limit), X)
        got = module.main(np.float32(limit), X)
        steps.add(want[0])
        assert int(got[0]) == want[0], limit
        np.testing.assert_allclose(np.asarray(got[2]), want[2], rtol=1e-6)
        for g, w in zip(got, module.one_step(np.float32(limit), X)):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert steps == set(range(ROWS + 1))
    from whilst.lowering._iree_ir import ir
    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(export.text)  # alive while its ops are read
        buffer = ir.RankedTensorType.get([ROWS, WIDTH], ir.F32Type.get())
        (loop,) = ops_where(module, lambda op: op.name == "stablehlo.while")
        assert ir.IntegerAttr(loop.attributes["whilst.unroll"]).value == UNROLL
        whole = ops_where(loop, lambda op: op.name == "stablehlo.select"
                          and op.results[0].type == buffer)
        assert not whole   # each of the 3 predicated steps selected the buffer before


@pytest.mark.iree
def test_vmapped_rows_written_by_predicated_steps_match_numpy():
    """Lanes that stop at different steps: a buffer per lane, written along axis 1."""
    limits = np.array(LIMITS, np.float32)
    xs = np.stack([X * (1 + k / 8) for k in range(len(LIMITS))]).astype(np.float32)
    batched = jax.vmap(rows_written)
    module = whilst.compile(batched, limits, xs).load()
    got = module.main(limits, xs)
    for lane, (limit, x) in enumerate(zip(limits, xs)):
        want = rows_written_numpy(limit, x)
        assert int(got[0][lane]) == want[0], lane
        np.testing.assert_allclose(np.asarray(got[2][lane]), want[2], rtol=1e-6)

