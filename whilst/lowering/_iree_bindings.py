"""The buffer bindings of each dispatch iree-compile makes, against the number the
IREE runtime accepts: a dispatch over it compiles, but its module cannot run
(iree_limits/wide_scalar_dispatch.mlir). The counts are read with IREE's
MLIR Python bindings from the module at iree-compile's `executable-sources`
phase, where every dispatch is a `hal.executable` with its bindings laid out.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where

# The most buffer bindings a dispatch may take, per target, in the IREE 3.13 runtime
# (read from IREE's sources, and checked in the machine code of iree-base-runtime
# 3.13.0rc20261016, IREE 89ece87b):
#  * every target: the HAL module's `hal.command_buffer.dispatch` refuses more than
#    IREE_HAL_MODULE_MAX_DESCRIPTOR_BINDING_COUNT = 32 on each call
#    (runtime/src/iree/modules/hal/module.c: "OUT_OF_RANGE; binding count 33 > 32");
#  * cuda and rocm: the driver also refuses to load an executable with an export of
#    more than IREE_HAL_CUDA_MAX_DISPATCH_BINDING_COUNT = 16
#    (runtime/src/iree/hal/drivers/cuda/native_executable.h) or
#    IREE_HAL_HIP_MAX_DISPATCH_BINDING_COUNT = 16 (.../drivers/hip/native_executable.h).
# A Vulkan device may accept fewer storage buffers per shader stage than 32
# (maxPerStageDescriptorStorageBuffers); that limit is the device's, not checked here.
BINDING_LIMITS = {"llvm-cpu": 32, "vulkan-spirv": 32, "cuda": 16, "rocm": 16}


def binding_limit(targets) -> int:
    """The most bindings a dispatch of a module that runs on each of `targets` may take."""
    return min(BINDING_LIMITS[t] for t in targets)


def binding_counts(sources: str | bytes) -> dict[str, int]:
    """`{dispatch name: bindings}` for a module at iree-compile's executable-sources
    phase (`--compile-to=executable-sources`). A dispatch is an export of a
    `hal.executable` and the function of the same name; its bindings are numbered
    from 0 in its pipeline layout, and its count is one more than the highest
    `binding` of the function's `hal.interface.binding.subspan` ops (the layout's
    own count on every dispatch of the test suite's modules)."""
    from whilst.lowering._iree_ir import ir

    counts: dict[str, int] = {}
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(sources)
        for executable in ops_where(module, lambda op: op.name == "hal.executable"):
            for func in ops_where(executable, lambda op: op.name == "func.func"):
                name = ir.StringAttr(func.attributes["sym_name"]).value
                subspans = ops_where(func, lambda op: op.name == "hal.interface.binding.subspan")
                bindings = 1 + max((ir.IntegerAttr(op.attributes["binding"]).value
                                    for op in subspans), default=-1)
                counts[name] = max(counts.get(name, 0), bindings)
    return counts


def too_many_bindings(counts: dict[str, int], targets) -> str | None:
    """Why a module whose dispatches take `counts` bindings cannot run on each of
    `targets`, or None if it can."""
    limit = binding_limit(targets)
    over = sorted(((n, name) for name, n in counts.items() if n > limit), reverse=True)
    if not over:
        return None
    named = "; ".join(f"{name}: {n} bindings" for n, name in over)
    strict = sorted(t for t in targets if BINDING_LIMITS[t] == limit)
    return (f"iree-compile would make a module for targets {list(targets)} that cannot run: "
            f"{len(over)} dispatch{'es' * (len(over) > 1)} over the IREE runtime's limit of "
            f"{limit} buffer bindings per dispatch on {', '.join(strict)} ({named}). "
            f"IREE names each dispatch after the function it comes from; it fused too many "
            f"values into one. Give the loops of that function a smaller `unroll=` (each "
            f"unrolled step adds values to fuse), or report it to whilst with the program.")
