"""Sort operands that other ops also read, sorted from a copy of their own.

IREE 3.13 sorts in place: a `stablehlo.sort` dispatch writes its results into its
operands' buffers. Where such an operand is also read elsewhere, IREE should copy
it first, and did not in a module with a loop in a dispatch: the second derivative
of a loop under `checkpoints=2`, whose checkpoint schedule sorts the step numbers
of the slots its forward While returns, read the sorted numbers where it meant the
unsorted ones, and computed a wrong gradient on every CPU driver
(`iree_limits/sort_of_shared_operand.py`). So every such operand is sorted from its
own copy (`opaque_copy`, one elementwise dispatch), and so is an argument of the
function the sort is in (jnp.sort's private function, which IREE inlines where a
caller reads the value it passes too)::

    s, p = sort(x, perm); y = f(x)   ->   s, p = sort(x + barrier(0), perm); y = f(x)
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import opaque_copy


def sort_operands_copied(module) -> None:
    """Each operand of a `stablehlo.sort` of `module` (nested ones included) that
    is read besides as that operand of the sort, or is an argument of a function,
    is replaced by its own copy."""
    serial = 0
    for sort in ops_where(module, lambda op: op.name == "stablehlo.sort"):
        for index, value in enumerate(sort.operands):
            if _function_argument(value) or any(
                    use.owner != sort or use.operand_number != index for use in value.uses):
                sort.operands[index] = opaque_copy(value, sort, serial)
                serial += 1


def _function_argument(value) -> bool:
    """Whether `value` is an argument of a `func.func`."""
    from whilst.lowering._iree_ir import ir

    return (isinstance(value, ir.BlockArgument)
            and value.owner.owner.operation.name == "func.func")
