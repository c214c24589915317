"""The barrier that keeps whilst's loop bodies reading the carries they overwrite,
moved out of the loops.

A whilst loop body reads each carry that it overwrites without reading by
`select(barrier(i) >= 0, new, old)`, `i` the loop counter
(`whilst.ir.iree_forms._unread_carries.read_every_carry`): IREE 3.13 fails on a loop
that does not read a carry (`iree_limits/unread_loop_carry.mlir`), and folds a select
whose predicate it can evaluate. But in IREE 3.13's stream phase a barrier is host
code that awaits its operand, so a barrier in a loop body ends the command buffer
there: one more submission and a host wait per iteration
(`iree_limits/barrier_in_loop_body.mlir`). `carry_guards_hoisted` replaces those
barriers (tagged GUARD_ATTR) in each function by one opaque zero made before its
loops, which IREE cannot fold either, once the loops that run inside dispatches have
dropped theirs (`_iree_loops_in_dispatch`: there the barrier is gone, and a value made
outside the loop would be one more binding of the dispatch)::

    z, _ = optimization_barrier(0, -1)    # once, at the function's start
    select(z >= 0, new, old)              # in the loop bodies: the same values

(the barrier holds no constant a loop starts from by itself: IREE 3.13 binds one
buffer to such a constant's uses, `iree_limits/barrier_on_constant_init.mlir`; its
serial, GUARD_SERIAL, keeps it apart from `_iree_loops.opaque_copy`'s barriers.)
"""
from __future__ import annotations

from whilst.ir.iree_forms._unread_carries import GUARD_ATTR
from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import opaque_scalar

GUARD_SERIAL = -1   # the guard barrier's tag: apart from `opaque_copy`'s (0 and up)


def carry_guards_hoisted(module) -> bool:
    """Each optimization barrier tagged GUARD_ATTR (of an int32 counter) in a function
    of `module` replaced by one opaque zero (`opaque_scalar`) made at the function's
    start (module docstring); whether there was any."""
    from whilst.lowering._iree_ir import ir

    i32 = ir.IntegerType.get_signless(32)
    counter = ir.RankedTensorType.get([], i32)
    hoisted = False
    for func in ops_where(module, lambda op: op.name == "func.func" and op.regions[0].blocks):
        guards = ops_where(func, lambda op: op.name == "stablehlo.optimization_barrier"
                           and GUARD_ATTR in op.attributes and op.results[0].type == counter)
        if not guards:
            continue
        with ir.InsertionPoint.at_block_begin(func.regions[0].blocks[0]), func.location:
            opaque = opaque_scalar(i32, ir.IntegerAttr.get(i32, 0), GUARD_SERIAL)
        for guard in guards:
            guard.results[0].replace_all_uses_with(opaque)
            guard.erase()
        hoisted = True
    return hoisted
