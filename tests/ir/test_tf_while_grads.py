"""TensorFlow's while-loop gradient tests (control_flow_ops_py_test.py and
while_v2_test.py), restated with their programs and asserted values, eagerly and under
jax.jit."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst

W = whilst.while_loop


def _squared_until(limit):
    return lambda x: W(lambda v: v < limit, jnp.square, [x])


_squared = _squared_until(100.0)


def _doubled(x, steps):
    return W(lambda i, x: i < steps, lambda i, x: (i + 1, x * 2.0), [0, x])


def _ys_xs(x, y):
    def body(x, y):
        y1 = x + y
        return x * y1, y1
    return W(lambda x, y: x < 100.0, body, [x, y])


def _cond_grad_in_nested_whiles():
    def inner_body(j, x):
        return j + 1, jax.grad(lambda x: jax.lax.cond(x < 1, lambda: 2 * x, lambda: x))(x)

    def outer_body(i, x):
        return i + 1, W(lambda j, x: j < 3, inner_body, [0, 0.0])[1]
    return W(lambda i, x: i < 3, outer_body, [0, 0.0])


_Named = collections.namedtuple("_Named", ("a", "b"))


def _nested_input():
    def body(lv0, lv1, lv2):
        return [_Named(a=lv0.a + 1, b=lv0.b), (lv1[0] + 1, lv1[1]), lv2 + 2]
    r = W(lambda lv0, _1, _2: lv0.a < 100.0, body, [_Named(a=0.0, b=1.0), (2.0, 3.0), 4.0])
    assert isinstance(r[0], _Named) and isinstance(r[1], tuple)
    return jax.tree_util.tree_leaves(r)


CASES = {   # testWhileGrad_* and others: (program, TensorFlow's asserted value)
    "Square": (lambda: jax.grad(lambda v: jax.lax.cond(
        1 < 2, lambda: _squared(v), lambda: v))(2.0), 1024.0),
    "Shape": (lambda: jax.grad(lambda x: jnp.sum(W(
        lambda i, v: i < 5, lambda i, v: [i + 1, x * v], [0, jnp.full(2, 2.0)])[1]))(
        jnp.array([3.0, 4.0])), [810.0, 2560.0]),
    "BaseShape": (lambda: jax.grad(lambda x: jnp.sum(W(
        lambda v: False, lambda v: v * x, [jnp.array([2.0, 2.0])])) + jnp.sum(jnp.square(x)))(
        jnp.array([1.0, 2.0])), [2.0, 4.0]),
    "MultipleUses": (lambda: jax.grad(lambda v: _squared(v) * _squared(v))(2.0), 524288.0),
    "LoopAdd": (lambda: jax.grad(lambda v: _squared(v) + _squared(v))(2.0), 2048.0),
    "Mul": (lambda: jax.grad(lambda a, v: W(lambda v: v < 100.0, lambda v: v * a, [v]),
                             (0, 1))(3.0, 2.0), [216.0, 81.0]),
    "GradInCond": (lambda: jax.lax.cond(1 < 2, lambda x: jax.grad(lambda x: W(
        lambda n: n < 10.0, lambda n: n + x, [1.0]))(x), lambda x: x, 1.0), 9.0),
    "GradInWhile": (lambda: W(lambda n: n < 6.0, lambda n: jax.grad(lambda x: W(
        lambda n: n < 10.0, lambda n: n + x, [n]))(1.0), [1.0]), 9.0),
    "CondGradInNestedWhiles": (_cond_grad_in_nested_whiles, [3, 1.0]),
    "ys_xs": (lambda: [jax.grad(lambda x, y: sum(_ys_xs(x, y)), argnums)(3.0, 2.0)
                       for argnums in (0, 1)] + [
        jax.grad(lambda x, y: _ys_xs(x, y)[0], argnums)(3.0, 2.0) for argnums in (0, 1)],
        [304.0, 124.0, 295.0, 120.0]),
    "Dependency": (lambda: jax.grad(lambda x: _doubled(x, 10)[1])(2.0), 1024.0),
    "NoGradient": (lambda: jax.grad(lambda v: W(
        lambda v: v < 100.0, jnp.square, [v], back_prop=False) + v)(2.0), 1.0),
    "NoDependency": (lambda: jax.grad(lambda var: jnp.sum(W(
        lambda d, t, _: d < 10, lambda d, t, _: (d + 1, t, t), [0, var, var])[2]))(
        jnp.ones((2, 3))), np.ones((2, 3))),
    "Const": (lambda: jax.grad(lambda c0: W(
        lambda d, _: d < 1, lambda d, _: (d + 1, 1.0), [0, c0])[1])(0.0), 0.0),
    "SerialTwoLoops": (lambda: jax.grad(
        lambda x: _doubled(_doubled(x, 5)[1], 5)[1])(2.0), 1024.0),
    "ParallelTwoLoops": (lambda: jax.grad(
        lambda x: _doubled(x, 5)[1] + _doubled(x, 5)[1])(2.0), 64.0),
    "OneOutputWithControlDependencyOnSecond": (lambda: [
        W(lambda i, *_: i < 1, lambda i, x, y: (i + 1, x, x + y), [0, 1.0, 1.0])[2],
        jax.grad(lambda x: W(lambda i, *_: i < 1, lambda i, x, y: (i + 1, x, x + y),
                             [0, x, 1.0])[2])(1.0)], [2.0, 1.0]),
    "NestedInput": (_nested_input, [100.0, 1.0, 102.0, 3.0, 204.0]),
}


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", list(CASES))
def test_tensorflows_while_gradient_values(name, mode):
    program, want = CASES[name]
    got = program() if mode == "eager" else jax.jit(program)()
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=1e-6)


def _both_of_two_carries(x, y):
    """testMultipleLoopVars: `while v < 45: v, w = v * w, v + w` from (5, 3) ends at
    (120, 23) = (y x^2 + x y^2, x y + x + y)."""
    return W(lambda v, _: v < 45.0, lambda v, w: (v * w, v + w), [x, y])


def _sum_of_powers(n):
    """testNestedWhile: n^0 + ... + n^5, each power by an inner loop counted down by a
    float from the outer loop's carry (both loops unbounded)."""
    def body(i, total):
        power = W(lambda c, _: c > 0, lambda c, v: (c - 1.0, v * n), [i, 1.0])
        return i - 1.0, total + power[1]
    return W(lambda i, _: i >= 0, body, [5.0, 0.0])[1]


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_tensorflows_while_v2_gradients_with_their_values(mode):
    """TensorFlow's while_v2_test.py values: testSingleLoopVar and testGradientTape
    (x^2 and x^4 from 2), testDoubleDerivative (x^4: 16, 32, 48),
    testMultipleWhileLoops (x^2 then its square: 32, 48), testMultipleLoopVars
    (each result's gradient with respect to x and to y, and of their sum),
    testCaptureExternalTensorInCond and InBody (18, 9) and testNestedWhile (364, 547)."""
    run = (lambda f, *a: f(*a)) if mode == "eager" else (lambda f, *a: jax.jit(f)(*a))
    assert run(jax.grad(_squared_until(4.0)), 2.0) == 4.0
    fourth = _squared_until(8.0)
    assert [run(f, 2.0) for f in (fourth, jax.grad(fourth), jax.grad(jax.grad(fourth)))] == [
        16.0, 32.0, 48.0]
    chained = lambda x: _squared_until(16.0)(_squared_until(4.0)(x))  # noqa: E731
    assert [run(jax.grad(chained), 2.0), run(jax.grad(jax.grad(chained)), 2.0)] == [32.0, 48.0]
    assert [float(v) for v in run(_both_of_two_carries, 5.0, 3.0)] == [120.0, 23.0]
    for pick, want in [(lambda r: r[0], (39.0, 55.0)), (lambda r: r[1], (4.0, 6.0)),
                       (lambda r: r[0] + r[1], (43.0, 61.0))]:
        grads = run(jax.grad(lambda x, y: pick(_both_of_two_carries(x, y)), (0, 1)), 5.0, 3.0)
        assert [float(g) for g in grads] == list(want)
    def in_cond(x, y):
        return W(lambda v: v + y < 9.0, lambda v: v * 3.0, [x])

    def in_body(x, y):
        return W(lambda v: v < 8.0, lambda v: v * y, [x])

    for loop, y in [(in_cond, 1.0), (in_body, 3.0)]:
        assert [run(loop, 2.0, y), run(jax.grad(loop), 2.0, y)] == [18.0, 9.0]
    assert [run(_sum_of_powers, 3.0), run(jax.grad(_sum_of_powers), 3.0)] == [364.0, 547.0]
