"""Loops moved into dispatches run in one GPU thread (cuda).

`_iree_loops_in_dispatch` moves a loop over a few numbers into a dispatch of its
own, where it runs as scalar code: for llvm-cpu, codegen in one workgroup
(`DISABLE_DISTRIBUTION`). IREE 3.13's cuda codegen picks a pipeline per dispatch
from the ops it finds there. For a dispatch whose loop stands beside elementwise
ops (the test before its first iteration, a stack's booleans widened) it picks
TileAndFuse over 32 threads, then refuses the loop's writes, which no thread
distribution covers: "'vector.transfer_write' op write affecting operations on
shared resources are restricted to lane or thread distributed contexts" (the
quickstart's gradient). For the ODE sample's it picks Distribute in one thread,
which computes the gradient wrong by 1.7e-2 on an H200
(`iree_limits/gpu_loop_dispatch.py`). So each function of a cuda executable that
holds a loop (`scf.while`; IREE's own dispatches hold none at this phase) gets the
pipeline that lowers a dispatch as it stands, one workgroup of one thread::

    func.attributes["translation_info"] = SINGLE_THREAD

which IREE's configuration keeps (a function's own `translation_info` comes first).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where, target_variants

SINGLE_THREAD = ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<BaseLowering> "
                 "workgroup_size = [1, 1, 1]>")

# The GPU targets whose small loops move into dispatches, as llvm-cpu's do.
GPU_LOOP_TARGETS = ("cuda",)


def loop_kernels_single_threaded(module) -> int:
    """Run each function of a cuda executable variant of `module` (iree-compile's
    executable-sources phase) that holds an `scf.while` in one thread
    (SINGLE_THREAD), in place; returns how many."""
    from whilst.lowering._iree_ir import ir

    kernels = [f for variant in target_variants(module, GPU_LOOP_TARGETS)
               for f in ops_where(variant, lambda op: op.name == "func.func")
               if ops_where(f, lambda op: op.name == "scf.while")]
    for kernel in kernels:
        kernel.attributes["translation_info"] = ir.Attribute.parse(SINGLE_THREAD)
    return len(kernels)
