"""Scatters at one index, flagged unique in cuda code so that IREE spreads them over
threads.

IREE 3.13's cuda codegen runs a scatter that updates a buffer in place, its indices
not flagged unique, in one thread, element after element (its Distribute pipeline
in a workgroup of one thread): the updates might write one place twice, in an order
that must hold. A scatter at a single index cannot, whatever its flag says, and
whilst's modules hold many such unflagged (a loop's row written into the buffer it
carries; `_iree_one_index_scatters` clears the flag for llvm-cpu): a checkpoint copy
of the batched ODE fit's carry, 4096 lanes x 20 x 2 floats, took one thread 163840
stores per chunk (`iree_limits/gpu_serial_scatter.py`). So in each cuda executable
(iree-compile's executable-sources phase, where the scatters are
`iree_linalg_ext.scatter`) every scatter at one index whose operand it alone reads
gets the flag, which IREE tiles over threads (TileAndFuse)::

    scatter(x, [[i]], u, unique_indices=False)  ==  scatter(x, [[i]], u, unique_indices=True)

The llvm-cpu variants of the same module keep their scatters as they are.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where, target_variants

# The GPU targets whose executables' one-index scatters get the flag.
FLAGGED_TARGETS = ("cuda",)


def one_index_scatters_unique(module) -> int:
    """Flag every `iree_linalg_ext.scatter` at one index in a cuda executable variant
    of `module` (iree-compile's executable-sources phase) `unique_indices(true)`, in
    place; returns how many."""
    from whilst.lowering._iree_ir import ir

    scatters = [op for variant in target_variants(module, FLAGGED_TARGETS)
                for op in ops_where(variant, _unflagged_one_index_scatter)]
    for op in scatters:
        op.attributes["unique_indices"] = ir.BoolAttr.get(True)
    return len(scatters)


def _unflagged_one_index_scatter(op) -> bool:
    """Whether `op` is an `iree_linalg_ext.scatter` not flagged unique whose indices
    (its second input, one row per update) hold one row and whose operand only it
    reads: flagged, a scatter whose update reads its own operand
    (`buf[k] = where(save, x, buf[k])`, a checkpoint slot's write) fails cuda's
    bufferization ("failed to bufferize op"), as llvm-cpu's
    (`iree_limits/rereading_scatter.mlir`)."""
    from whilst.lowering._iree_ir import ir

    if (op.name != "iree_linalg_ext.scatter" or "unique_indices" not in op.attributes
            or ir.BoolAttr(op.attributes["unique_indices"]).value):
        return False
    indices = ir.RankedTensorType(op.operands[1].type)
    return (indices.has_static_shape and indices.shape[0] == 1
            and all(use.owner == op for use in op.operands[2].uses))
