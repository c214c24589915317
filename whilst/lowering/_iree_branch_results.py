"""Branch results computed from constants behind an optimization barrier, so that
IREE 3.13 runs on asynchronous devices a loop whose branch returns a constant.

A `stablehlo.case` (JAX's `lax.cond` and `lax.switch`) in a loop body, one of whose
branches returns a value computed from constants alone, with its result carried on
(`acc <- acc + (0.0 if i >= x else i * x)`), fails on every call where that branch
runs: on local-task "transient buffer has not been committed; ensure the alloca
signal semaphores are satisfied before accessing it", on vulkan "Vulkan transient
buffer has already been queued"; local-sync runs it by luck
(`iree_limits/constant_branch_result.mlir`). optimistix's Levenberg-Marquardt met it:
its step's `lax.cond` returns `False` for "not converged" where the step is
rejected.

IREE leaves a buffer that an op it cannot see through reads to its reference count
(as for loop results, `_iree_loop_results`), so `constant_branch_results_fenced`
passes each such result of a branch op through one `stablehlo.optimization_barrier`
placed right after it. The barrier copies nothing.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import BRANCH_OPS, ops_where
from whilst.lowering._iree_loops import reads_arguments

def constant_branch_results_fenced(module) -> None:
    """Every `stablehlo.case` and `stablehlo.if` of `module` (nested ones included)
    has its results of static shape that some branch computes from constants alone
    (`not reads_arguments`) replaced by those of one optimization barrier after it."""
    from whilst.lowering._iree_ir import ir

    for branch_op in ops_where(module, lambda op: op.name in BRANCH_OPS):
        returned = [list(region.blocks[0].operations)[-1].operands
                    for region in branch_op.regions]
        fenced = [result for index, result in enumerate(branch_op.results)
                  if ir.RankedTensorType(result.type).has_static_shape
                  and any(not reads_arguments(values[index]) for values in returned)]
        if not fenced:
            continue
        with ir.InsertionPoint.after(branch_op), branch_op.location:
            barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                          results=[r.type for r in fenced], operands=fenced)
        for old, new in zip(fenced, barrier.results):
            old.replace_all_uses_except(new, barrier)
