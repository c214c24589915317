"""Finding ops in an MLIR module (IREE's Python bindings), for preparation's rewrites."""
from __future__ import annotations


def ops_where(module, predicate) -> list:
    """`[op for op in module (nested ops included, in walk order) if predicate(op)]`,
    collected before the caller edits any of them."""
    from iree.compiler import ir

    found = []

    def visit(op):
        if predicate(op.operation):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found
