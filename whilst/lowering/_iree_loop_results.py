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
count, so `loop_results_fenced` passes the results of each `stablehlo.while`
through one `stablehlo.optimization_barrier` right after the loop. The barrier
copies nothing; the buffers are released when their last reference goes. Results
of dynamic shape are left out: IREE 3.13 cannot resolve the dimensions of a
barrier's results ("'tensor.dim' op unexpected during shape cleanup").
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where


def loop_results_fenced(module) -> None:
    """Every `stablehlo.while` of `module` (nested ones included) has its results of
    static shape replaced by those of one optimization barrier placed after it
    (unused ones too: IREE frees those as well)."""
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        results = [r for r in loop.results if ir.RankedTensorType(r.type).has_static_shape]
        if not results:
            continue
        with ir.InsertionPoint.after(loop), loop.location:
            barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                          results=[r.type for r in results], operands=results)
        for old, new in zip(results, barrier.results):
            old.replace_all_uses_except(new, barrier)
