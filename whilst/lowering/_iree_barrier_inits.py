"""Loops that start from the same barrier's result each start from a barrier of their own.

IREE 3.13 tests each host-driven loop's first iteration in an `scf.if` before the
loop, and two loops whose first tests are the same share that test. Where both start
from a value whose size the stream phase does not know where it is made (the result
of an optimization barrier), iree-util-propagate-subranges materializes that size
inside the first loop's `scf.if` and uses it for the second loop too: "operand #N
does not dominate this use" (`iree_limits/barrier_shared_by_loops.mlir`). whilst's
barriers (`_iree_loop_results`, `_iree_branch_results`) meet this in the third
derivative of a loop without a bound on vulkan-spirv, whose loops stay on the host.
`barrier_inits_apart` gives each loop after the first that starts from a barrier's
result a barrier of that result of its own, made just before it::

    b = optimization_barrier(x)
    while_loop(..., b)           # the first loop keeps b
    b2 = optimization_barrier(b)
    while_loop(..., b2)          # each later one gets its own

The barrier copies nothing: both loops read the same buffer.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where


def barrier_inits_apart(module) -> None:
    """Each `stablehlo.while` of `module` that takes as an initial value an
    optimization barrier's result that a loop before it (in walk order) takes too
    takes it through a barrier of its own instead, in place (module docstring)."""
    from whilst.lowering._iree_ir import ir

    taken = []   # barrier results the loops before start from
    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        starts = []
        for number, value in enumerate(list(loop.operands)):
            owner = value.owner
            if isinstance(owner, ir.Block) or owner.name != "stablehlo.optimization_barrier":
                continue
            if not any(value == t for t in taken):
                starts.append(value)
                continue
            with ir.InsertionPoint(loop), loop.location:
                own = ir.Operation.create("stablehlo.optimization_barrier",
                                          results=[value.type], operands=[value])
            loop.operands[number] = own.results[0]
        taken.extend(starts)
