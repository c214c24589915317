"""Expressions of constants alone are folded before IREE compiles them, as JAX exports
them unfolded (diffrax's `nextafter`s of its times): whilst/lowering/_iree_folded_constants.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from helpers import op_names
from whilst.lowering import compile_flags, prepare

pytestmark = pytest.mark.iree


def stepper(y):
    """Steps of 0.3 from 0 up to the float before 1, doubling y: the end and the
    step's sign are expressions of constants, as a solver's times are."""
    end = jnp.nextafter(jnp.float32(1.0), jnp.float32(0.0))
    sign = jnp.sign(jnp.float32(1.0) - jnp.float32(0.0))

    def body(carry):
        t, y = carry
        return jnp.minimum(t + 0.3 * sign, end), y * 2.0 + t
    return whilst.lax.while_loop(lambda c: c[0] < end, body, (jnp.float32(0.0), y))


def python_stepper(y):
    end, t = np.nextafter(np.float32(1.0), np.float32(0.0)), np.float32(0.0)
    while t < end:
        t, y = min(t + np.float32(0.3), end), y * np.float32(2.0) + t
    return t, y


def test_a_nextafter_of_constants_becomes_one_constant_and_runs_as_numpy_computes_it():
    y = np.array([0.5, -1.0], np.float32)
    names = op_names(prepare([whilst.export(stepper, y)]))
    assert "stablehlo.bitcast_convert" not in names  # nextafter's twenty ops
    got = whilst.compile(stepper, y, cache=False).load("local-sync").main(y)
    want = python_stepper(y)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])


def test_constant_expressions_leave_no_initializer_to_compile():
    """IREE hoists each expression of constants into a global with an initializer
    compiled as a dispatch of its own (a diffrax batch had 710); folded, none is left."""
    from iree.compiler import tools

    y = np.array([0.5, -1.0], np.float32)
    flags = compile_flags(["llvm-cpu"], aggressive_fusion=True)  # hoisting on
    flow = tools.compile_str(prepare([whilst.export(stepper, y)]),
                             extra_args=[*flags, "--compile-to=flow"]).decode()
    assert "util.initializer" not in op_names(flow)


def test_what_is_not_exact_or_small_or_hidden_stays_as_written():
    """Transcendentals (their approximations differ between libraries), float to
    integer conversions, values behind an optimization barrier and results of more
    than FOLDED_ELEMENTS elements are left to IREE; they still compute JAX's values."""
    def program(x):
        s = jnp.sin(jnp.float32(0.5))
        n = (jnp.float32(2.7) * 1.5).astype(jnp.int32)
        hidden = lax.optimization_barrier(jnp.float32(3.0)) + 1.0
        wide = jnp.arange(100, dtype=jnp.float32) * 2.0
        return x * s + n, hidden, wide[:3] + x[0]

    x = np.array([1.0, 2.0], np.float32)
    exported = whilst.export(program, x)
    written, prepared = op_names(exported.text), op_names(prepare([exported]))
    for kept in ("stablehlo.sine", "stablehlo.convert", "stablehlo.optimization_barrier",
                 "stablehlo.iota"):
        assert prepared.count(kept) >= written.count(kept) >= 1, kept
    assert "stablehlo.multiply" in prepared  # the wide product, and 2.7 * 1.5 before the convert
    got = whilst.compile(program, x, cache=False).load("local-sync").main(x)
    for g, w in zip(got, jax.jit(program)(x)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
