"""Small residual rows of one dtype share one stack (`whilst.ir.reverse._packing`): packing
round-trips bit for bit, gradients equal `jax.grad` of the Python-unrolled loop,
and on IREE the gradient runs with the same answer."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.core import ShapedArray

import whilst
from helpers import unrolled
from whilst.ir._inspect import iter_loops
from whilst.ir.reverse._packing import PACK_ELEMENTS, PACK_ROW_ELEMENTS, RowPacking


def avals(*specs):
    return [ShapedArray(shape, dtype) for shape, dtype in specs]


def test_plan_groups_small_rows_by_dtype_in_order():
    rows = avals(((), np.float32), ((3,), np.int32), ((2, 2), np.float32),
                 ((PACK_ROW_ELEMENTS + 1,), np.float32), ((), np.bool_), ((), np.int32),
                 ((5,), np.float32), ((0,), np.float32), ((), np.bool_))
    plan = RowPacking.plan(rows)
    # f32 rows 0, 2, 6 (row 3 is too large, row 7 empty); i32 1, 5; bool 4, 8.
    assert sorted(plan.groups) == [(0, 2, 6), (1, 5), (4, 8)]
    packed = {(a.shape, np.dtype(a.dtype).name) for a in plan.packed_avals}
    assert packed == {((PACK_ROW_ELEMENTS + 1,), "float32"), ((0,), "float32"),
                      ((10,), "float32"), ((4,), "int32"), ((2,), "bool")}


def test_plan_starts_a_new_row_when_one_is_full_and_leaves_lonely_rows():
    rows = avals(*[((PACK_ROW_ELEMENTS,), np.float32)] * (PACK_ELEMENTS // PACK_ROW_ELEMENTS),
                 ((1,), np.float32), ((), np.int32))
    plan = RowPacking.plan(rows)
    full = tuple(range(PACK_ELEMENTS // PACK_ROW_ELEMENTS))
    assert plan.groups == (full,)  # the next f32 row holds only the 1-element row
    assert [a.shape for a in plan.packed_avals] == [(1,), (), (PACK_ELEMENTS,)]


def test_pack_then_unpack_is_the_identity_bit_for_bit():
    rng = np.random.default_rng(0)
    rows = [np.float32(np.nan), rng.standard_normal((2, 3)).astype(np.float32),
            np.array([-0.0, np.inf], np.float32), np.int32(-7),
            rng.integers(-9, 9, 4).astype(np.int32), np.bool_(True),
            np.array([False, True]), rng.standard_normal(300).astype(np.float32)]
    plan = RowPacking.plan([ShapedArray(np.shape(r), np.asarray(r).dtype) for r in rows])
    assert len(plan.groups) == 3 and len(plan.packed_avals) == 4
    packed = jax.jit(plan.pack)(rows)
    assert [(p.shape, p.dtype) for p in packed] == [(a.shape, a.dtype)
                                                  for a in plan.packed_avals]
    back = jax.jit(plan.unpack)(packed)
    for want, got in zip(rows, back):
        want, got = np.asarray(want), np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


def euler_cond(t, y, h, accepted, _):
    return t < 1.0


def euler_body(t, y, h, accepted, a):
    """An adaptive Euler step on a small state: many scalar residuals per step."""
    dy = jnp.stack([a * y[0] - y[0] * y[1], y[0] * y[1] - 0.5 * y[1]])
    err = jnp.max(jnp.abs(dy)) * h
    ok = err < 0.05
    y_new = jnp.where(ok, y + h * dy, y)
    h_new = jnp.clip(h * jnp.sqrt(0.05 / (err + 1e-6)), 0.01, 0.2)
    return t + jnp.where(ok, h, 0.0), y_new, h_new, accepted + ok.astype(jnp.int32), a


def euler_loss(y0, a, **loop_options):
    t, y, h, accepted, _ = whilst.while_loop(
        euler_cond, euler_body, [jnp.float32(0.0), y0, jnp.float32(0.05), jnp.int32(0), a],
        name="euler", **loop_options)
    return jnp.sum(y ** 2) + h


def euler_oracle(y0, a):
    t, y, h, accepted, _ = unrolled(euler_cond, euler_body,
                                    [jnp.float32(0.0), y0, jnp.float32(0.05), jnp.int32(0), a])
    return jnp.sum(y ** 2) + h


Y0, A = np.array([1.0, 0.5], np.float32), np.float32(1.1)


def forward_stacks(fn, *args):
    (loop,) = [e for e in iter_loops(jax.make_jaxpr(fn)(*args).jaxpr)
               if e.params["role"] == "forward"]
    return [v.aval for v in loop.outvars[len(loop.outvars) - loop.params["accumulators"]:]]


@pytest.mark.parametrize("options", [dict(maximum_iterations=200), dict(),
                                     dict(maximum_iterations=200, unroll=3)])
def test_gradient_through_packed_rows_matches_the_unrolled_loop(options):
    loss = functools.partial(euler_loss, **options)
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(Y0, A)
    want = jax.grad(euler_oracle, argnums=(0, 1))(Y0, A)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_small_rows_share_one_stack_per_dtype():
    loss = functools.partial(euler_loss, maximum_iterations=200)
    stacks = forward_stacks(jax.grad(loss, argnums=(0, 1)), Y0, A)
    dtypes = [np.dtype(s.dtype).name for s in stacks]
    assert len(dtypes) == len(set(dtypes)) and len(stacks) <= 3
    assert max(s.shape[1] for s in stacks) > 1  # the f32 stack holds several residuals


@pytest.mark.iree
def test_packed_gradient_on_iree_matches_the_unrolled_loop():
    grad = jax.grad(functools.partial(euler_loss, maximum_iterations=200), argnums=(0, 1))
    module = whilst.compile(grad, Y0, A)
    got = whilst.runtime.load(module.data).main(Y0, A)
    want = jax.grad(euler_oracle, argnums=(0, 1))(Y0, A)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
