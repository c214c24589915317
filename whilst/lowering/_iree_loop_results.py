"""Loop results behind an optimization barrier, so that IREE 3.13 never frees a
buffer that a loop which ran no iteration returned.

IREE 3.13 deallocates each buffer a loop returns after its last use, as if the
loop had made it. A loop that runs no iteration returns its initial values, and
IREE packs those into one allocation with other values made at the same time (a
residual stack, say) that stay in use after the loop: that allocation is freed
under them. `local-task` then fails ("transient buffer has not been committed"),
as does `vulkan` ("transient buffer has no staged Vulkan backing"); `local-sync`
passes by luck. Gradients of counted loops that end before a full unrolled
iteration meet it (`iree_limits/zero_trip_loop_result.mlir`).

IREE leaves a buffer that an op it cannot see through reads to its reference
count, so `loop_results_fenced` passes each result of each `stablehlo.while`
through a `stablehlo.optimization_barrier` of its own right after the loop. The
barriers copy nothing; the buffers are released when their last reference goes.
Results of dynamic shape are left out: IREE 3.13 cannot resolve the dimensions of
a barrier's results ("'tensor.dim' op unexpected during shape cleanup").

One barrier holding all of a loop's results fails to compile when the loop carries
its previous state ("failed to legalize unresolved source materialization",
`iree_limits/loop_results_in_one_barrier.mlir`), and made, with aggressive fusion,
modules that fail on every call ("ref is null ... hal.buffer.subspan": diffrax's
event-stopped Tsit5 solve through its own loops, `loop_results_in_one_barrier.py`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where


def loop_results_fenced(module) -> None:
    """Every `stablehlo.while` of `module` (nested ones included) has each of its
    results of static shape replaced by that of an optimization barrier of its own,
    placed after it (unused ones too: IREE frees those as well)."""
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        results = [r for r in loop.results if ir.RankedTensorType(r.type).has_static_shape]
        with ir.InsertionPoint.after(loop), loop.location:
            for result in results:
                barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                              results=[result.type], operands=[result])
                result.replace_all_uses_except(barrier.result, barrier)
