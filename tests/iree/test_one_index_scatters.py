"""Scatters at one index that do not update their operand in place lose their
`unique_indices` flag (whilst/lowering/_iree_one_index_scatters.py):
iree_limits/unique_scatter_into_a_row.mlir and rereading_scatter.mlir fail iree-compile
as written, and compile and match numpy unflagged, as does JAX's own `a[1].at[i].set`
through whilst.compile; scatters in place and at several indices keep the flag."""
import numpy as np
import pytest
from iree.compiler.tools import CompilerToolError

import whilst
from helpers import REPO
from whilst.lowering import compile_flags
from whilst.lowering._iree import _iree_compile
from whilst.lowering._iree_ir import ir
from whilst.lowering._iree_one_index_scatters import one_index_scatters_not_unique

pytestmark = pytest.mark.iree

INTO_A_ROW = (REPO / "iree_limits" / "unique_scatter_into_a_row.mlir").read_text()
REREADING = (REPO / "iree_limits" / "rereading_scatter.mlir").read_text()
DEFAULT_FUSION = compile_flags(("llvm-cpu",))
AGGRESSIVE_FUSION = compile_flags(("llvm-cpu",), aggressive_fusion=True)

TWO_INDICES = """
func.func @main(%x: tensor<8xf32>, %i: tensor<2x1xi32>, %u: tensor<2xf32>) -> tensor<8xf32> {
  %out = "stablehlo.scatter"(%x, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}> ({
  ^bb0(%old: tensor<f32>, %new: tensor<f32>):
    stablehlo.return %new : tensor<f32>
  }) : (tensor<8xf32>, tensor<2x1xi32>, tensor<2xf32>) -> tensor<8xf32>
  return %out : tensor<8xf32>
}
"""


def unflagged(text: str) -> tuple[str, int]:
    """`text` after `one_index_scatters_not_unique`, and how many scatters it changed."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        changed = one_index_scatters_not_unique(module)
        return module.operation.get_asm(enable_debug_info=False), changed


def local_sync(vmfb: bytes):
    import iree.runtime as rt

    context = rt.SystemContext(config=rt.Config("local-sync"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    return lambda *args: np.asarray(context.modules.module.main(*args))


@pytest.mark.parametrize("flags", [DEFAULT_FUSION, AGGRESSIVE_FUSION],
                         ids=["default fusion", "aggressive fusion"])
def test_a_unique_scatter_into_a_row_fails_and_unflagged_matches_numpy(flags):
    with pytest.raises(CompilerToolError, match="workgroup distributed contexts"):
        _iree_compile(INTO_A_ROW, flags)
    text, changed = unflagged(INTO_A_ROW)
    assert changed == 1
    run = local_sync(_iree_compile(text, flags))
    a = np.arange(64, dtype=np.float32).reshape(2, 32)
    for i in (0, 7, 31):
        want = a[1].copy()
        want[i] = 0.0
        np.testing.assert_array_equal(run(a, np.array([[i]], np.int32)), want)


def test_a_rereading_scatter_fails_with_aggressive_fusion_and_unflagged_matches_numpy():
    with pytest.raises(CompilerToolError, match="workgroup distributed contexts"):
        _iree_compile(REREADING, AGGRESSIVE_FUSION)
    text, changed = unflagged(REREADING)
    assert changed == 1
    run = local_sync(_iree_compile(text, AGGRESSIVE_FUSION))
    rng = np.random.default_rng(0)
    slots = rng.standard_normal((64, 64)).astype(np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    for k, save in [(0, True), (5, False), (63, True)]:
        want = slots.copy()
        if save:
            want[k] = x
        np.testing.assert_array_equal(run(slots, x, np.int32(k), np.bool_(save)), want)


IN_PLACE = TWO_INDICES.replace("2x1xi32", "1x1xi32").replace("tensor<2xf32>", "tensor<1xf32>")


@pytest.mark.parametrize("text", [TWO_INDICES, IN_PLACE], ids=["two indices", "in place"])
def test_scatters_at_two_indices_or_in_place_keep_their_flag(text):
    text, changed = unflagged(text)
    assert changed == 0 and "unique_indices = true" in text


def test_jax_scatter_into_a_row_of_an_argument_compiles_and_matches_numpy():
    """JAX flags the scatter of `.at[i].set` at one traced index unique."""
    def zero_one(a, i):
        return a[1].at[i].set(0.0)

    a = np.arange(64, dtype=np.float32).reshape(2, 32)
    module = whilst.compile(zero_one, a, np.int32(0)).load("local-sync")
    for i in (0, 13, 31):
        want = a[1].copy()
        want[i] = 0.0
        np.testing.assert_array_equal(module(a, np.int32(i)), want)
