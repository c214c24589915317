"""Reverse mode through whilst.while_loop, against jax.grad of the Python-unrolled loop
and finite differences."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import whilst
from helpers import nested_sin_oracle, per_example_sin_oracle, unrolled
from whilst.ir import iter_loops

P = collections.namedtuple("P", "a, b")


def both(cond, body, max_iter):
    """(whilst version, unrolled version) of `lambda *vars: loop(...)`."""
    def w(*vs):
        out = whilst.while_loop(cond, body, list(vs), maximum_iterations=max_iter,
                                return_same_structure=True)
        return out

    def u(*vs):
        return list(unrolled(cond, body, list(vs), max_iter))

    return w, u


def assert_grads_match(f, g, *args, argnums=0):
    want = jax.grad(g, argnums=argnums)(*args)
    got = jax.grad(f, argnums=argnums)(*args)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5,
                                                                   atol=1e-6), got, want)
    got_jit = jax.jit(jax.grad(f, argnums=argnums))(*args)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5,
                                                                   atol=1e-6), got_jit, want)


def rfc(x):
    # TF functional-while RFC: x = 2; while x < 8: x = x * x
    return whilst.while_loop(lambda x: x < 8.0, lambda x: x * x, [x], maximum_iterations=10)


def test_rfc_example():
    assert float(jax.grad(rfc)(2.0)) == 32.0
    check_grads(rfc, (2.0,), order=2, modes=["rev"])


def test_multiple_loop_vars():
    cond = lambda i, x, y: i < 4
    body = lambda i, x, y: (i + 1, jnp.sin(x) * y, x * 0.5 + y * y * 0.1)
    w, u = both(cond, body, 8)
    f = lambda x, y: (lambda o: o[1] + 2 * o[2])(w(0, x, y))
    g = lambda x, y: (lambda o: o[1] + 2 * o[2])(u(0, x, y))
    assert_grads_match(f, g, 0.3, 0.9, argnums=(0, 1))
    check_grads(f, (0.3, 0.9), order=2, modes=["rev"])


def test_namedtuple_and_dict_carries():
    def cond(i, s):
        return s["p"].a < 20.0

    def body(i, s):
        p = s["p"]
        return i + 1, {"p": P(p.a * 1.7 + p.b, jnp.cos(p.b) * p.a), "k": s["k"] + 1}

    w, u = both(cond, body, 16)
    f = lambda a, b: w(0, {"p": P(a, b), "k": 0})[1]["p"].b
    g = lambda a, b: u(0, {"p": P(a, b), "k": 0})[1]["p"].b
    assert_grads_match(f, g, 1.1, 0.4, argnums=(0, 1))


def test_closed_over_parameters_are_summed_over_iterations():
    rng = np.random.RandomState(0)
    W = (rng.randn(5, 5) * 0.4).astype(np.float32)
    b = rng.randn(5).astype(np.float32) * 0.1
    x0 = rng.randn(5).astype(np.float32)

    def make(loop):
        def loss(W, b):
            out = loop(lambda i, x: jnp.sum(x * x) < 40.0 - i,
                       lambda i, x: (i + 1, jnp.tanh(W @ x + b) * 3.0), [0, x0])
            return jnp.sum(out[1] ** 2)
        return loss

    f = make(lambda c, bd, v: whilst.while_loop(c, bd, v, maximum_iterations=30))
    g = make(lambda c, bd, v: unrolled(c, bd, v, 30))
    assert_grads_match(f, g, W, b, argnums=(0, 1))


def test_maximum_iterations_cuts_off_the_gradient():
    cond = lambda i, x: True
    body = lambda i, x: (i + 1, x * 1.1 + jnp.sin(x))
    for n in [0, 1, 3, 7]:
        w, u = both(cond, body, n)
        assert_grads_match(lambda x: w(0, x)[1], lambda x: u(0, x)[1], 0.5)


def test_integer_counter_gets_no_gradient():
    def f(x):
        i, y = whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * x), [0, x],
                                 maximum_iterations=5)
        return y + i.astype(jnp.float32)

    assert float(jax.grad(f)(1.5)) == pytest.approx(8 * 1.5 ** 7)
    grads = jax.grad(lambda n, x: f(x), argnums=0, allow_int=True)(3, 1.5)
    assert grads.dtype == jax.dtypes.float0


def test_zero_trip_loop_has_identity_gradient():
    def f(x):
        return whilst.while_loop(lambda x: x > 100.0, lambda x: x * x, [x],
                                 maximum_iterations=5)

    assert float(jax.grad(f)(2.0)) == 1.0
    np.testing.assert_array_equal(
        jax.jacrev(lambda x: whilst.while_loop(lambda i, x: i < 0, lambda i, x: (i + 1, x * 2),
                                               [0, x], maximum_iterations=3)[1])(jnp.ones(3)),
        np.eye(3))


def test_back_prop_false_and_stop_gradient():
    def f(x, back_prop):
        return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * x), [0, x],
                                 back_prop=back_prop)[1] + x

    assert float(jax.grad(lambda x: f(x, False))(2.0)) == 1.0  # no bound needed either

    def g(x):
        return whilst.while_loop(lambda i, x: i < 3,
                                 lambda i, x: (i + 1, jax.lax.stop_gradient(x) * x), [0, x],
                                 maximum_iterations=3)[1]

    assert float(jax.grad(g)(2.0)) == pytest.approx(2.0 ** 7)


def test_vjp_jacrev_value_and_grad():
    def f(x):
        return whilst.while_loop(lambda i, x: i < 4, lambda i, x: (i + 1, jnp.sin(x) * 2.0),
                                 [0, x], maximum_iterations=6)[1]

    def g(x):
        for _ in range(4):
            x = jnp.sin(x) * 2.0
        return x

    x = jnp.array([0.1, 0.5, -0.3])
    np.testing.assert_allclose(jax.jacrev(f)(x), jax.jacrev(g)(x), rtol=1e-5)
    y, vjp = jax.vjp(f, x)
    np.testing.assert_allclose(vjp(jnp.ones(3))[0], jax.vjp(g, x)[1](jnp.ones(3))[0],
                               rtol=1e-5)
    v, dv = jax.value_and_grad(lambda x: f(x).sum())(x)
    assert np.isclose(v, g(x).sum())


def test_second_order():
    def f(x):
        return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x),
                                 [0, x], maximum_iterations=4)[1]

    def g(x):
        for _ in range(3):
            x = jnp.sin(x) * x + x
        return x

    x = 0.8
    assert np.isclose(jax.grad(jax.grad(f))(x), jax.grad(jax.grad(g))(x), rtol=1e-5)
    assert np.isclose(jax.jacfwd(jax.grad(f))(x), jax.grad(jax.grad(g))(x), rtol=1e-5)
    np.testing.assert_allclose(jax.jvp(jax.grad(f), (x,), (1.0,)),
                               jax.jvp(jax.grad(g), (x,), (1.0,)), rtol=1e-5)
    check_grads(f, (x,), order=2, modes=["rev", "fwd"])


@pytest.mark.parametrize("loop_kw", [dict(maximum_iterations=4), dict(checkpoints=2)])
def test_forward_mode_of_a_linearized_loop(loop_kw):
    # jax.jvp of the tangent map (a linear While) that jax.linearize returns
    def f(x):
        return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x),
                                 [0, x], **loop_kw)[1]

    def g(x):
        for _ in range(3):
            x = jnp.sin(x) * x
        return x

    x, t = jnp.array([0.8, -0.3]), jnp.array([1.0, 2.0])
    tangent_map = lambda f: lambda x: jax.linearize(f, x)[1](t)
    np.testing.assert_allclose(jax.jvp(tangent_map(f), (x,), (t,)),
                               jax.jvp(tangent_map(g), (x,), (t,)), rtol=1e-5)


def test_nested_loops():
    def f(x):
        def outer(i, x):
            y = whilst.while_loop(lambda j, y: j < i + 1, lambda j, y: (j + 1, jnp.sin(y) + x),
                                  [0, x], maximum_iterations=5)[1]
            return i + 1, y * 0.9
        return whilst.while_loop(lambda i, x: i < 3, outer, [0, x], maximum_iterations=4)[1]

    def g(x):
        return nested_sin_oracle(x, 3)

    assert np.isclose(jax.grad(f)(0.6), jax.grad(g)(0.6), rtol=1e-5)
    assert np.isclose(jax.grad(jax.grad(f))(0.6), jax.grad(jax.grad(g))(0.6), rtol=1e-4)


def test_body_that_takes_a_gradient_of_a_loop():
    def inner(x):
        return whilst.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, jnp.sin(y) * y),
                                 [0, x], maximum_iterations=3)[1]

    def inner_ref(x):
        for _ in range(3):
            x = jnp.sin(x) * x
        return x

    def make(loop, d_inner):
        def f(x):
            return loop(lambda i, z: i < 2, lambda i, z: (i + 1, z - 0.1 * d_inner(z)),
                        [0, x])[1]
        return f

    f = make(lambda c, b, v: whilst.while_loop(c, b, v, maximum_iterations=2), jax.grad(inner))
    g = make(lambda c, b, v: unrolled(c, b, v, 2), jax.grad(inner_ref))
    assert np.isclose(f(1.2), g(1.2), rtol=1e-5)
    assert np.isclose(jax.grad(f)(1.2), jax.grad(g)(1.2), rtol=1e-4)


def per_example(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 1.5 + 0.1),
                             [0, x], maximum_iterations=8)[1]


def test_vmap_of_grad_and_grad_of_vmap_with_per_example_trip_counts():
    xs = jnp.array([0.1, 0.7, -0.4, 1.2])
    ns = np.array([0, 1, 3, 8])
    want = np.array([jax.grad(per_example_sin_oracle)(x, int(n)) for x, n in zip(xs, ns)])
    np.testing.assert_allclose(jax.vmap(jax.grad(per_example))(xs, ns), want, rtol=1e-5)
    np.testing.assert_allclose(
        jax.grad(lambda xs: jax.vmap(per_example)(xs, ns).sum())(xs), want, rtol=1e-5)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.grad(per_example)))(xs, ns), want,
                               rtol=1e-5)


def test_grad_of_a_loop_with_data_dependent_stop_under_vmap():
    def f(x):
        return whilst.while_loop(lambda x: x < 10.0, lambda x: x * 1.7 + 0.2, [x],
                                 maximum_iterations=50)

    def g(x):
        while x < 10.0:
            x = x * 1.7 + 0.2
        return x

    xs = jnp.array([0.5, 3.0, 9.0, 11.0])
    want = np.array([jax.grad(g)(x) for x in xs])
    np.testing.assert_allclose(jax.vmap(jax.grad(f))(xs), want, rtol=1e-5)


def test_grad_stablehlo_holds_a_forward_and_a_gradient_while():
    exported = whilst.export(jax.grad(rfc), np.float32(2.0))
    assert exported.text.count("stablehlo.while") == 2
    assert 'whilst.role = "forward"' in exported.text
    assert 'whilst.role = "gradient"' in exported.text


def test_gradient_while_runs_the_forward_trip_count():
    jaxpr = whilst.trace(jax.grad(rfc), 2.0).jaxpr
    forward, gradient = list(iter_loops(jaxpr))
    assert forward.params["role"] == "forward" and gradient.params["role"] == "gradient"
    trip_count = forward.outvars[0]
    assert gradient.invars[gradient.params["cond_nconsts"] + gradient.params["body_nconsts"]] \
        is trip_count


def test_residual_report_does_not_stack_closed_over_matrix():
    D = 256
    W = np.eye(D, dtype=np.float32) * 0.5

    def loss(W, x):
        out = whilst.while_loop(lambda i, x: i < 20, lambda i, x: (i + 1, jnp.tanh(W @ x)),
                                [0, x], maximum_iterations=64)
        return out[1].sum()

    report = whilst.residual_report(loss, W, np.ones(D, np.float32))
    (loop,) = report.loops
    # bounded by its trip count, 20 (`i` from 0 to a known limit), below maximum_iterations
    assert loop.role == "forward" and loop.max_iterations == 20
    assert all(shape[1:] == (D,) for shape, _ in loop.stack_shapes)
    assert report.bytes_per_iteration <= 4 * D * 4  # a few vectors, never the D*D matrix
    assert "bytes/iter" in str(report)


def test_pass_through_loop_vars_and_invariants_are_not_stacked():
    def loss(x, scale):
        def body(i, x, s):
            return i + 1, x * jnp.exp(s), s  # s passes through; exp(s) is invariant
        return whilst.while_loop(lambda i, x, s: i < 12, body, [0, x, scale],
                                 maximum_iterations=16)[1].sum()

    x, scale = np.ones(3, np.float32), np.float32(0.1)
    # d/dx needs only exp(s), computed once before the loop.
    assert whilst.residual_report(loss, x, scale, argnums=0).bytes_per_iteration == 0
    # d/ds needs x at every step, and nothing else.
    assert whilst.residual_report(loss, x, scale, argnums=1).bytes_per_iteration == 3 * 4
    g = jax.grad(loss, argnums=(0, 1))(x, scale)
    assert np.allclose(g[0], np.exp(1.2)) and np.isclose(g[1], 3 * 12 * np.exp(1.2))
