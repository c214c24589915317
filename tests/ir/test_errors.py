"""Bad input gets a clear error naming the argument and pytree path, never a deep trace."""
import collections
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import unrolled
from whilst.ir import MAX_SCHEDULED_CHECKPOINTS
from whilst.ir._inspect import iter_loops

P = collections.namedtuple("P", "a, b")


def ok_cond(i, x):
    return i < 3


def ok_body(i, x):
    return i + 1, x


def test_cond_not_callable():
    with pytest.raises(TypeError, match=r"cond must be callable.*found int"):
        whilst.while_loop(3, ok_body, [0, 1.0])


def test_body_not_callable():
    with pytest.raises(TypeError, match=r"body must be callable"):
        whilst.while_loop(ok_cond, "body", [0, 1.0])


def test_empty_loop_vars():
    with pytest.raises(ValueError, match=r"loop_vars is empty"):
        whilst.while_loop(ok_cond, ok_body, [])


def test_loop_vars_not_a_sequence():
    with pytest.raises(TypeError, match=r"loop_vars must be a list or tuple.*\[value\]"):
        whilst.while_loop(lambda x: x < 3, lambda x: x + 1, 0)


def test_leaf_that_is_not_an_array_names_its_path():
    with pytest.raises(TypeError, match=r"loop_vars\[1\]\.b must be an array.*str"):
        whilst.while_loop(ok_cond, ok_body, [0, P(1.0, "text")])


def test_body_output_structure_differs():
    with pytest.raises(TypeError, match=r"body must return the structure of loop_vars"):
        whilst.while_loop(ok_cond, lambda i, x: (i + 1,), [0, 1.0])


def test_body_output_dtype_differs_names_path_and_fix():
    def body(i, p):
        return i + 1, P(p.a, p.b.astype(jnp.float32))

    with pytest.raises(TypeError, match=r"loop_vars\[1\]\.b has dtype float32, but the loop "
                                        r"variable has dtype int32.*astype"):
        whilst.while_loop(ok_cond, body, [0, P(1.0, np.int32(2))])


def test_body_output_shape_differs_suggests_preallocation():
    with pytest.raises(ValueError, match=r"loop_vars\[1\] has shape \(4,\).*\(2,\).*"
                                         r"preallocate a buffer"):
        whilst.while_loop(ok_cond, lambda i, x: (i + 1, jnp.concatenate([x, x])),
                          [0, np.ones(2, np.float32)])


def test_cond_not_boolean_scalar():
    with pytest.raises(TypeError, match=r"cond must return a boolean scalar.*shape \(2,\)"):
        whilst.while_loop(lambda i, x: x > 0, ok_body, [0, np.ones(2, np.float32)])
    with pytest.raises(TypeError, match=r"cond must return a boolean scalar.*int32"):
        whilst.while_loop(lambda i, x: i, ok_body, [0, 1.0])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_parallel_iterations_must_be_positive_int(bad):
    with pytest.raises(ValueError, match=r"parallel_iterations must be a positive int"):
        whilst.while_loop(ok_cond, ok_body, [0, 1.0], parallel_iterations=bad)


def test_maximum_iterations_negative():
    with pytest.raises(ValueError, match=r"maximum_iterations.*found -1. Pass 0 or more"):
        whilst.while_loop(ok_cond, ok_body, [0, 1.0], maximum_iterations=-1)


@pytest.mark.parametrize("bad", [2.5, np.ones(2, np.int32), "3", np.float32(3)])
def test_maximum_iterations_not_an_integer_scalar(bad):
    with pytest.raises(TypeError, match=r"maximum_iterations must be a non-negative integer"):
        whilst.while_loop(ok_cond, ok_body, [0, 1.0], maximum_iterations=bad)


def test_shape_invariants_structure_mismatch():
    with pytest.raises(ValueError, match=r"shape_invariants must have the structure"):
        whilst.while_loop(ok_cond, ok_body, [0, 1.0], shape_invariants=[()])


def test_shape_invariants_incompatible_with_initial_shape():
    with pytest.raises(ValueError, match=r"shape_invariants for loop_vars\[1\] is \(3,\), "
                                         r"which is incompatible with its initial shape"):
        whilst.while_loop(ok_cond, ok_body, [0, np.ones(2, np.float32)],
                          shape_invariants=[(), (3,)])


