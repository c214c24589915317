"""A library's loop nested in an exported body that counts to a small bound (diffrax's
Runge-Kutta stages: a `lax.while_loop` in equinox's `custom_vjp`, tested on
`stage < 7`) runs as a whilst loop unrolled by that bound
(`whilst.ir._counted_loops`): one emitted iteration per run of the loop, not one per
step, with the results of a plain Python loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from whilst.lowering import unroll_factors

TABLE = np.linspace(0.1, 0.7, 7 * 3, dtype=np.float32).reshape(7, 3)


@jax.custom_vjp
def stages(y):
    """From a start the data picks (0 or 1, as diffrax's FSAL first stage) up to 7,
    reading row i of a table: y <- y * TABLE[i] + 1."""
    start = (y.ravel()[0] > 1.0).astype(jnp.int32)
    return jax.lax.while_loop(lambda c: c[0] < 7,
                              lambda c: (c[0] + 1, c[1] * jnp.asarray(TABLE)[c[0]] + 1.0),
                              (start, y))[1]


stages.defvjp(lambda y: (stages(y), None), lambda _, g: (g,))


def steps(y, n):
    return whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, 0.5 * stages(y)),
                             [0, y])[1]


def python_steps(y, n):
    for _ in range(n):
        for i in range(int(y.ravel()[0] > 1.0), 7):
            y = y * TABLE[i] + 1.0
        y = np.float32(0.5) * y
    return y


@pytest.fixture(scope="module")
def exported():
    return whilst.export(steps, np.ones(3, np.float32), np.int32(0))


def test_the_counting_loop_is_unrolled_by_its_bound(exported):
    # the outer loop (one step per iteration: its body holds a loop), the inner by 7
    assert sorted(unroll_factors(exported.text)) == [1, 7]


WIDE = np.full((2048, 3), 0.2, np.float32)  # 7 steps: past the work one iteration aims for


@pytest.mark.iree
def test_a_wide_counting_loop_is_unrolled_by_its_bound_and_matches_python():
    exported = whilst.export(steps, WIDE, np.int32(0))
    assert sorted(unroll_factors(exported.text)) == [1, 7]
    module = whilst.compile(exported).load()
    for y0, n in ((WIDE, 2), (WIDE * 10, 3)):
        np.testing.assert_allclose(module.main(y0, np.int32(n)), python_steps(y0, n),
                                   rtol=1e-5)


def test_library_loop_not_counting_stays_as_it_is():
    def f(y, n):
        inner = lambda y: jax.lax.while_loop(lambda y: y[0] < 7.0, lambda y: y * 2.0 + 1.0, y)
        return whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, inner(y) / 8.0),
                                 [0, y])[1]

    assert unroll_factors(whilst.export(f, np.ones(3, np.float32), np.int32(0)).text) == [1]


@pytest.mark.iree
def test_unrolled_counting_loop_matches_python_on_iree(exported):
    module = whilst.compile(exported).load()
    y = np.full(3, 0.2, np.float32)
    for y0, n in ((y, 0), (y, 3), (y * 10, 4)):  # starts 0, then 1 (y[0] > 1)
        np.testing.assert_allclose(module.main(y0, np.int32(n)), python_steps(y0, n),
                                   rtol=1e-5)


def counted_steps(first):
    """`steps` whose library loop also counts its own steps from the literal `first`
    (as equinox's `max_steps` counter does from 0): it stops at stage 7 or after
    7 - first steps, whichever comes first."""
    @jax.custom_vjp
    def stages(y):
        start = (y.ravel()[0] > 1.0).astype(jnp.int32)
        return jax.lax.while_loop(
            lambda c: (c[0] < 7) & (c[1] < 7),
            lambda c: (c[0] + 1, c[1] + 1, c[2] * jnp.asarray(TABLE)[c[1]] + 1.0),
            (first, start, y))[2]

    stages.defvjp(lambda y: (stages(y), None), lambda _, g: (g,))
    return lambda y, n: whilst.while_loop(lambda i, y: i < n,
                                          lambda i, y: (i + 1, 0.5 * stages(y)), [0, y])[1]


def python_counted_steps(y, n, first):
    for _ in range(n):
        start = int(y.ravel()[0] > 1.0)
        for i in range(start, min(7, start + 7 - first)):
            y = y * TABLE[i] + 1.0
        y = np.float32(0.5) * y
    return y


def counted_to_one(text) -> list[bool]:
    """For each loop `_counted_loops` bound, whether its While tests `i < 1` alone."""
    from whilst.ir._loop_emitter import NAME_ATTR
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        loops = ops_where(module, lambda op: op.name == "stablehlo.while"
                          and NAME_ATTR in op.attributes
                          and ir.StringAttr(op.attributes[NAME_ATTR]).value == "counted")
        tests = []
        for loop in loops:
            cond = loop.regions[0].blocks[0]
            test = list(cond.operations)[-1].operands[0].owner
            bound = test.operands[1].owner if test.name == "stablehlo.compare" else test
            tests.append(test.name == "stablehlo.compare"
                         and test.operands[0] == cond.arguments[0]
                         and bound.name == "stablehlo.constant"
                         and int(ir.DenseIntElementsAttr(bound.attributes["value"])[0]) == 1)
        return tests


@pytest.mark.iree
@pytest.mark.parametrize("first", [0, 3])
def test_a_loop_counting_from_a_known_start_runs_as_one_iteration_counted_on_the_host(first):
    """A tested counter starting at a literal bounds the loop's steps (7 - first, at
    most its unroll of 7): its While is counted to one iteration, whose test IREE
    keeps on the host, and its results are Python's, for either stage start."""
    exported = whilst.export(counted_steps(first), np.ones(3, np.float32), np.int32(0))
    assert counted_to_one(exported.text) == [True]
    assert counted_to_one(whilst.export(steps, np.ones(3, np.float32),
                                        np.int32(0)).text) == [False]  # start unknown
    module = whilst.compile(exported).load()
    y = np.full(3, 0.2, np.float32)
    for y0, n in ((y, 0), (y, 3), (y * 10, 4)):
        np.testing.assert_allclose(module.main(y0, np.int32(n)),
                                   python_counted_steps(y0, n, first), rtol=1e-5)
