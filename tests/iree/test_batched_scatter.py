"""Scatters with batching dimensions (vmapped writes at per-lane positions) in the
explicit-index form IREE 3.13 compiles (whilst.ir.iree_forms._batched_scatter): the same
results as JAX's own batched scatter, bit for bit, for every position in and out
of bounds."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.ir.iree_forms._batched_scatter import explicit_batch_indices
from whilst.ir._tracing import call

B = 3
TABLE = np.arange(B * 5 * 4, dtype=np.float32).reshape(B, 5, 4) - 7.5
ROW = -np.arange(B * 4, dtype=np.float32).reshape(B, 4)

PROGRAMS = {  # name -> the function vmapped over (table, position, row)
    "update_index": lambda t, j, r: lax.dynamic_update_index_in_dim(t, r, j, 0),
    "update_block": lambda t, j, r: lax.dynamic_update_slice(t, r[None, :2], (j, j)),
    "set": lambda t, j, r: t.at[j].set(r),
    "add_clip": lambda t, j, r: t.at[j].add(r, mode="clip"),
    "set_fill": lambda t, j, r: t.at[j].set(r, mode="drop"),
    "max_element": lambda t, j, r: t.at[j, 1].max(r[0]),
    "full_window_drop": lambda t, j, r: lax.scatter(  # start j != 0 of the whole row drops it
        t, jnp.stack([j, j]), r[None], lax.ScatterDimensionNumbers((0, 1), (), (0, 1)),
        mode="drop"),
    "nested_vmap": lambda t, j, r: jax.vmap(lambda c, v: c.at[j].set(v), (1, 0), 1)(t, r),
}


def _batching_dims(jaxpr):
    found = []
    for eqn in jaxpr.eqns:
        dn = eqn.params.get("dimension_numbers")
        if isinstance(dn, lax.ScatterDimensionNumbers):
            found.append(dn.operand_batching_dims)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _batching_dims(sub)
    return found


@pytest.mark.parametrize("name", PROGRAMS)
def test_explicit_form_equals_the_batched_scatter(name):
    fn = jax.vmap(PROGRAMS[name])
    jaxpr = jax.make_jaxpr(fn)(TABLE, np.zeros(B, np.int32), ROW)
    rewritten = explicit_batch_indices(jaxpr)
    assert any(_batching_dims(jaxpr.jaxpr)) and not any(_batching_dims(rewritten.jaxpr))
    batched = jax.jit(lambda *a: call(jaxpr, *a))
    explicit = jax.jit(lambda *a: call(rewritten, *a))
    for first in range(-7, 8):
        js = np.array([first, 2 - first, first // 2], np.int32)
        want, got = batched(TABLE, js, ROW)[0], explicit(TABLE, js, ROW)[0]
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (name, js)


def test_unbatched_scatters_are_left_alone():
    jaxpr = jax.make_jaxpr(lambda t, j, r: t.at[j].set(r))(TABLE[0], np.int32(0), ROW[0])
    assert explicit_batch_indices(jaxpr) is jaxpr


def _scan_writes(t, ks, r):
    """t[k] += r for each k of ks, in a lax.scan."""
    return lax.scan(lambda t, k: (t.at[k].add(r), None), t, ks)[0]


EXPORTED = {  # name -> (fn vmapped over lanes, numpy oracle of one lane)
    "set": (lambda t, k, r: t.at[k].set(r), lambda t, k, r: _np_write(t, k, r, False)),
    "add_in_jit": (jax.jit(lambda t, k, r: t.at[k].add(r * 2)),
                   lambda t, k, r: _np_write(t, k, r * 2, True)),
    "update_index": (lambda t, k, r: lax.dynamic_update_index_in_dim(t, r, k, 0),
                     lambda t, k, r: _np_write(t, min(max(k, 0), len(t) - 1), r, False)),
    "read_then_write": (lambda t, k, r: t.at[(k + 1) % 5].set(t[k] - r),
                        lambda t, k, r: _np_write(t, (k + 1) % 5, t[k] - r, False)),
    "scan_of_writes": (lambda t, k, r: _scan_writes(t, jnp.stack([k, 4 - k, k]), r),
                       lambda t, k, r: _np_write(_np_write(_np_write(t, k, r, True), 4 - k, r,
                                                           True), k, r, True)),
}


def _np_write(t, k, r, add):
    t = t.copy()
    t[k] = t[k] + r if add else r
    return t


@pytest.mark.iree
def test_vmapped_writes_outside_loops_run_on_iree():
    """`jax.vmap` of writes at per-lane positions, at the top level of the exported
    function, in a jitted helper and in a lax.scan, against numpy."""
    ks = np.array([0, 4, 2], np.int32)
    module = whilst.compile([whilst.export(jax.vmap(fn), TABLE, ks, ROW, name=name)
                             for name, (fn, _) in EXPORTED.items()]).load()
    for name, (_, oracle) in EXPORTED.items():
        want = np.stack([oracle(t, int(k), r) for t, k, r in zip(TABLE, ks, ROW)])
        np.testing.assert_array_equal(module[name](TABLE, ks, ROW), want, err_msg=name)


def test_export_alone_rewrites():
    """The exported module has no batched scatter; `jax.jit` (XLA) keeps its own."""
    fn = jax.vmap(EXPORTED["scan_of_writes"][0])
    ks = np.zeros(B, np.int32)
    assert "input_batching_dims" not in whilst.export(fn, TABLE, ks, ROW).text
    assert "input_batching_dims" in jax.jit(fn).lower(TABLE, ks, ROW).as_text()


def sliced_rows_loss(t, ks):
    """sin of rows of `t` read at lanes' positions `ks` by `dynamic_slice(t, (k, 0),
    (1, 4))` (diffrax's dense output read at several times), weighted and summed."""
    rows = jax.vmap(lambda k: lax.dynamic_slice(t, (k, 0), (1, 4)))(ks)
    return jnp.sum(jnp.sin(rows) * np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 1, 4))


def _indexed_windows(jaxpr):
    from whilst.ir.iree_forms._batched_scatter import _indexed_windows
    return [eqn for eqn in jaxpr.eqns if isinstance(eqn.params.get("dimension_numbers"),
                                                    lax.ScatterDimensionNumbers)
            and _indexed_windows(eqn)]


@pytest.mark.iree
def test_a_gradient_scattering_into_indexed_windows_runs_in_the_explicit_form():
    """The gradient scatters without batching dimensions into windows it indexes: a
    row (size 1) and the whole of each row (its start clamped to 0), which IREE 3.13
    rejected as it rejects batching dimensions. Rewritten, the scatter equals JAX's
    bit for bit, and the compiled gradient matches jax.grad on XLA, for positions in
    and out of bounds."""
    grad = jax.grad(sliced_rows_loss)
    ks = np.zeros(3, np.int32)
    jaxpr = jax.make_jaxpr(grad)(TABLE[0], ks)
    rewritten = explicit_batch_indices(jaxpr)
    assert _indexed_windows(jaxpr.jaxpr) and not _indexed_windows(rewritten.jaxpr)
    module = whilst.compile(grad, TABLE[0], ks, cache=False).load("local-sync")
    explicit = jax.jit(lambda *a: call(rewritten, *a))
    for positions in ([0, 2, 4], [-3, 7, 2], [1, 1, 1]):
        positions = np.array(positions, np.int32)
        want = jax.jit(grad)(TABLE[0], positions)
        assert np.asarray(explicit(TABLE[0], positions)[0]).tobytes() == \
            np.asarray(want).tobytes()
        np.testing.assert_allclose(module.main(TABLE[0], positions), want, rtol=1e-6)