def test_shape_invariants_more_general_than_whilst_keeps():
    # TF doc example: m grows along axis 0, allowed by TensorShape([None, 2]).
    def body(i, m):
        return i + 1, jnp.concatenate([m, m], axis=0)

    with pytest.raises(ValueError, match=r"changes shape across iterations.*more general "
                                         r"than whilst can keep.*preallocate"):
        whilst.while_loop(ok_cond, body, [0, np.ones((2, 2), np.float32)],
                          shape_invariants=[(), (None, 2)])


def test_general_shape_invariants_accepted_when_shapes_stay_fixed():
    out = whilst.while_loop(ok_cond, ok_body, [0, np.ones((2, 2), np.float32)],
                            shape_invariants=[(), (None, 2)])
    assert out[1].shape == (2, 2)


def test_gradient_memory_must_be_a_non_negative_int_of_bytes():
    loop = functools.partial(whilst.while_loop, ok_cond, ok_body, [0, 1.0])
    with pytest.raises(TypeError, match=r"gradient_memory must be a number of bytes.*"
                                        r"found float 1000000.0.*64 \* 2\*\*20"):
        loop(gradient_memory=1e6)
    with pytest.raises(ValueError, match=r"gradient_memory must be 0 or more bytes; "
                                         r"found -1"):
        loop(gradient_memory=-1)
    with pytest.raises(ValueError, match=r"gradient_memory must be at most 17179869184 bytes "
                                         r"\(16 GiB\); found 1000000000000000"):
        loop(gradient_memory=10**15)


def _sin_loss(x, n=5, **options):
    """A loop without a bound when n is traced (a known n bounds it by its trip count)."""
    _, y = whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, jnp.sin(y) * 1.1),
                             [0, x], **options)
    return jnp.sum(y)


def _sin_oracle(x, n=5):
    for _ in range(n):
        x = jnp.sin(x) * 1.1
    return jnp.sum(x)


def test_the_largest_budget_traces_without_overflow():
    # Traced only: eagerly, an unbounded loop's chunk stacks would take the 16 GiB.
    grad = jax.grad(functools.partial(_sin_loss, gradient_memory=2**34))
    jaxpr = jax.make_jaxpr(grad)(jnp.ones(3), 5).jaxpr
    chunk_stacks = [p.chunk_stacks for p in (e.params["gradient"] for e in iter_loops(jaxpr))
                    if hasattr(p, "chunk_stacks")]
    assert chunk_stacks and all(0 < np.prod(shape) * np.dtype(dtype).itemsize <= 2**34
                                for stacks in chunk_stacks for shape, dtype in stacks)


@pytest.mark.parametrize("options", [
    dict(gradient_memory=0), dict(gradient_memory=64),   # tiny budgets
    dict(checkpoints=2**31 - 1, maximum_iterations=5),   # covers the loop: stores it
])
def test_extreme_budgets_differentiate(options):
    x = jnp.linspace(0.1, 0.9, 3)
    np.testing.assert_allclose(jax.grad(functools.partial(_sin_loss, **options))(x),
                               jax.grad(_sin_oracle)(x), rtol=1e-6)


def test_checkpoints_beyond_memory_name_the_largest_accepted():
    # n traced: the loop has no bound the checkpoints could cover
    with pytest.raises(ValueError, match=r"while_loop: checkpoints=1000000000 keeps .* at "
                                         r"most checkpoints=858993459 for these loop_vars"):
        jax.jit(functools.partial(_sin_loss, checkpoints=10**9))(jnp.ones(4), 5)
    with pytest.raises(ValueError, match=r"whilst.lax.while_loop: checkpoints=1000000000 "
                                         r"keeps .* at most checkpoints=858993459"):
        jax.jit(lambda x, n: whilst.lax.while_loop(
            lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, x),
            checkpoints=10**9))(jnp.ones(4), 5)


def test_checkpoints_covering_a_known_trip_count_store_every_step():
    """`i` from 0 to 12: twelve steps known at trace time (more than reverse mode
    inlines), which any K >= 12 covers."""
    for k in (12, 10**9):
        f = functools.partial(_sin_loss, n=12, checkpoints=k)
        forward, gradient = [e for e in jax.make_jaxpr(jax.grad(f))(jnp.ones(4)).eqns
                             if e.primitive.name == "functional_while"]
        assert (forward.params["accumulators"], gradient.params["pops"]) == (1, 1)
        x = jnp.linspace(0.1, 0.9, 4)
        np.testing.assert_allclose(jax.grad(f)(x), jax.grad(_sin_oracle)(x, 12), rtol=1e-6)


