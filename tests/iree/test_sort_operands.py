"""A sort reads its own copy of an operand that other ops read too, or that is an
argument of the function it is in (whilst/lowering/_iree_sort_operands.py;
iree_limits/sort_of_shared_operand.py: IREE 3.13 sorted such an operand in place)."""
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.lowering import prepare
from whilst.lowering._ir_walk import ops_where

pytestmark = pytest.mark.iree


def sort_operand_owners(text):
    """For each `stablehlo.sort` of prepared `text`: the name of the op (or "argument")
    that makes each of its operands, and how many ops read that operand."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        return [[("argument" if isinstance(v, ir.BlockArgument) else v.owner.name,
                  len(list(v.uses))) for v in sort.operands]
                for sort in ops_where(module, lambda op: op.name == "stablehlo.sort")]


def sort_permutation(y):
    """The stable argsort of `y`, as `lax.sort` of `y` and an iota (a sort at the
    top level of the function)."""
    return lax.sort((y, jnp.arange(y.shape[0], dtype=jnp.int32)), num_keys=1)[1]


def shared_argsort(x):
    """The argsort of y = 2 x, and y + 1."""
    y = x * 2.0
    return sort_permutation(y), y + 1.0


def test_a_shared_sort_operand_is_copied_and_a_sole_one_is_not():
    x = np.array([3.0, 1.0, 2.0], np.float32)
    shared = sort_operand_owners(prepare([whilst.export(shared_argsort, x)]))
    assert shared == [[("stablehlo.add", 1), ("stablehlo.iota", 1)]], shared
    sole = sort_operand_owners(prepare([whilst.export(
        lambda x: sort_permutation(x * 2.0), x)]))
    assert sole == [[("stablehlo.multiply", 1), ("stablehlo.iota", 1)]], sole


def test_jnp_sort_copies_its_functions_argument_and_matches_numpy():
    """jnp.sort exports as a private function of its own; the caller also reads
    the value it passes."""
    x = np.array([3.0, -1.0, 2.0, 0.5], np.float32)
    fn = lambda x: (jnp.sort(x * 2.0), x * 2.0 + 1.0)
    assert [("stablehlo.add", 1)] in sort_operand_owners(prepare([whilst.export(fn, x)]))
    module = whilst.compile(fn, x).load()
    for got, want in zip(module(x), (np.sort(x * 2), x * 2 + 1)):
        np.testing.assert_array_equal(got, want)
    order, y = whilst.compile(shared_argsort, x).load()(x)
    np.testing.assert_array_equal(order, np.argsort(x * 2, kind="stable"))
    np.testing.assert_array_equal(y, x * 2 + 1)
