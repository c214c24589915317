"""Cases of JAX's own loop tests (jax-ml/jax `tests/lax_control_flow_test.py`, values
restated) run on whilst.lax, with jax.lax's loops or plain Python as the oracle:
boolean fori unroll, floating-point fori bounds, a weakly typed bound beside an
int16 one, custom pytrees whose keyed flatten has other aux data."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, tree_util

import whilst
import whilst.lax


def _add_one(i, c):
    return c + 1


@pytest.mark.parametrize("lower,upper,unroll", [
    (np.int16(0), 10, True), (0, np.int16(10), False),  # ..._supports_unrolling_with_bool
    (np.int16(0), 10, 3), (0, np.int16(10), 2),         # test_fori_loop_supports_unrolling
])
def test_fori_loop_unroll_as_jax(lower, upper, unroll):
    init = jnp.float32(10)
    got = whilst.lax.fori_loop(lower, upper, _add_one, init, unroll=unroll)
    assert got == init + 10 == lax.fori_loop(lower, upper, _add_one, init, unroll=unroll)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("upper", [0, -1])
@pytest.mark.parametrize("unroll", [False, True])
def test_fori_loop_returns_init_with_nonpositive_length(jit, upper, unroll):
    # test_fori_loop_returns_init_with_nonpositive_length: as Python's range
    def f(init):
        return whilst.lax.fori_loop(0, upper, _add_one, init, unroll=unroll)
    init = jnp.float32(10)
    assert (jax.jit(f) if jit else f)(init) == init


def test_fori_loop_unroll_true_needs_concrete_bounds():
    # test_fori_loop_with_dynamic_indices_cannot_unroll (whilst unrolls traced loops
    # by an int, so only True, every step, is refused)
    f = jax.jit(lambda upper: whilst.lax.fori_loop(np.int16(0), upper, _add_one,
                                                   jnp.float32(10), unroll=True))
    with pytest.raises(ValueError, match=r"fori_loop: unroll=True .* traced bounds"):
        f(10)
    g = jax.jit(lambda upper: whilst.lax.fori_loop(0, upper, _add_one, jnp.float32(10),
                                                   unroll=3))
    assert g(10) == 20


def test_fori_loop_scalar_limits_beside_int16():
    # testForiLoopScalarLimits, and the same with the Python int jitted (weakly typed)
    init = jnp.float32(10)
    assert whilst.lax.fori_loop(np.int16(0), 10, _add_one, init) == init + 10
    assert whilst.lax.fori_loop(0, np.int16(10), _add_one, init) == init + 10

    def sums(fori):
        return jax.jit(lambda upper: fori(np.int16(0), upper, lambda i, c: c + i, 0))

    got, want = sums(whilst.lax.fori_loop)(10), sums(lax.fori_loop)(10)
    assert got == want == sum(range(10))
    assert jax.typeof(got) == jax.typeof(want)  # int16, as the index
    with pytest.raises(TypeError, match=r"lower and upper must have the same dtype; found "
                                        r"int16 and int32"):
        whilst.lax.fori_loop(np.int16(0), jnp.int32(10), lambda i, c: c, jnp.float32(7))


def test_fori_loop_floating_point_bounds_as_jax():
    body = lambda i, c: c + i
    # Concrete bounds: int(lower) to int(upper), i an int.
    for lower, upper in [(1.0, 3.0), (1.5, 3.7), (np.float32(0.5), np.float32(4.0))]:
        got = whilst.lax.fori_loop(lower, upper, body, 1.0)
        assert got == lax.fori_loop(lower, upper, body, 1.0) == 1.0 + sum(
            range(int(lower), int(upper)))
    # Traced bounds: a float index from lower, while i < upper.
    f = lambda fori: jax.jit(lambda x: fori(x, x + 2.0, lambda i, c: c * i, x))
    for x in (1.5, 0.25):
        np.testing.assert_allclose(f(whilst.lax.fori_loop)(x), f(lax.fori_loop)(x))
        np.testing.assert_allclose(f(whilst.lax.fori_loop)(x), x * x * (x + 1.0))
    # testStaticForiGrad: bounds that jax.grad traces are concrete, as in JAX.
    g = lambda fori: (lambda x: fori(x, x + 2.0, lambda i, c: c * i, x))
    for x in (1.5, 2.5):
        np.testing.assert_allclose(jax.grad(g(whilst.lax.fori_loop))(x),
                                   jax.grad(g(lax.fori_loop))(x))
        np.testing.assert_allclose(
            jax.linearize(g(whilst.lax.fori_loop), x)[1](1.0),
            jax.linearize(g(lax.fori_loop), x)[1](1.0))


def test_fori_loop_batched():
    # testForiLoopBatched
    def body(i, carry):
        x, y = carry
        return x + 1, y + 2

    got = jax.vmap(lambda x: whilst.lax.fori_loop(0, 10, body, (x, 0)))(np.array([0, 1]))
    np.testing.assert_array_equal(got[0], [10, 11])
    np.testing.assert_array_equal(got[1], [20, 20])


class _Node:
    def __init__(self, x, y):
        self.x, self.y = x, y


tree_util.register_pytree_with_keys(
    _Node,
    lambda o: ((("x", o.x), ("y", o.y)), "with_keys"),   # flatten_with_keys
    lambda _, xy: _Node(xy[0], xy[1]),                   # unflatten
    lambda o: ((o.x, o.y), "without_keys"),              # flatten
)


def test_custom_pytree_whose_keyed_flatten_has_other_aux_data():
    # testWhileLoopCustomPytreeDiffAuxData, with a loop that runs
    cond = lambda o: o.x > 0.0
    body = lambda o: _Node(o.x - 0.5, o.y * 2.0 + 1.0)
    want = lax.while_loop(cond, body, _Node(1.0, 1.0))
    assert (want.x, want.y) == (0.0, 7.0)
    got = whilst.lax.while_loop(cond, body, _Node(1.0, 1.0))
    assert isinstance(got, _Node) and (got.x, got.y) == (want.x, want.y)
    for loop_vars in ([_Node(1.0, 1.0)], (_Node(1.0, 1.0), 0)):
        out = whilst.while_loop(lambda o, *n: cond(o),
                                lambda o, *n: (body(o), *[k + 1 for k in n]),
                                loop_vars, return_same_structure=True)
        assert (out[0].x, out[0].y) == (want.x, want.y)
        assert list(out[1:]) == [2] * (len(loop_vars) - 1)
    # Unchanged: a body of another structure is still refused.
    with pytest.raises(TypeError, match="body_fun must return the structure of init_val"):
        whilst.lax.while_loop(cond, lambda o: (o.x, o.y), _Node(1.0, 1.0))
