"""Boolean arrays converted to numbers reach IREE as selects
(whilst/lowering/_iree_boolean_converts.py; iree_limits/boolean_matrix_in_vecmat.mlir:
iree-compile 3.13 failed on `x @ jnp.eye(3)`)."""
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering import prepare
from whilst.lowering._ir_walk import ops_where

pytestmark = pytest.mark.iree

X = np.array([1.0, -2.0, 3.0], np.float32)


def products(x):
    """A vector times boolean matrices made numbers: the identity, a mask of x's
    signs as float32 and as int32."""
    positive = (x > 0)[:, None] & (jnp.arange(3) < 2)[None, :]
    return (x @ jnp.eye(3), x @ positive.astype(jnp.float32),
            jnp.arange(3, dtype=jnp.int32) @ positive.astype(jnp.int32))


def test_products_with_boolean_matrices_run_and_match_numpy():
    got = whilst.compile(products, X).load()(X)
    positive = (X > 0)[:, None] & (np.arange(3) < 2)[None, :]
    want = (X, X @ positive.astype(np.float32), np.arange(3) @ positive.astype(np.int32))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_no_boolean_array_is_converted_in_the_prepared_module():
    from whilst.lowering._iree_ir import ir

    text = prepare([whilst.export(products, X)])
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        converts = ops_where(module, lambda op: op.name == "stablehlo.convert" and str(
            op.operands[0].type).endswith("xi1>"))
        selects = ops_where(module, lambda op: op.name == "stablehlo.select")
    assert not converts and len(selects) >= 3
