"""The push constants of each dispatch iree-compile makes for Vulkan, against the
128 bytes every Vulkan device accepts.

IREE 3.13 passes a dispatch's scalar operands (offsets into allocations that pack
several values, sizes, values the host computed) as 32-bit push constants and
writes a module whose dispatches take any number of them; the Vulkan driver
refuses to load one whose constants pass the device's `maxPushConstantsSize`
("push_constant_ranges[0] end offset 160 exceeds device limit 128";
`iree_limits/many_push_constants.mlir`). Vulkan guarantees 128 bytes, the
limit of lavapipe and of many GPUs (IREE's Vulkan target names do not say a
device's own), and whilst checks that. IREE has no way to pass them otherwise:
its buffer-device-address ABI (`--iree-vulkan-dispatch-abi=bda`) pushes them too.
The counts are read, as `_iree_bindings` reads bindings, from the module at
iree-compile's `executable-sources` phase.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where

# Vulkan's guaranteed `maxPushConstantsSize`, in bytes; IREE's constants are 4 bytes.
VULKAN_PUSH_CONSTANT_BYTES = 128


def push_constant_counts(sources: str | bytes) -> dict[str, int]:
    """`{dispatch name: push constants}` of the Vulkan dispatches of a module at
    iree-compile's executable-sources phase: one more than the highest `ordinal`
    of each function's `hal.interface.constant.load` ops (its pipeline layout's
    `constants`)."""
    from whilst.lowering._iree_ir import ir

    counts: dict[str, int] = {}
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(sources)
        for variant in ops_where(module, lambda op: op.name == "hal.executable.variant"):
            if '"vulkan-spirv"' not in str(variant.attributes["target"]):
                continue
            for func in ops_where(variant, lambda op: op.name == "func.func"):
                name = ir.StringAttr(func.attributes["sym_name"]).value
                loads = ops_where(func, lambda op: op.name == "hal.interface.constant.load")
                counts[name] = 1 + max((ir.IntegerAttr(op.attributes["ordinal"]).value
                                        for op in loads), default=-1)
    return counts


def too_many_push_constants(counts: dict[str, int]) -> str | None:
    """Why a module whose Vulkan dispatches take `counts` push constants cannot load
    on every Vulkan device, or None if it can."""
    limit = VULKAN_PUSH_CONSTANT_BYTES // 4
    over = sorted(((n, name) for name, n in counts.items() if n > limit), reverse=True)
    if not over:
        return None
    named = "; ".join(f"{name}: {4 * n} bytes" for n, name in over)
    return (f"iree-compile would make a Vulkan module that not every device can load: "
            f"{len(over)} dispatch{'es' * (len(over) > 1)} over the {VULKAN_PUSH_CONSTANT_BYTES} "
            f"bytes of push constants Vulkan guarantees ({named}). IREE passes a dispatch's "
            f"scalar operands (offsets and sizes of the buffers it reads, host-computed "
            f"values) as push constants. Give the loops of that function a smaller "
            f"`unroll=` (each unrolled step adds operands), or split the work over "
            f"several functions.")
