"""The compile targets whilst knows and the runtime drivers that run them: one table
for `whilst.compile`, the `whilst` command and the runtime (plain Python, no JAX)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Target:
    """An IREE target: its `--iree-hal-target-device` name, the runtime drivers that
    run it (the first is the default), and its default architecture (GPUs)."""
    name: str
    device: str
    drivers: tuple[str, ...]
    default_arch: str | None = None


TARGETS = {
    "llvm-cpu": Target("llvm-cpu", "local", ("local-sync", "local-task")),
    "vulkan-spirv": Target("vulkan-spirv", "vulkan", ("vulkan",)),
    "cuda": Target("cuda", "cuda", ("cuda",), "sm_80"),
    "rocm": Target("rocm", "hip", ("hip",), "gfx942"),
}
DRIVERS = tuple(dict.fromkeys(d for t in TARGETS.values() for d in t.drivers))


def validate_metadata(targets) -> list:
    """`targets` if it is a module's target record (`[{"name", "arch", "drivers"}]`,
    see `whilst.lowering.target_metadata`), else a ValueError."""
    ok = isinstance(targets, list) and targets and all(
        isinstance(t, dict) and isinstance(t.get("name"), str)
        and (t.get("arch") is None or isinstance(t.get("arch"), str))
        and isinstance(t.get("drivers"), list) and t["drivers"]
        and all(isinstance(d, str) for d in t["drivers"]) for t in targets)
    if not ok:
        raise ValueError(f"malformed target record: expected [{{name, arch, drivers}}, ...]; "
                         f"found {str(targets)[:80]}")
    return targets
