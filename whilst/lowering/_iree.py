"""Preparing exported StableHLO for IREE and compiling it to a `.vmfb`.

Preparation edits the module with IREE's MLIR Python bindings (never text):
  * each exported function is renamed to its signature name and its private
    helpers are prefixed, so several exports merge into one module;
  * each public function gets `stream.affinity = #hal.device.affinity<@__device_0>`:
    without it IREE cannot tell where loop-carried values live and copies every
    loop-carried buffer on every iteration (research/iree-inplace, fact 1);
  * each public function gets `iree.reflection = {whilst = "<signature json>"}`,
    which the runtime reads back to rebuild pytrees.
"""
from __future__ import annotations

import dataclasses
import warnings

from whilst.runtime._signature import REFLECTION_KEY, dumps

AFFINITY = "#hal.device.affinity<@__device_0>"
_SHARED_INIT_WARNING = (
    "whilst: in {!r}, a while loop starts two loop variables from the same value (for "
    "example two jnp.zeros of one shape). IREE 3.13 would give them one shared buffer when "
    "updating loop variables in place, so this function is compiled with per-iteration "
    "copies of its loop-carried buffers instead (slower for large buffers). Start the loop "
    "variables from different values to get in-place updates.")


@dataclasses.dataclass(frozen=True)
class Target:
    """An IREE target: the flags that select it and the runtime driver that runs it."""
    name: str
    device: str
    driver: str


TARGETS = {
    "llvm-cpu": Target("llvm-cpu", "local", "local-sync"),
    "vulkan-spirv": Target("vulkan-spirv", "vulkan", "vulkan"),
    "cuda": Target("cuda", "cuda", "cuda"),
    "rocm": Target("rocm", "hip", "hip"),
}
DEFAULT_GPU_ARCH = {"cuda": "sm_80", "rocm": "gfx942", "vulkan-spirv": None}


class CompileError(RuntimeError):
    """iree-compile rejected a module; the message keeps IREE's diagnostics."""


def prepare(exports) -> str:
    """Merge `Exported` functions into one module text ready for iree-compile."""
    from iree.compiler import ir

    with ir.Context(), ir.Location.unknown():
        merged = ir.Module.create()
        for exp in exports:
            module = ir.Module.parse(exp.text)
            _rename_symbols(module, exp.name)
            shared = _loops_with_shared_inits(module)
            for op in list(module.body.operations):
                if op.operation.name == "func.func" and _is_public(op):
                    if exp.name in shared:
                        warnings.warn(_SHARED_INIT_WARNING.format(exp.name), stacklevel=3)
                    else:
                        op.attributes["stream.affinity"] = ir.Attribute.parse(AFFINITY)
                    op.attributes["iree.reflection"] = ir.DictAttr.get(
                        {REFLECTION_KEY: ir.StringAttr.get(dumps(exp.signature))})
                merged.body.append(op.operation)
        return merged.operation.get_asm(enable_debug_info=False)


def _loops_with_shared_inits(module) -> set[str]:
    """Names of functions in which one `stablehlo.while` starts two carries from the
    same value once the module is canonicalized and CSE'd (as IREE will do)."""
    from iree.compiler import ir, passmanager

    probe = ir.Module.parse(module.operation.get_asm(enable_debug_info=False))
    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(probe.operation)
    shared = set()
    for func in probe.body.operations:
        def visit(op, func=func):
            if op.operation.name == "stablehlo.while":
                operands = [v for v in op.operation.operands
                            if ir.RankedTensorType(v.type).rank > 0]
                if len(set(map(_value_key, operands))) < len(operands):
                    shared.add(ir.StringAttr(func.attributes["sym_name"]).value)
            return ir.WalkResult.ADVANCE
        func.operation.walk(visit)
    return shared


def _value_key(value):
    return value.get_name()


def _is_public(op) -> bool:
    vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
    return vis is None or str(vis) == '"public"'


def _rename_symbols(module, name: str) -> None:
    """`@main` -> `@name`; private helpers `@f` -> `@name__f`."""
    from iree.compiler import ir

    table = ir.SymbolTable(module.operation)
    for op in list(module.body.operations):
        if "sym_name" not in op.attributes:
            continue
        old = ir.StringAttr(op.attributes["sym_name"]).value
        new = name if _is_public(op) else f"{name}__{old}"
        if new != old:
            ir.SymbolTable.replace_all_symbol_uses(old, new, module.operation)
            table.set_symbol_name(op, new)


def compile_flags(targets, cpu="host", gpu_arch=None) -> list[str]:
    """iree-compile flags for one module that runs on each of `targets`."""
    flags = ["--iree-input-type=stablehlo"]
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown target {t!r}; expected one of {sorted(TARGETS)}")
        flags.append(f"--iree-hal-target-device={TARGETS[t].device}")
        if t == "llvm-cpu":
            flags += ["--iree-hal-local-target-device-backends=llvm-cpu",
                      f"--iree-llvmcpu-target-cpu={cpu}"]
        elif t == "cuda":
            flags.append(f"--iree-cuda-target={gpu_arch or DEFAULT_GPU_ARCH['cuda']}")
        elif t == "rocm":
            flags.append(f"--iree-hip-target={gpu_arch or DEFAULT_GPU_ARCH['rocm']}")
        elif t == "vulkan-spirv" and gpu_arch:
            flags.append(f"--iree-vulkan-target={gpu_arch}")
    return flags


def compile_text(text: str, targets=("llvm-cpu",), cpu="host", gpu_arch=None,
                 extra_flags=()) -> bytes:
    """Compile prepared module text to `.vmfb` bytes, raising `CompileError` with
    IREE's diagnostics when it fails."""
    from iree.compiler import tools

    flags = [*compile_flags(targets, cpu, gpu_arch), *extra_flags]
    try:
        return tools.compile_str(text, extra_args=flags)
    except tools.CompilerToolError as e:
        raise CompileError(f"iree-compile failed for targets {list(targets)}:\n{e}") from None


def compile_to_stream(text: str, targets=("llvm-cpu",), cpu="host") -> str:
    """The module after IREE's stream phase (`--compile-to=stream`), as text."""
    from iree.compiler import tools

    flags = [*compile_flags(targets, cpu), "--compile-to=stream"]
    return tools.compile_str(text, extra_args=flags).decode()


def stream_copy_sizes(stream_text: str) -> list[int | None]:
    """Byte lengths of the `stream.cmd.copy` ops in stream-phase output (None where
    the length is not a constant): a full loop-carried buffer among them means the
    buffer is copied instead of updated in place."""
    from iree.compiler import ir

    sizes = []

    def visit(op):
        if op.operation.name == "stream.cmd.copy":
            owner = op.operation.operands[-1].owner
            attrs = getattr(owner, "attributes", {})
            value = attrs["value"] if "value" in attrs else None
            sizes.append(None if value is None else ir.IntegerAttr(value).value)
        return ir.WalkResult.ADVANCE

    with ir.Context():
        ir.Module.parse(stream_text).operation.walk(visit)
    return sizes

