"""Stacks and concatenations of single lines as selects of broadcasts
(`whilst.ir.iree_forms._stacked_lines`): bit for bit the stacked values, vmapped
and not, inside jax's control flow too; thicker or more operands keep their form;
a vmapped vector field stacked by components runs on IREE with numpy's values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.ir._tracing import call
from whilst.ir.iree_forms._onehot import SELECTED_LINES
from whilst.ir.iree_forms._stacked_lines import stacked_lines

STACKING = {"stack", "concatenate"}
SPECIAL = np.array([1.5, -0.0, np.nan, -np.inf, np.inf, 3.0], np.float32)


def field(y):
    """Lotka-Volterra's vector field, stacked by components."""
    return jnp.stack([0.1 * y[0] - 0.02 * y[0] * y[1], -0.4 * y[1] + 0.02 * y[0] * y[1]])


PROGRAMS = {
    "stack": (lambda x: jnp.stack([x, -x, x * 2.0]), (SPECIAL,)),
    "stack_inner_axis": (lambda x: jnp.stack([x, x + 1.0], axis=1), (SPECIAL,)),
    "stack_ints": (lambda i: jnp.stack([i, i * 3, i - 7]), (np.arange(4, dtype=np.int32),)),
    "stack_bools": (lambda x: jnp.stack([x > 0, x < 0]), (SPECIAL,)),
    "concatenate_lines": (lambda m: lax.concatenate([m[:, :1], m[:, 1:2] * 2.0], 1),
                          (SPECIAL.reshape(3, 2),)),
    "vmapped_field": (jax.vmap(field), (np.stack([SPECIAL, SPECIAL[::-1]], 1),)),
    "in_a_cond": (lambda x: lax.cond(x[0] > 0, lambda v: jnp.stack([v, v]),
                                     lambda v: jnp.stack([v, -v]), x), (SPECIAL,)),
}


def stacking_ops(jaxpr) -> set:
    found = {e.primitive.name for e in jaxpr.eqns} & STACKING
    for e in jaxpr.eqns:
        for branch in e.params.get("branches", ()):
            found |= stacking_ops(branch.jaxpr)
    return found


@pytest.mark.parametrize("name", PROGRAMS)
def test_stacked_lines_equal_the_stack_bit_for_bit(name):
    fn, args = PROGRAMS[name]
    jaxpr = jax.make_jaxpr(fn)(*args)
    rewritten = stacked_lines(jaxpr)
    assert stacking_ops(jaxpr.jaxpr) and not stacking_ops(rewritten.jaxpr)
    # Op by op: under jax.jit, XLA may contract the field's multiply and add into an
    # FMA in one fusion and not in the other (1 ulp apart on jax 0.12).
    want = np.asarray(call(jaxpr, *args)[0])
    got = np.asarray(call(rewritten, *args)[0])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_thick_operands_and_long_stacks_keep_their_form():
    x = np.ones((4, 2), np.float32)
    for fn in (lambda m: jnp.concatenate([m, m]),
               lambda m: jnp.stack([m[0]] * (SELECTED_LINES + 1))):
        jaxpr = jax.make_jaxpr(fn)(x)
        assert stacked_lines(jaxpr) is jaxpr


@pytest.mark.iree
def test_a_vmapped_field_in_a_loop_matches_numpy_on_iree():
    """Euler steps of the stacked field over a batch, in a loop counted by data:
    the exported module does not concatenate the field's components."""
    def euler(y, n):
        return whilst.lax.fori_loop(0, n, lambda _, y: y + 0.01 * jax.vmap(field)(y), y)

    y0 = np.stack([np.linspace(5.0, 15.0, 64), np.linspace(2.0, 8.0, 64)], 1)
    y0 = y0.astype(np.float32)
    exported = whilst.export(euler, y0, np.int32(0))
    got = np.asarray(whilst.compile(exported).load().main(y0, np.int32(50)))
    want = y0.copy()
    for _ in range(50):
        a, b = want[:, 0], want[:, 1]
        want = (want + np.float32(0.01) * np.stack(
            [0.1 * a - 0.02 * a * b, -0.4 * b + 0.02 * a * b], 1)).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where
    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(exported.text)  # alive while its ops are read
        stacked = ir.RankedTensorType.get([2, 64], ir.F32Type.get())   # the field's stack
        assert not ops_where(module, lambda op: op.name == "stablehlo.concatenate"
                             and op.results[0].type == stacked)
