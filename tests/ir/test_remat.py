"""jax.checkpoint (jax.remat) around functions that contain whilst loops: values and
gradients against jax.grad of the Python-unrolled loop, and the loop recomputed in
the backward pass instead of stored in the forward pass."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend.core import jaxprs_in_params

import whilst
from helpers import nested_sin_oracle, unrolled

POLICIES = {
    "default": None,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
}
LOOP_KINDS = {
    "maximum_iterations": dict(maximum_iterations=12),
    "checkpoints": dict(checkpoints=2),
    "both": dict(maximum_iterations=12, checkpoints=3),
}
STEPS = 9  # more steps than reverse mode inlines (`_inlined.MAX_INLINED_STEPS`)


def cond(i, y):
    return i < STEPS


def step(w):
    return lambda i, y: (i + 1, jnp.sin(y) * w + 0.1 * y)


def looped(x, w, **loop_kw):
    _, y = whilst.while_loop(cond, step(w), [0, x], **loop_kw)
    return jnp.sum(jnp.cos(y) * y)


def oracle(x, w):
    _, y = unrolled(cond, step(w), [0, x])
    return jnp.sum(jnp.cos(y) * y)


def assert_close(got, want):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6), got, want)


X = jnp.array([0.3, -0.5, 1.2])
W = jnp.float32(1.1)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("kind", sorted(LOOP_KINDS))
def test_grad_of_checkpoint_matches_unrolled(kind, policy):
    f = jax.checkpoint(lambda x, w: looped(x, w, **LOOP_KINDS[kind]), policy=POLICIES[policy])
    want = jax.value_and_grad(oracle, (0, 1))(X, W)
    assert_close(jax.value_and_grad(f, (0, 1))(X, W), want)
    assert_close(jax.jit(jax.value_and_grad(f, (0, 1)))(X, W), want)


def test_remat_alias_and_static_argnums():
    f = jax.remat(lambda x, p: looped(x, W, maximum_iterations=12) ** p, static_argnums=(1,),
                  prevent_cse=False)
    assert_close(jax.grad(f)(X, 3), jax.grad(lambda x: oracle(x, W) ** 3)(X))


def test_jvp_and_linearize_of_checkpoint():
    f = jax.checkpoint(lambda x: looped(x, W, checkpoints=2))
    t = jnp.array([1.0, 0.5, -2.0])
    want = jax.jvp(lambda x: oracle(x, W), (X,), (t,))
    assert_close(jax.jvp(f, (X,), (t,)), want)
    y, f_lin = jax.linearize(f, X)
    assert_close((y, f_lin(t)), want)


def per_example(x, n):
    """`looped` with a traced number of steps n."""
    _, y = whilst.while_loop(lambda i, y: i < n, step(W), [0, x], maximum_iterations=12)
    return jnp.sum(jnp.cos(y) * y)


def per_example_oracle(x, n):
    _, y = unrolled(lambda i, y: i < n, step(W), [0, x])
    return jnp.sum(jnp.cos(y) * y)


def test_vmap_of_grad_of_checkpoint_stops_each_example_on_its_own():
    xs, ns = jnp.stack([X, X * 0.5, -X]), [3, 0, 9]
    want = jnp.stack([jax.grad(per_example_oracle)(x, n) for x, n in zip(xs, ns)])
    grad = jax.vmap(jax.grad(jax.checkpoint(per_example)))
    assert_close(grad(xs, jnp.array(ns)), want)
    assert_close(jax.jit(grad)(xs, jnp.array(ns)), want)
    # the batch inside the checkpointed function
    batched = jax.checkpoint(lambda xs, ns: jnp.sum(jax.vmap(per_example)(xs, ns)))
    assert_close(jax.grad(batched)(xs, jnp.array(ns)), want)


def test_two_loops_and_nested_loops():
    def f(x, w):
        _, y = whilst.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, jnp.cos(y) * w),
                                 [0, x], maximum_iterations=5)
        _, z = whilst.while_loop(lambda i, z: i < 4, lambda i, z: (i + 1, z * y + jnp.sin(z)),
                                 [0, y], checkpoints=2)
        return jnp.sum(z)

    def g(x, w):
        _, y = unrolled(lambda i, y: i < 3, lambda i, y: (i + 1, jnp.cos(y) * w), [0, x])
        _, z = unrolled(lambda i, z: i < 4, lambda i, z: (i + 1, z * y + jnp.sin(z)), [0, y])
        return jnp.sum(z)

    assert_close(jax.grad(jax.checkpoint(f), (0, 1))(X, W), jax.grad(g, (0, 1))(X, W))

    def nested(x):
        def outer(i, x):
            _, y = whilst.while_loop(lambda j, y: j <= i, lambda j, y: (j + 1, jnp.sin(y) + x),
                                     [0, x], maximum_iterations=4)
            return i + 1, y * 0.9
        return jnp.sum(whilst.while_loop(lambda i, x: i < 4, outer, [0, x],
                                         maximum_iterations=4)[1])

    assert_close(jax.jit(jax.grad(jax.checkpoint(nested)))(X),
                 jax.grad(lambda x: jnp.sum(nested_sin_oracle(x, 4)))(X))


def test_checkpoint_of_a_function_that_differentiates_a_loop():
    def loss(x):
        return looped(x, W, maximum_iterations=12)

    def loss_oracle(x):
        return oracle(x, W)

    inner = jax.checkpoint(jax.grad(loss))
    assert_close(inner(X), jax.grad(loss_oracle)(X))
    assert_close(jax.grad(lambda x: jnp.sum(inner(x) ** 2))(X),
                 jax.grad(lambda x: jnp.sum(jax.grad(loss_oracle)(x) ** 2))(X))
    assert_close(jax.hessian(jax.checkpoint(loss))(X), jax.hessian(loss_oracle)(X))

    # a linearized loop inside the checkpoint (its tangent map is a linear While)
    for kw in (dict(maximum_iterations=12), dict(checkpoints=2)):
        tangent = jax.checkpoint(lambda x, t, kw=kw: jax.linearize(
            lambda x: looped(x, W, **kw), x)[1](t))
        assert_close(jax.grad(lambda x: tangent(x, x * 2) ** 2)(X),
                     jax.grad(lambda x: jax.jvp(loss_oracle, (x,), (x * 2,))[1] ** 2)(X))


def final_state(x):
    return whilst.while_loop(cond, step(W), [0, x], maximum_iterations=STEPS)[1]


def final_state_oracle(x):
    return unrolled(cond, step(W), [0, x])[1]


def test_loop_in_a_scan_under_checkpoint():
    body = lambda c, _: (final_state(c) * c, None)

    def oracle(x):
        for _ in range(3):
            x = final_state_oracle(x) * x
        return jnp.sum(x)

    want = jax.grad(oracle)(X)
    scanned = lambda body: lambda x: jnp.sum(lax.scan(body, x, None, length=3)[0])
    assert_close(jax.grad(jax.checkpoint(scanned(body)))(X), want)
    assert_close(jax.grad(scanned(jax.checkpoint(body)))(X), want)


def test_checkpoint_in_a_loop_body_and_around_fori_loop():
    want = jax.grad(lambda x: jnp.sum(final_state_oracle(x)))(X)
    rematted_step = jax.checkpoint(lambda y: step(W)(0, y)[1])
    in_body = lambda x: jnp.sum(whilst.while_loop(
        cond, lambda i, y: (i + 1, rematted_step(y)), [0, x], maximum_iterations=STEPS)[1])
    assert_close(jax.grad(in_body)(X), want)
    fori = jax.checkpoint(lambda x: jnp.sum(whilst.lax.fori_loop(
        0, STEPS, lambda i, y: step(W)(i, y)[1], x)))
    assert_close(jax.grad(fori)(X), want)


def test_unbounded_loop_under_checkpoint_as_without_it():
    # jax.checkpoint adds no requirement of its own: an unbounded loop without
    # `checkpoints` differentiates under it exactly when it does without it
    f = lambda x: looped(x, W)
    try:
        want = jax.grad(f)(X)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e).splitlines()[0])):
            jax.grad(jax.checkpoint(f))(X)
    else:
        assert_close(want, jax.grad(lambda x: oracle(x, W))(X))
        assert_close(jax.grad(jax.checkpoint(f))(X), want)


def loops_by_place(jaxpr, inside_remat=False):
    """`[(inside a checkpoint?, role, rows pushed per step)]` of every loop."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "functional_while":
            found.append((inside_remat, eqn.params["role"], eqn.params["accumulators"]))
            continue
        for sub in jaxprs_in_params(eqn.params):
            found += loops_by_place(sub, inside_remat or eqn.primitive.name == "remat2")
    return found


