"""Expressions of constants alone are folded before IREE compiles them, as JAX exports
them unfolded (diffrax's `nextafter`s of its times): whilst/lowering/_iree_folded_constants.py."""
import jax
import jax.numpy as jnp
import numpy as np
import iree.runtime as rt
import pytest
from jax import lax

import whilst
from helpers import op_names
from whilst.lowering import compile_flags, compile_to_stream, prepare

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


TIMES = np.linspace(0.0, 10.0, 21, dtype=np.float32)


def checked_times(y):
    """equinox's check of diffrax's save times under `EQX_ON_ERROR=nan`, on constants:
    the times (NaNs if one lay outside [0, 10]) scaling y."""
    ts = jnp.asarray(TIMES)
    bad = jnp.any((ts < 0.0) | (ts > 10.0))
    ts = lax.cond(bad, lambda: jnp.full_like(ts, jnp.nan), lambda: ts)
    return ts[:, None] * y


def test_a_check_of_constants_is_decided_before_iree_compiles():
    """The reduction and the branch it chooses fold away: nothing is read back."""
    y = np.array([1.0, -2.0], np.float32)
    exported = whilst.export(checked_times, y)
    assert {"stablehlo.case", "stablehlo.reduce"} <= set(op_names(exported.text))
    text = prepare([exported])
    assert not {"stablehlo.case", "stablehlo.reduce"} & set(op_names(text))
    assert "stream.resource.load" not in op_names(compile_to_stream(text))
    got = whilst.compile(checked_times, y, cache=False).load("local-sync").main(y)
    np.testing.assert_array_equal(got, TIMES[:, None] * y)


BRANCHES_ON_LITERALS = """
func.func @main(%x: tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
  %seven = stablehlo.constant dense<7> : tensor<i32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %no = stablehlo.constant dense<false> : tensor<i1>
  %0 = "stablehlo.case"(%seven) ({
    %a = stablehlo.add %x, %x : tensor<f32>
    stablehlo.return %a : tensor<f32>
  }, {
    %b = stablehlo.multiply %x, %x : tensor<f32>
    stablehlo.return %b : tensor<f32>
  }) : (tensor<i32>) -> tensor<f32>
  %1 = "stablehlo.case"(%zero) ({
    %c = stablehlo.subtract %x, %x : tensor<f32>
    %d = "stablehlo.case"(%seven) ({
      stablehlo.return %x : tensor<f32>
    }, {
      %e = stablehlo.exponential %c : tensor<f32>
      stablehlo.return %e : tensor<f32>
    }) : (tensor<i32>) -> tensor<f32>
    stablehlo.return %d : tensor<f32>
  }, {
    stablehlo.return %x : tensor<f32>
  }) : (tensor<i32>) -> tensor<f32>
  %2 = "stablehlo.if"(%no) ({
    stablehlo.return %x : tensor<f32>
  }, {
    %f = stablehlo.negate %x : tensor<f32>
    stablehlo.return %f : tensor<f32>
  }) : (tensor<i1>) -> tensor<f32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<f32>
}
"""


def test_branches_on_literals_take_the_branch_iree_runs():
    """A case's index out of range takes the last branch; a case nested in the taken
    branch is taken too. The folded module computes what IREE computes of the one
    written (x * x, exp(x - x), -x)."""
    from iree.compiler import tools
    from whilst.lowering._iree_folded_constants import constant_expressions_folded
    from whilst.lowering._iree_ir import ir

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(BRANCHES_ON_LITERALS)
        constant_expressions_folded(module)
        folded = module.operation.get_asm()
    names = op_names(folded)
    assert not {"stablehlo.case", "stablehlo.if", "stablehlo.add"} & set(names)
    assert {"stablehlo.multiply", "stablehlo.exponential", "stablehlo.negate"} <= set(names)
    x = np.float32(1.5)
    results = []
    for text in (BRANCHES_ON_LITERALS, folded):
        vmfb = tools.compile_str(text, extra_args=compile_flags(["llvm-cpu"]))
        results.append([np.asarray(r) for r in
                        rt.load_vm_flatbuffer(vmfb, driver="local-sync").main(x)])
    np.testing.assert_array_equal(results[0], [x * x, 1.0, -x])
    np.testing.assert_array_equal(results[1], results[0])


def test_reductions_fold_where_their_order_cannot_change_them():
    """A max of floats and a sum of integers fold; a sum of floats (whose value
    depends on the order of its additions) stays as written."""
    def program(x):
        floats = jnp.asarray(np.linspace(0.1, 0.9, 9, dtype=np.float32))
        integers = jnp.asarray(np.arange(9, dtype=np.int32))
        return x + jnp.max(floats), x + jnp.sum(integers), x + jnp.sum(floats)

    x = np.float32(1.0)
    prepared = op_names(prepare([whilst.export(program, x)]))
    assert prepared.count("stablehlo.reduce") == 1
    got = whilst.compile(program, x, cache=False).load("local-sync").main(x)
    for g, w in zip(got, jax.jit(program)(x)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
