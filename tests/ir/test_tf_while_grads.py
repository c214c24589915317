"""TensorFlow's while-loop gradient tests (control_flow_ops_py_test.py), restated with
their programs and asserted values, eagerly and under jax.jit."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst

W = whilst.while_loop


def _squared(v):
    return W(lambda v: v < 100.0, jnp.square, [v])


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
