"""64-bit types (float64, int64: `jax_enable_x64`) kept as such by iree-compile, and
what to say when a target cannot compute them.

By default IREE 3.13 converts every f64 and i64 value to f32 and i32, its public
functions' arguments and results included, while whilst's signature still says
float64: every call failed ("input0 element type mismatch"), and programs that
bitcast a float to an integer did not compile ("'arith.bitcast' op operand type
'f32' and result type 'i64' are cast incompatible"). `KEEP_64_BITS` turns the
conversions off, so a module computes in the types its signature names.

Not every target computes every f64 op: IREE 3.13's llvm-cpu code calls the C
library for f64 sin, cos, tan, tanh, atan2 (asin, acos, atan), fmod and cbrt and
the link fails ("undefined symbol: sin"), and the default Vulkan target has no
f64 at all. `float64_hint` says so next to IREE's diagnostics.
"""
from __future__ import annotations

import re

KEEP_64_BITS = ["--iree-input-demote-f64-to-f32=false", "--iree-input-demote-i64-to-i32=false"]

# iree-compile diagnostics of f64 code a target cannot compile (before the command
# line it echoes, whose flags name f64).
_LLVM_CPU_MISSING = re.compile(r"undefined symbol: (\w+)")
_VULKAN_F64 = re.compile(r"\bx?f64\b")


def float64_hint(diagnostics: str, targets) -> str:
    """A sentence on what to do when iree-compile failed with `diagnostics` on a
    module that computes in float64, or "" when the failure is another one."""
    diagnostics = diagnostics.split("Invoked with:")[0]
    missing = sorted(set(_LLVM_CPU_MISSING.findall(diagnostics)))
    if missing and "llvm-cpu" in targets:
        return (f"\nIREE 3.13's llvm-cpu code calls the C library's {', '.join(missing)} "
                f"for these float64 operations, which its modules cannot link. Compute them "
                f"in float32 (x.astype(jnp.float32)), or without jax_enable_x64.")
    if "vulkan-spirv" in targets and _VULKAN_F64.search(diagnostics):
        return ("\nThe module computes in float64, which IREE 3.13's Vulkan code does not "
                "support on the default target (and not for sin or cos on any): compute in "
                "float32 for Vulkan, or compile for llvm-cpu or cuda.")
    return ""