def test_huge_unroll_runs_64_steps_per_iteration_under_jit():
    from whilst.lowering import unroll_factors
    lowered = jax.jit(functools.partial(_sin_loss, unroll=10**6)).lower(jnp.ones(3), 5)
    assert unroll_factors(lowered.as_text()) == [64]
    x = jnp.linspace(0.1, 0.9, 3)
    np.testing.assert_allclose(lowered.compile()(x, 5), _sin_oracle(x), rtol=1e-6)


def test_body_output_structure_differs_names_the_entry():
    def body(i, p):
        return i + 1, (p.a, p.b)

    with pytest.raises(TypeError, match=r"for loop_vars\[1\] it returned \(\*, \*\) but "
                                        r"the loop variable is P\(a=\*, b=\*\)"):
        whilst.while_loop(ok_cond, body, [0, P(1.0, 2.0)])


def test_jax_style_cond_and_body_get_a_hint_about_star_loop_vars():
    with pytest.raises(TypeError) as e:
        whilst.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1]), (0, jnp.ones(2)))
    message = str(e.value)
    assert "cond is called as cond(*loop_vars), with one argument per entry of loop_vars " \
           "(2 here)" in message
    assert "lambda v0, v1: ..." in message and "loop_vars=[state]" in message


def test_checkpoints_are_bounded_by_the_memory_they_would_take():
    def ok_cond(i, x):   # a trip count not known at trace time: no bound to cover
        return jnp.sum(x) < 3.0

    with pytest.raises(ValueError, match=r"checkpoints=1073741824 keeps 1073741824 "
                                         r"copies of loop_vars \(20 bytes each, 20.0 GiB"):
        whilst.while_loop(ok_cond, ok_body, [0, jnp.ones(4)], checkpoints=2**30)
    with pytest.raises(ValueError, match="checkpoints must be at most 2147483647"):
        whilst.while_loop(ok_cond, ok_body, [0, jnp.ones(2)], checkpoints=2**40)
    # More than the schedule keeps, where they do not cover maximum_iterations.
    for bound in (None, 2 * 10**9):
        with pytest.raises(ValueError, match=rf"checkpoints must be at most 65534 where they "
                                             rf"do not cover the loop's maximum_iterations "
                                             rf"\({bound}\); found 1000000000\."):
            whilst.while_loop(ok_cond, ok_body, [0, 1.0], checkpoints=10**9,
                              maximum_iterations=bound)


def test_checkpoints_that_cover_the_bound_store_every_step_and_the_most_scheduled_run():
    def cond(i, y):
        return i < 5

    def body(i, y):
        return i + 1, jnp.sin(y) * y

    want = jax.grad(lambda x: unrolled(cond, body, [0, x])[1])(0.7)
    for options in [dict(checkpoints=10**9, maximum_iterations=7),
                    dict(checkpoints=MAX_SCHEDULED_CHECKPOINTS)]:
        got = jax.grad(lambda x: whilst.while_loop(cond, body, [0, x], **options)[1])(0.7)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_64_bit_numpy_carries_without_x64_never_wrap_and_warn_when_rounded():
    assert not jax.config.jax_enable_x64
    with pytest.raises(ValueError, match=r"loop_vars\[1\] is int64 with values outside "
                                         r"int32's range"):
        whilst.while_loop(ok_cond, ok_body, [0, np.array([2**33, 1])])
    with pytest.raises(ValueError, match=r"loop_vars\[1\] is 1099511627776, which does not "
                                         r"fit JAX's integer type"):
        whilst.while_loop(ok_cond, ok_body, [0, 2**40])
    with pytest.raises(ValueError, match=r"loop_vars\[1\] is float64 with values beyond"):
        whilst.while_loop(ok_cond, ok_body, [0, np.array([1e300])])
    with pytest.warns(UserWarning, match=r"loop_vars\[1\]\['b'\] is float64, but jax_enable_x64 "
                                         r"is off"):
        whilst.while_loop(ok_cond, lambda i, x: (i + 1, {"b": x["b"]}), [0, {"b": np.array([0.1])}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # exact values: nothing is lost, no warning
        i, x = whilst.while_loop(ok_cond, ok_body, [0, np.array([0.5, 2.0])])
        j, n = whilst.while_loop(ok_cond, ok_body, [np.int64(0), np.array([7], np.int64)])
