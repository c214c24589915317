"""Loop carries written along an inner dimension are carried with that dimension first
(`whilst.ir.iree_forms._rows_first_carries`): `jax.vmap` of a stage loop that writes
`ks[s]` (diffrax's Runge-Kutta stage buffer, batched: written along axis 1) gives
numpy's results on IREE, and the exported loop carries and writes the buffer stages
first; so are matrices whose columns a loop writes while its test reads them; carries
that do not qualify keep their layout."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.ir.iree_forms._rows_first_carries import rows_first_carries

STAGES, LANES, STATE = 7, 16, 2
WEIGHTS = np.linspace(1.0, 0.25, STAGES, dtype=np.float32)


def stages(y, a):
    """A stage loop: stage s reads the stages written so far (a weighted sum and
    one row) and writes row s; the loop's test reads its counter alone."""
    def body(s, ks):
        previous = ks[jnp.maximum(s - 1, 0)]
        k = jnp.sin(y * (s + 1.0) + a * jnp.tensordot(WEIGHTS, ks, 1)) + 0.5 * previous
        return s + 1, ks.at[s].set(k)

    _, ks = whilst.while_loop(lambda s, ks: s < STAGES, body,
                              [0, jnp.zeros((STAGES, STATE), jnp.float32)])
    return ks, jnp.tensordot(WEIGHTS, ks, 1)


def stages_numpy(y, a):
    ks = np.zeros((STAGES, STATE), np.float32)
    for s in range(STAGES):
        previous = ks[max(s - 1, 0)]
        ks[s] = np.sin(y * (s + 1.0) + a * (WEIGHTS @ ks)) + 0.5 * previous
    return ks, WEIGHTS @ ks


YS = np.linspace(-1.0, 1.0, LANES * STATE, dtype=np.float32).reshape(LANES, STATE)
A = np.float32(0.3)


def loop_carries(closed):
    """The carry avals of the top-level functional While of `closed`."""
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "functional_while"]
    return [v.aval for v in eqn.outvars[1:]]


def test_a_batched_stage_buffer_is_carried_stages_first_with_the_same_values():
    batched = jax.vmap(stages, in_axes=(0, None))
    closed = jax.make_jaxpr(batched)(YS, A)
    assert loop_carries(closed)[1].shape == (LANES, STAGES, STATE)
    rewritten = rows_first_carries(closed)
    assert loop_carries(rewritten)[1].shape == (STAGES, LANES, STATE)
    got = jax.core.eval_jaxpr(rewritten.jaxpr, rewritten.consts, YS, A)
    for lane in range(LANES):
        for g, w in zip(got, stages_numpy(YS[lane], A)):
            np.testing.assert_allclose(np.asarray(g)[lane], w, rtol=1e-5, atol=1e-6)


def test_carries_written_along_their_first_axis_or_two_axes_keep_their_layout():
    closed = jax.make_jaxpr(stages)(YS[0], A)   # unbatched: written along axis 0
    assert rows_first_carries(closed) is closed

    def two_axes(x):
        def body(s, m):
            return s + 1, m.at[:, s].set(1.0).at[s, :, 0].set(2.0)
        return whilst.while_loop(lambda s, m: s < 3, body, [0, x])[1]

    closed = jax.make_jaxpr(jax.vmap(two_axes))(np.zeros((2, 3, 3, 2), np.float32))
    assert rows_first_carries(closed) is closed


def test_columns_written_while_the_test_reads_the_matrix_keep_their_values():
    """A loop writing columns of two matrices (axis 1, no vmap), whose test sums
    one and whose body reads it too."""
    def columns(x):
        def body(i, m, other):
            col = jnp.cos(x * (i + 1.0)) + m[0, jnp.maximum(i - 1, 0)]
            return i + 1, m.at[:, i].set(col), other.at[:, i].set(2.0 * col)
        return whilst.while_loop(lambda i, m, other: (i < 6) & (jnp.sum(m) < 4.0), body,
                                 [0, jnp.zeros((3, 6), jnp.float32),
                                  jnp.ones((3, 6), jnp.float32)])

    def columns_numpy(x):
        i, m, other = 0, np.zeros((3, 6), np.float32), np.ones((3, 6), np.float32)
        while i < 6 and m.sum() < 4.0:
            col = np.cos(x * (i + 1.0)) + m[0, max(i - 1, 0)]
            m[:, i], other[:, i] = col, 2.0 * col
            i += 1
        return i, m, other

    x = np.array([0.1, 0.5, 0.9], np.float32)
    closed = jax.make_jaxpr(columns)(x)
    rewritten = rows_first_carries(closed)
    assert [a.shape for a in loop_carries(rewritten)[1:]] == [(6, 3), (6, 3)]
    got = jax.core.eval_jaxpr(rewritten.jaxpr, rewritten.consts, x)
    want = columns_numpy(x)
    assert int(got[0]) == want[0] and 0 < want[0] < 6   # the sum stopped it early
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)


@pytest.mark.iree
def test_a_batched_stage_loop_matches_numpy_on_iree_and_writes_its_leading_axis():
    batched = jax.vmap(stages, in_axes=(0, None))
    exported = whilst.export(batched, YS, A)
    got = whilst.compile(exported).load().main(YS, A)
    for lane in range(LANES):
        for g, w in zip(got, stages_numpy(YS[lane], A)):
            np.testing.assert_allclose(np.asarray(g)[lane], w, rtol=1e-5, atol=1e-6)
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where
    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(exported.text)  # alive while its ops are read
        buffer = ir.RankedTensorType.get([STAGES, LANES, STATE], ir.F32Type.get())
        (loop,) = ops_where(module, lambda op: op.name == "stablehlo.while")
        assert buffer in [r.type for r in loop.results]
        scatters = ops_where(loop, lambda op: op.name == "stablehlo.scatter")
        assert scatters and all(op.operands[0].type == buffer for op in scatters)
