"""Scatters at one index into a buffer they cannot update in place, not flagged as
having unique indices.

IREE 3.13 fails llvm-cpu codegen of a scatter flagged `unique_indices = true` whose
operand it cannot update in place ("'linalg.generic' op write affecting operations
on global resources are restricted to workgroup distributed contexts"):
  * under every fusion, a scatter into a row of a larger buffer
    (`iree_limits/unique_scatter_into_a_row.mlir`): `a[1].at[i].set(0.0)`, which
    JAX flags so, and the third derivative of a loop without a bound, whose
    gradient zeroes one element of a cotangent row it still reads;
  * under aggressive fusion, a scatter whose update is computed from a gather of its
    own operand (`buf[k] = where(save, x, buf[k])`, a checkpoint slot's write;
    `iree_limits/rereading_scatter.mlir`), which IREE fuses into one dispatch that
    reads the buffer it writes.
The same scatters unflagged compile, the latter in that one dispatch (fenced apart
instead, as before, each such write in a loop body cost a host wait per iteration).
A scatter at one index writes it once whatever the flag says, so
`one_index_scatters_not_unique` clears the flag on every scatter whose indices are
one element and whose operand is not updated in place (read by other ops too, or a
slice or reshape of another value)::

    scatter(x, [[i]], u, unique_indices=True)  ==  scatter(x, [[i]], u, unique_indices=False)

A scatter that updates its operand in place (a loop's push of a row into a carried
stack) keeps the flag: unflagged, the CG sample's forward While ran one more
dispatch per step.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import flagged_unique_indices, ops_where, scatter_at_one_index

# Ops whose result is a view of their operand's buffer for IREE: a scatter into one
# writes into a copy of that buffer's part.
_VIEWS = frozenset({"stablehlo.slice", "stablehlo.reshape"})


def one_index_scatters_not_unique(module) -> int:
    """Set `unique_indices = false`, in place, on each `stablehlo.scatter` of `module`
    (nested ones included) flagged true whose indices operand has one element and
    that does not update its operand in place (module docstring); returns how many."""
    from whilst.lowering._iree_ir import ir

    scatters = ops_where(module, lambda op: op.name == "stablehlo.scatter"
                         and flagged_unique_indices(op) and scatter_at_one_index(op)
                         and not _in_place(op))
    for op in scatters:
        op.attributes["unique_indices"] = ir.BoolAttr.get(False)
    return len(scatters)


def _in_place(scatter) -> bool:
    """Whether each operand of `scatter` is read by it alone and is not a view
    (`_VIEWS`) of another value."""
    operands = list(scatter.operands)[:len(scatter.operands) // 2]
    return all(
        all(use.owner == scatter for use in value.uses)
        and getattr(value.owner, "name", None) not in _VIEWS
        for value in operands)
