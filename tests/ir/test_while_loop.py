"""Forward semantics of whilst.while_loop, against plain Python loops and numpy."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import whilst

Pair = collections.namedtuple("Pair", "j, k")


def test_counter_to_ten():
    # TF doc: i = 0; c = lambda i: i < 10; b = lambda i: (i + 1,)
    r = whilst.while_loop(lambda i: i < 10, lambda i: (i + 1,), [0])
    assert int(r) == 10


def test_nested_namedtuple_loop_vars():
    # TF doc example with ijk_0 = (0, Pair(1, 2))
    def b(i, p):
        return i + 1, Pair(p.j + p.k, p.j - p.k)

    i, p = whilst.while_loop(lambda i, p: i < 10, b, (0, Pair(1, 2)))
    ri, rj, rk = 0, 1, 2
    while ri < 10:
        ri, rj, rk = ri + 1, rj + rk, rj - rk
    assert (int(i), int(p.j), int(p.k)) == (ri, rj, rk)
    assert isinstance(p, Pair)


def test_maximum_iterations_cuts_the_loop():
    # TF doc: the loop would run forever; maximum_iterations stops it.
    out = whilst.while_loop(lambda i, x: True, lambda i, x: (i + 1, x * 2.0), [0, 1.0],
                            maximum_iterations=7)
    assert int(out[0]) == 7 and float(out[1]) == 2.0 ** 7


def test_maximum_iterations_larger_than_trip_count():
    out = whilst.while_loop(lambda i: i < 3, lambda i: i + 1, [0], maximum_iterations=100)
    assert int(out) == 3


def test_maximum_iterations_traced_under_jit():
    f = jax.jit(lambda n: whilst.while_loop(lambda i: i < 50, lambda i: i + 1, [0],
                                            maximum_iterations=n))
    assert int(f(5)) == 5 and int(f(80)) == 50


def test_zero_iteration_loop_returns_inputs():
    x = np.arange(3.0, dtype=np.float32)
    i, y = whilst.while_loop(lambda i, x: i < 0, lambda i, x: (i + 1, x + 1), [0, x])
    assert int(i) == 0
    np.testing.assert_array_equal(y, x)
    assert int(whilst.while_loop(lambda i: True, lambda i: i + 1, [0],
                                 maximum_iterations=0)) == 0


def test_dict_and_list_loop_vars_and_return_same_structure():
    init = {"x": np.float32(1.0), "n": 0}
    out = whilst.while_loop(lambda s: s["n"] < 4,
                            lambda s: {"x": s["x"] * 3.0, "n": s["n"] + 1}, [init],
                            return_same_structure=True)
    assert isinstance(out, list) and float(out[0]["x"]) == 81.0
    out = whilst.while_loop(lambda a, b: a < 3, lambda a, b: [a + 1, b * 2], (0, 1.0),
                            return_same_structure=True)
    assert isinstance(out, tuple) and float(out[1]) == 8.0


def test_single_loop_var_comes_back_bare_and_several_as_list():
    assert np.ndim(whilst.while_loop(lambda i: i < 2, lambda i: i + 1, [0])) == 0
    assert isinstance(whilst.while_loop(lambda i, x: i < 2, lambda i, x: (i + 1, x),
                                        [0, 1.0]), list)


def collatz_steps(n):
    return whilst.while_loop(lambda n, s: n != 1,
                             lambda n, s: (jnp.where(n % 2 == 0, n // 2, 3 * n + 1), s + 1),
                             [n, 0])[1]


def python_collatz(n):
    steps = 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    return steps


def test_data_dependent_trip_count_eager_and_jit():
    for n in [1, 6, 27, 97]:
        assert int(collatz_steps(n)) == python_collatz(n)
        assert int(jax.jit(collatz_steps)(n)) == python_collatz(n)


def test_vmap_per_example_trip_counts():
    ns = np.array([1, 6, 27, 97, 7])
    got = jax.vmap(collatz_steps)(ns)
    np.testing.assert_array_equal(got, [python_collatz(int(n)) for n in ns])


def test_vmap_finished_examples_keep_their_values():
    def f(x, limit):
        return whilst.while_loop(lambda i, x: x < limit, lambda i, x: (i + 1, x * 1.5),
                                 [0, x])

    xs = np.array([1.0, 2.0, 10.0], np.float32)
    limits = np.array([5.0, 3.0, 1.0], np.float32)
    i, y = jax.vmap(f)(xs, limits)
    for k in range(3):
        ri, rx = 0, xs[k]
        while rx < limits[k]:
            ri, rx = ri + 1, np.float32(rx * np.float32(1.5))
        assert int(i[k]) == ri and np.isclose(y[k], rx)


def test_vmap_of_closed_over_values_and_batched_maximum_iterations():
    W = np.array([[0.5, 0.1], [0.2, 0.3]], np.float32)

    def f(x, n):
        return whilst.while_loop(lambda i, x: True, lambda i, x: (i + 1, jnp.tanh(W @ x)),
                                 [0, x], maximum_iterations=n)[1]

    xs = np.ones((3, 2), np.float32)
    ns = np.array([0, 2, 5])
    got = jax.vmap(f)(xs, ns)
    for k in range(3):
        ref = xs[k]
        for _ in range(ns[k]):
            ref = np.tanh(W @ ref)
        np.testing.assert_allclose(got[k], ref, rtol=1e-6)


def test_nested_loops_forward():
    def f(x):
        def outer(i, x):
            y = whilst.while_loop(lambda j, y: j < i, lambda j, y: (j + 1, y + 1.0),
                                  [0, x])[1]
            return i + 1, y
        return whilst.while_loop(lambda i, x: i < 4, outer, [0, x])[1]

    assert float(f(0.0)) == 0 + 1 + 2 + 3


def heron(a):
    return whilst.while_loop(lambda x: jnp.abs(x * x - a) > 1e-5 * a,
                             lambda x: 0.5 * (x + a / x), [a])


def test_jvp_matches_finite_differences():
    def f(x):
        return whilst.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, jnp.sin(x) * x),
                                 [0, x])[1]

    check_grads(f, (0.7,), order=2, modes=["fwd"])
    _, tangent = jax.jvp(heron, (2.0,), (1.0,))
    assert np.isclose(tangent, 0.5 / np.sqrt(2.0), rtol=1e-3)


def test_jvp_of_closed_over_parameters():
    def f(w):
        return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * w), [0, 1.0])[1]

    _, t = jax.jvp(f, (2.0,), (1.0,))
    assert np.isclose(t, 3 * 2.0 ** 2)


def test_back_prop_false_stops_tangents():
    def f(x):
        return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * x), [0, x],
                                 back_prop=False)[1]

    _, t = jax.jvp(f, (2.0,), (1.0,))
    assert float(t) == 0.0


def test_name_reaches_the_ir():
    jaxpr = whilst.trace(lambda x: whilst.while_loop(lambda x: x < 3, lambda x: x + 1, [x],
                                                     name="counter"), 0)
    assert "functional_while" in str(jaxpr) and "name=counter" in str(jaxpr)


def test_parallel_iterations_and_swap_memory_are_accepted():
    out = whilst.while_loop(lambda i: i < 3, lambda i: i + 1, [0], parallel_iterations=1,
                            swap_memory=True)
    assert int(out) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_dtypes_round_trip(dtype):
    x = np.ones(3, dtype)
    i, y = whilst.while_loop(lambda i, x: i < 2, lambda i, x: (i + 1, x), [0, x])
    assert y.dtype == dtype


def lax_version(cond, body, loop_vars):
    """The same program with jax.lax.while_loop (one carry: the tuple of loop_vars)."""
    return list(jax.lax.while_loop(lambda vs: cond(*vs), lambda vs: tuple(body(*vs)),
                                   tuple(loop_vars)))


WEAK_CASES = {
    # a Python scalar takes the dtype body gives it
    "int8": (lambda v: v < 2, lambda v: (v + jnp.int8(1),), [0]),
    "float16": (lambda v: v < 2.0, lambda v: (v + jnp.float16(0.5),), [0.0]),
    "bfloat16": (lambda v: v < 2.0, lambda v: (v * jnp.bfloat16(1.5) + 0.5,), [1.0]),
    "int_to_float32": (lambda v: v < 2, lambda v: (v + jnp.float32(0.75),), [0]),
    "stays_weak": (lambda v: v < 5, lambda v: (v * 2 + 1,), [1]),
    # weak and strong leaves in one pytree
    "pytree": (lambda i, p: i < 3,
               lambda i, p: (i + 1, Pair(p.j * jnp.float16(1.5), {"a": p.k["a"] + 1.0,
                                                                 "b": p.k["b"] - 1})),
               [0, Pair(1.0, {"a": np.float32(2.0), "b": np.int8(7)})]),
}


def assert_same_leaves(got, want):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert jax.typeof(g) == jax.typeof(w), (jax.typeof(g), jax.typeof(w))  # weak types too
        np.testing.assert_array_equal(np.asarray(g, np.float64), np.asarray(w, np.float64))


@pytest.mark.parametrize("case", sorted(WEAK_CASES))
def test_python_scalars_are_weakly_typed_as_in_lax(case):
    cond, body, loop_vars = WEAK_CASES[case]
    want = lax_version(cond, body, loop_vars)
    got = whilst.while_loop(cond, body, loop_vars, return_same_structure=True)
    assert_same_leaves(got, want)
    got_jit = jax.jit(lambda: whilst.while_loop(cond, body, loop_vars,
                                                return_same_structure=True))()
    assert_same_leaves(got_jit, want)


def test_int8_example():
    out = whilst.while_loop(lambda v: v < 2, lambda v: v + jnp.int8(1), [0])
    assert out.dtype == jnp.int8 and int(out) == 2


def test_weakly_typed_carry_under_grad():
    def run(while_loop, x):
        def body(i, v, s):
            return i + 1, v * x.astype(jnp.float16), s + jnp.float32(0.5) * x
        _, v, s = while_loop(lambda i, v, s: i < 3, body, [0, 1.0, 0])
        return v.astype(jnp.float32) + s

    def unrolled(x):
        v, s = jnp.float16(1.0), jnp.float32(0)
        for _ in range(3):
            v, s = v * x.astype(jnp.float16), s + jnp.float32(0.5) * x
        return v.astype(jnp.float32) + s

    bounded = lambda c, b, vs: whilst.while_loop(c, b, vs, maximum_iterations=3)
    x = jnp.float32(1.5)
    assert_same_leaves(run(bounded, x), run(lax_version, x))
    for grad in (jax.grad, lambda f: jax.jit(jax.grad(f))):
        np.testing.assert_allclose(grad(lambda x: run(bounded, x))(x), jax.grad(unrolled)(x),
                                   rtol=1e-3)


def test_strongly_typed_loop_var_keeps_its_dtype_or_fails():
    # a Python scalar returned for a strongly typed variable takes its dtype
    out = whilst.while_loop(lambda v: v < 2, lambda v: 5, [jnp.int8(0)])
    assert out.dtype == jnp.int8 and int(out) == 5
    with pytest.raises(TypeError, match=r"loop_vars\[0\] has dtype int8, but the loop "
                                        r"variable has dtype int32.*astype\(int32\)"):
        whilst.while_loop(lambda v: v < 2, lambda v: (v + 1).astype(jnp.int8),
                          [np.int32(0)])



def _while_operand_types(stablehlo_text):
    """The operand types of each `stablehlo.while` in a module's text."""
    from whilst.lowering._iree_ir import ir
    from whilst.lowering._ir_walk import ops_where

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stablehlo_text)  # alive while its ops are read
        return [[str(v.type) for v in op.operands]
                for op in ops_where(module, lambda op: op.name == "stablehlo.while")]


def test_a_cond_reading_the_carry_is_tested_in_the_cond_region_under_jit():
    """Under jax.jit the loop carries the counter and `y` only (XLA's induction
    variable search would otherwise follow a carried boolean through the body);
    exported, the test is carried as a boolean (for IREE 3.13: _while_lowering.py)
    beside the count of steps its unrolled iterations took."""
    def f(y):
        return whilst.while_loop(lambda y: jnp.sum(y) < 50.0, lambda y: y * 1.5 + 0.1, [y])

    y = jnp.ones(3, jnp.float32)
    lowered = jax.jit(f).lower(y)
    assert _while_operand_types(lowered.as_text()) == [["tensor<i32>", "tensor<3xf32>"]]
    (types,) = _while_operand_types(whilst.export(f, y).text)
    assert "tensor<i1>" in types
    want = np.ones(3, np.float32)
    while want.sum() < 50.0:
        want = want * np.float32(1.5) + np.float32(0.1)
    np.testing.assert_allclose(lowered.compile()(y), want, rtol=1e-6)
