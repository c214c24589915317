"""Rows added into a buffer of zeros, then added to an accumulator, become one
scatter-add (whilst/lowering/_iree_row_accumulations.py): the reproducer's loop
(iree_limits/zeros_scatter_added.py) rewritten matches numpy, scatters the rule does
not cover are left alone, and the second derivative of a stored loop, whose gradient
accumulates so, runs on IREE with jax.grad's values of the loop unrolled in Python."""
import numpy as np
import pytest

import whilst
from helpers import gradient_of_squared_gradient, sin_steps_loss
from iree_limits.zeros_scatter_added import STEPS, module
from whilst._compile import prepare_stage
from whilst.lowering import compile_flags
from whilst.lowering._iree import _iree_compile
from whilst.lowering._iree_ir import ir
from whilst.lowering._iree_row_accumulations import row_accumulations_in_place

pytestmark = pytest.mark.iree


def rewritten(text: str) -> tuple[str, int]:
    """`text` after `row_accumulations_in_place`, and how many adds it rewrote."""
    with ir.Context(), ir.Location.unknown():
        parsed = ir.Module.parse(text)
        changed = row_accumulations_in_place(parsed)
        return parsed.operation.get_asm(enable_debug_info=False), changed


def test_the_reproducers_loop_rewritten_adds_its_rows_in_place_and_matches_numpy():
    import iree.runtime as rt

    text, changed = rewritten(module("zeros scatter + add", 300))
    assert changed == 1
    assert text.count('"stablehlo.scatter"(') == 1
    context = rt.SystemContext(config=rt.Config("local-sync"))
    vmfb = _iree_compile(text, compile_flags(("llvm-cpu",)))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    rows = np.random.default_rng(0).standard_normal((STEPS, 64)).astype(np.float32)
    want = np.zeros((300, 64), np.float32)
    want[:STEPS] = rows
    np.testing.assert_array_equal(np.asarray(context.modules.module.main(rows)), want)


@pytest.mark.parametrize("change", [
    lambda t: t.replace("dense<0.0> : tensor<f32>", "dense<1.0> : tensor<f32>"),
    lambda t: t.replace("stablehlo.return %upd", "stablehlo.return %old"),
    lambda t: t.replace("%new = stablehlo.add %acc, %written", (
        "%sum = stablehlo.add %acc, %written : tensor<300x64xf32>\n"
        "    %new = stablehlo.add %sum, %written")),
], ids=["into ones", "keeping the old value", "read twice"])
def test_other_scatters_are_left_alone(change):
    text = change(module("zeros scatter + add", 300))
    assert rewritten(text)[1] == 0


def test_the_second_derivative_of_a_stored_loop_adds_rows_in_place_on_iree():
    y0 = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    second = gradient_of_squared_gradient(sin_steps_loss(True))
    exported = whilst.export(second, y0)
    assert rewritten(exported.text)[1] >= 1
    assert rewritten(prepare_stage([exported], ("llvm-cpu",)))[1] == 0
    compiled = whilst.compile(second, y0).load("local-sync")
    want = gradient_of_squared_gradient(sin_steps_loss(False))(y0)
    np.testing.assert_allclose(np.asarray(compiled.main(y0)), want, rtol=2e-5)
