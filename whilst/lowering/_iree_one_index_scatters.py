"""Scatters at one index, not flagged as having unique indices.

IREE 3.13 fails llvm-cpu codegen of a scatter flagged `unique_indices = true` whose
operand it cannot update in place, a row of a larger buffer that is read again
("'linalg.generic' op write affecting operations on global resources are restricted
to workgroup distributed contexts", under every fusion; `iree_limits/
unique_scatter_into_a_row.mlir`): the third derivative of a loop without a bound,
whose gradient zeroes one element of a cotangent row it still reads. The same
scatter unflagged compiles. A scatter at one index writes it once whatever the flag
says, so `one_index_scatters_not_unique` clears the flag on every scatter whose
indices are one element (a single position along one dimension, as whilst's
device-indexed row reads and writes are)::

    scatter(x, [[i]], u, unique_indices=True)  ==  scatter(x, [[i]], u, unique_indices=False)
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where


def one_index_scatters_not_unique(module) -> int:
    """Set `unique_indices = false`, in place, on each `stablehlo.scatter` of `module`
    (nested ones included) flagged true whose indices operand has one element;
    returns how many."""
    from whilst.lowering._iree_ir import ir

    scatters = ops_where(module, lambda op: op.name == "stablehlo.scatter"
                         and "unique_indices" in op.attributes
                         and ir.BoolAttr(op.attributes["unique_indices"]).value
                         and _one_element(op.operands[len(op.operands) // 2].type))
    for op in scatters:
        op.attributes["unique_indices"] = ir.BoolAttr.get(False)
    return len(scatters)


def _one_element(type_) -> bool:
    """Whether `type_` is a tensor of static shape with one element."""
    from whilst.lowering._iree_ir import ir

    shaped = ir.RankedTensorType(type_)
    return shaped.has_static_shape and all(d == 1 for d in shaped.shape)
