"""Rows added into a buffer as scatter-adds, not as a whole buffer of zeros with the
rows written, added.

A gradient While accumulates the cotangent of a stack its loop reads a row of per
step (the second derivative of a stored loop: the first gradient's popped rows) as
`acc + zeros.at[i].set(ct_row)`, JAX's transpose of a row read. XLA folds that into
an update of row i; IREE 3.13 adds the whole buffer every step, so the loop's time
grows with the square of its steps (`bench/higher_order.py --lengths 100 1000 3000
--iree`: 5.1x, 28x, 51x lax.scan under jit). `row_accumulations_in_place` rewrites
each such sum into one scatter that adds the rows in place::

    add(acc, scatter(zeros, idx, rows))  ==  scatter(acc, idx, rows, combine=add)

for a scatter that overwrites, into a constant of zeros, at one index or at indices
flagged unique (each row written once, so adding them all is adding what the
overwrite kept), and whose result only the add reads. Not for Vulkan: there the
corpus's `checkpoint_jvp_and_grad_of_grad` so rewritten gave a wrong value on
lavapipe (2108.8 for -73.5), and the sum stays as it is. Its sums are three
checkpoint slots' cotangents; rewritten one at a time, the one whose accumulator is
the loop's carry gave the right value, and each of the two whose accumulator is
another scatter's result a wrong one (cause not found; bench/NOTES.md).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import flagged_unique_indices, ops_where, scatter_at_one_index


def row_accumulations_in_place(module) -> int:
    """Rewrite, in place, each `stablehlo.add` of `module` (nested ones included) of
    a buffer and a scatter of rows into zeros as one scatter-add (module docstring);
    returns how many."""
    from whilst.lowering._iree_ir import ir

    adds = ops_where(module, lambda op: op.name == "stablehlo.add"
                     and _zeros_scatter_operand(op) is not None)
    for add in adds:
        k = _zeros_scatter_operand(add)
        scatter, acc = add.operands[k].owner, add.operands[1 - k]
        with ir.InsertionPoint(add), add.location:
            summed = scatter.clone()
            summed.operands[0] = acc
            (combine,) = summed.regions[0].blocks
            (returned,) = combine.operations
            old, new = combine.arguments
            with ir.InsertionPoint(returned):
                total = ir.Operation.create("stablehlo.add", results=[old.type],
                                            operands=[old, new])
            returned.operands[0] = total.result
        add.result.replace_all_uses_with(summed.result)
        add.erase()
        scatter.erase()
    return len(adds)


def _zeros_scatter_operand(add) -> int | None:
    """The operand of `add` that is a rewritable scatter (module docstring), or None."""
    for k, value in enumerate(add.operands):
        op = value.owner
        if (getattr(op, "name", None) == "stablehlo.scatter" and len(op.operands) == 3
                and len(list(value.uses)) == 1 and _overwrites(op)
                and (flagged_unique_indices(op) or scatter_at_one_index(op))
                and _zeros(op.operands[0]) and op.result.type == add.result.type):
            return k
    return None


def _overwrites(scatter) -> bool:
    """Whether the combiner of `scatter` returns the update (its second argument)."""
    (block,) = scatter.regions[0].blocks
    ops = list(block.operations)
    return (len(ops) == 1 and ops[0].name == "stablehlo.return"
            and ops[0].operands[0] == block.arguments[1])


def _zeros(value) -> bool:
    """Whether `value` is a constant of zeros, or a broadcast of one."""
    from whilst.lowering._iree_ir import ir

    op = value.owner
    if getattr(op, "name", None) == "stablehlo.broadcast_in_dim":
        return _zeros(op.operands[0])
    if getattr(op, "name", None) != "stablehlo.constant":
        return False
    attr = ir.DenseElementsAttr(op.attributes["value"])
    if not attr.is_splat:
        return False
    splat = attr.get_splat_value()
    return (ir.FloatAttr(splat).value == 0.0 if isinstance(splat.type, ir.FloatType)
            else ir.IntegerAttr(splat).value == 0)