@pytest.mark.parametrize("policy", ["default", "everything_saveable"])
def test_the_loop_is_recomputed_in_the_backward_pass(policy):
    f = lambda x: looped(x, W, maximum_iterations=12)
    plain = jax.make_jaxpr(jax.value_and_grad(f))(X).jaxpr
    assert loops_by_place(plain) == [(False, "forward", 1), (False, "gradient", 0)]
    remat = jax.make_jaxpr(jax.value_and_grad(jax.checkpoint(f, policy=POLICIES[policy])))(X)
    # The forward pass stores nothing; the backward pass runs the loop again (its
    # carries, then reverse mode's forward While that stores the steps).
    assert loops_by_place(remat.jaxpr) == [(False, "forward", 0), (True, "forward", 0),
                                           (True, "forward", 1), (True, "gradient", 0)]


def test_body_evaluations_with_checkpoint():
    calls = []

    def f(x):
        def body(i, y):
            jax.debug.callback(lambda i: calls.append(int(i)), i)
            return step(W)(i, y)
        return jnp.sum(whilst.while_loop(cond, body, [0, x], maximum_iterations=12)[1])

    for fn, evaluations in [(f, STEPS), (jax.checkpoint(f), 3 * STEPS)]:
        calls.clear()
        jax.block_until_ready(jax.jit(jax.value_and_grad(fn))(X))
        jax.effects_barrier()
        # with jax.checkpoint: the forward pass, then in the backward pass the
        # loop's carries (kept by the callback's effect) and reverse mode's
        # forward While
        assert sorted(calls) == sorted(list(range(STEPS)) * (evaluations // STEPS))
