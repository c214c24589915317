"""Reads and writes of small arrays at computed positions as one-hot selects
(whilst.ir.iree_forms._onehot): bit-for-bit the indexed forms, so that such loop bodies unroll
on IREE with the results of k = 1."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.lowering import unroll_factors
from whilst.ir.iree_forms._onehot import ONE_HOT_ELEMENTS, onehot_indexing
from whilst.ir._tracing import call

INDEXING = {"dynamic_slice", "dynamic_update_slice", "gather", "scatter", "scatter-add",
            "scatter_add", "scatter-max", "scatter_max"}
VECTOR = np.array([1.0, -0.0, np.nan, -np.inf, 3.5], np.float32)
MATRIX = np.arange(20, dtype=np.int32).reshape(5, 4)
FLAGS = np.array([True, False, True])

PROGRAMS = {
    "read": (lambda x, j: x[j], VECTOR),
    "read_computed_table": (lambda x, j: (x + jnp.arange(5, dtype=np.float32))[j], VECTOR),
    "read_clamped_slice": (lambda x, j: lax.dynamic_slice(x, (j,), (2,)), VECTOR),
    "set": (lambda x, j: x.at[j].set(-0.0), VECTOR),
    "add": (lambda x, j: x.at[j].add(2.0), VECTOR),
    "set_clip": (lambda x, j: x.at[j].set(1.0, mode="clip"), VECTOR),
    "get_fill": (lambda x, j: x.at[j].get(mode="fill", fill_value=7.0), VECTOR),
    "update_slice": (lambda x, j: lax.dynamic_update_slice(
        x, np.array([5.0, 6.0], np.float32), (j,)), VECTOR),
    "row": (lambda m, j: m[j], MATRIX),
    "block": (lambda m, j: lax.dynamic_slice(m, (j, j), (2, 3)), MATRIX),
    "update_block": (lambda m, j: lax.dynamic_update_slice(
        m, -np.ones((2, 3), np.int32), (j, j)), MATRIX),
    "set_row": (lambda m, j: m.at[j].set(np.arange(4, dtype=np.int32)), MATRIX),
    "max_row": (lambda m, j: m.at[j].max(np.arange(4, dtype=np.int32)), MATRIX),
    "bool": (lambda b, j: b[j], FLAGS),
    "int8_index": (lambda x, j: x[j.astype(np.int8)], VECTOR),
    "uint32_index": (lambda x, j: x[j.astype(np.uint32)], VECTOR),
    "int8_index_wide_table": (lambda x, j: lax.dynamic_slice(
        x, (j.astype(np.int8),), (1,)), np.arange(300, dtype=np.float32)),
}


def _indexing_ops(jaxpr):
    return {e.primitive.name for e in jaxpr.eqns} & INDEXING


@pytest.mark.parametrize("name", PROGRAMS)
def test_one_hot_form_equals_indexing_bit_for_bit(name):
    """Every position from far below to far above the array, clamped, filled and
    dropped as the indexed op does; NaN, -0.0 and -inf read back exactly."""
    fn, table = PROGRAMS[name]
    jaxpr = jax.make_jaxpr(fn)(table, np.int32(0))
    rewritten = onehot_indexing(jaxpr)
    assert _indexing_ops(jaxpr.jaxpr) and not _indexing_ops(rewritten.jaxpr)
    indexed = jax.jit(lambda *a: call(jaxpr, *a))
    selected = jax.jit(lambda *a: call(rewritten, *a))
    for j in range(-8, len(table) + 8):
        want, got = indexed(table, np.int32(j)), selected(table, np.int32(j))
        for w, g in zip(want, got):
            w, g = np.asarray(w), np.asarray(g)
            assert (g.dtype, g.shape) == (w.dtype, w.shape)
            assert g.tobytes() == w.tobytes(), (name, j, w, g)


BATCHED = {
    "vmapped_read": (lambda x, j: x[j], VECTOR),
    "vmapped_row": (lambda m, j: m[j], MATRIX),
    "vmapped_get_fill": (lambda x, j: x.at[j].get(mode="fill", fill_value=7.0), VECTOR),
    "vmapped_get_clip": (lambda x, j: x.at[j].get(mode="clip"), VECTOR),
    "vmapped_bool": (lambda b, j: b[j], FLAGS),
}


@pytest.mark.parametrize("name", BATCHED)
def test_vmapped_reads_are_one_hot_bit_for_bit(name):
    """`jax.vmap` of `x[j]` (a gather with a batching dim) reads each batch
    element's row from its own position, clamped or filled as the gather does."""
    fn, table = BATCHED[name]
    batched = jax.vmap(fn)
    positions = np.arange(-8, len(table) + 8, dtype=np.int32)
    tables = np.stack([table] * len(positions))
    jaxpr = jax.make_jaxpr(batched)(tables, positions)
    rewritten = onehot_indexing(jaxpr)
    assert _indexing_ops(jaxpr.jaxpr) and not _indexing_ops(rewritten.jaxpr)
    want = jax.jit(lambda *a: call(jaxpr, *a))(tables, positions)
    got = jax.jit(lambda *a: call(rewritten, *a))(tables, positions)
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(np.asarray(w).view(np.uint8), np.asarray(g).view(np.uint8))


