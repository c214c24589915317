"""Loops whilst did not emit (`jax.lax.while_loop`, as libraries write them) compile
through `whilst.compile` when their body does not read a carry: the previous state,
a flag recomputed from scratch, a constant (whilst/lowering/_iree_unread_carries.py;
iree_limits/unread_loop_carry.mlir)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst.lowering._iree_unread_carries import unread_carries_read

pytestmark = pytest.mark.iree


def library_loop(x):
    """Grow x until its sum passes 100, carrying what the body never reads."""
    def cond(c):
        i, y, _, _, _ = c
        return (i < 10) & (jnp.sum(y) < 100.0)

    def body(c):
        i, y, _, _, _ = c
        return i + 1, y * 1.5 + 0.1, jnp.sum(y) > 3.0, y, jnp.int32(0)
    return lax.while_loop(cond, body, (0, x, False, x, jnp.int32(1)))


def python_loop(x):
    i, y, flag, prev, k = 0, x, False, x, 1
    while i < 10 and np.sum(y) < 100.0:
        i, y, flag, prev, k = i + 1, y * np.float32(1.5) + np.float32(0.1), np.sum(y) > 3.0, y, 0
    return i, y, flag, prev, k


def test_every_loop_body_reads_every_carry():
    from whilst.lowering._iree_ir import ir

    text = jax.export.export(jax.jit(library_loop))(np.ones(2, np.float32)).mlir_module()
    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        (loop,) = [op for op in module.body.operations[0].regions[0].blocks[0].operations
                   if op.operation.name == "stablehlo.while"]
        body = loop.regions[1].blocks[0]
        assert [bool(list(a.uses)) for a in body.arguments] == [True, True, False, False, False]
        unread_carries_read(module)
        assert all(list(a.uses) for a in body.arguments)


@pytest.mark.parametrize("x", [[1.0, 2.0], [200.0, 0.0], [0.5, 0.25]])
def test_library_loop_with_unread_carries_matches_python(x):
    x = np.array(x, np.float32)
    module = whilst.compile(library_loop, x).load()
    for got, want in zip(module(x), python_loop(x)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def folded_carries_loop(x):
    """Carries whose new values IREE folds to constants: a boolean set to True (`True
    or e` folds) and a flag picked by a select on a constant predicate (diffrax's
    fixed-step Tsit5 gradient carries both)."""
    def body(c):
        i, y, done, first = c
        first = lax.select(jnp.array(True), jnp.array(False), first)
        return i + 1, lax.select(first, y, y * 1.5 + 0.1), jnp.array(True), first
    return lax.while_loop(lambda c: c[0] < 5, body, (0, x, jnp.array(False), jnp.array(True)))



def test_carries_folded_to_constants_compile_and_match_python():
    x = np.array([1.0, 2.0], np.float32)
    y = x
    for _ in range(5):
        y = y * np.float32(1.5) + np.float32(0.1)
    got = whilst.compile(folded_carries_loop, x).load()(x)
    np.testing.assert_allclose(got[1], y, rtol=1e-6)
    assert [int(got[0]), bool(got[2]), bool(got[3])] == [5, True, False]