def test_large_arrays_and_literal_positions_keep_their_indexing():
    big = np.zeros(ONE_HOT_ELEMENTS + 1, np.float32)
    for fn, x in [(lambda x, j: x[j], big), (lambda x, j: x[2], VECTOR)]:
        jaxpr = jax.make_jaxpr(fn)(x, np.int32(0))
        assert onehot_indexing(jaxpr) is jaxpr


def test_indexing_inside_jit_calls_is_rewritten():
    jaxpr = jax.make_jaxpr(lambda x, j: jax.jit(lambda x, j: x.at[j].add(1.0))(x, j))(
        VECTOR, np.int32(0))
    rewritten = onehot_indexing(jaxpr)
    assert not _indexing_ops(rewritten.jaxpr)
    assert not any(e.params.get("jaxpr") for e in rewritten.jaxpr.eqns)
    np.testing.assert_array_equal(call(rewritten, VECTOR, np.int32(3))[0],
                                  VECTOR + np.array([0, 0, 0, 1, 0], np.float32))


# On IREE: a loop that reads a small table at a carried position and records its
# state at that position (the ODE sample's shape) unrolls, with the results of k = 1.

def record_crossings(unroll):
    def f(x, levels, limit):
        def body(i, x, j, seen):
            x = x * 1.1 + 0.05
            crossed = (j < levels.shape[0]) & (x > levels[j])
            seen = seen.at[j].set(jnp.where(crossed, x, seen[j]))
            return i + 1, x, j + crossed.astype(j.dtype), seen
        return whilst.while_loop(lambda i, x, j, seen: (j < levels.shape[0]) & (i < limit), body,
                                 [0, x, 0, jnp.zeros_like(levels)], maximum_iterations=40,
                                 unroll=unroll)
    return f


def record_crossings_oracle(x, levels, limit):
    """The same steps in plain Python/numpy (float32 throughout)."""
    x, levels = np.float32(x), np.asarray(levels, np.float32)
    i, j, seen = 0, 0, np.zeros_like(levels)
    while j < len(levels) and i < min(limit, 40):
        x = np.float32(x * np.float32(1.1) + np.float32(0.05))
        if x > levels[j]:
            seen[j] = x
            j += 1
        i += 1
    return i, x, j, seen


@pytest.mark.iree
def test_iree_loop_indexing_small_tables_unrolls_and_matches_k1():
    levels = np.array([0.2, 0.3, 0.9, 1.5, 4.0], np.float32)
    specs = np.float32(0), levels, np.int32(0)
    exported = whilst.export(record_crossings(None), *specs, name="auto")
    ks = unroll_factors(exported.text)
    assert len(ks) == 1 and ks[0] > 1, ks
    k = ks[0]
    module = whilst.compile([exported, whilst.export(record_crossings(1), *specs,
                                                     name="k1")]).load()
    # Every trip count from 0 to 2k + 1 (cut by `limit`), and whole runs (40: the bound).
    runs = [(np.float32(-10.0), limit) for limit in range(2 * k + 2)]
    runs += [(np.float32(x0), 99) for x0 in [5.0, 0.25, 0.0, -0.4, -1.0, -3.0, -10.0]]
    trips = set()
    for x0, limit in runs:
        want = module.k1(x0, levels, np.int32(limit))
        got = module.auto(x0, levels, np.int32(limit))
        for w, g in zip(want, got):
            assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
        oracle = record_crossings_oracle(x0, levels, limit)
        assert int(got[0]) == oracle[0] and int(got[2]) == oracle[2]
        np.testing.assert_allclose(got[3], oracle[3], rtol=1e-5)  # IREE may fuse x * a + b
        trips.add(int(got[0]))
    assert set(range(2 * k + 2)) <= trips and 40 in trips, (trips, k)


@pytest.mark.iree
def test_iree_gradient_through_small_table_writes_unrolls_and_matches_k1():
    levels = np.array([0.2, 0.3, 0.9, 1.5, 4.0], np.float32)

    def loss(unroll):
        return lambda x, levels: jnp.sum(record_crossings(unroll)(x, levels, 99)[3] ** 2)

    def oracle(x0):
        """jax.grad of the steps unrolled in Python, crossing where the numpy run did."""
        values = [x0]
        for _ in range(record_crossings_oracle(x0, levels, 99)[0]):
            values.append(np.float32(values[-1] * np.float32(1.1) + np.float32(0.05)))
        crossed, j = [], 0
        for x in values[1:]:
            crossed.append(j < len(levels) and x > levels[j])
            j += crossed[-1]

        def unrolled(x):
            j, seen = 0, jnp.zeros_like(levels)
            for c in crossed:
                x = x * 1.1 + 0.05
                if c:
                    seen, j = seen.at[j].set(x), j + 1
            return jnp.sum(seen ** 2)
        return jax.grad(unrolled)(x0)

    exported = whilst.export(jax.grad(loss(None)), np.float32(0), levels, name="auto")
    assert min(unroll_factors(exported.text)) > 1
    module = whilst.compile([exported, whilst.export(jax.grad(loss(1)), np.float32(0),
                                                     levels, name="k1")]).load()
    for x0 in [5.0, 0.25, 0.0, -0.4, -1.0, -3.0]:
        x0 = np.float32(x0)
        np.testing.assert_allclose(module.auto(x0, levels), module.k1(x0, levels),
                                   rtol=1e-6)
        np.testing.assert_allclose(module.auto(x0, levels), oracle(x0), rtol=1e-5)
