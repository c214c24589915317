"""IREE 3.13 (llvm-cpu): llvm-cpu codegen of a loop in one dispatch fails on
`bitcast_convert(broadcast_in_dim(x))` of a scalar `x` ("'memref.expand_shape' op rank
0 memrefs can only be extended/collapsed with/from ones"), as whilst's one-hot gathers
end (`whilst/ir/iree_forms/_onehot.py`): diffrax's Lotka-Volterra solve with its
loops routed to whilst's (`WhilstAdjoint`) reads its SaveAt times so. The same op
outside a dispatch region, and the same loop with the bitcast before the broadcast,
compile. whilst commutes the two in the loops it moves into dispatches
(`_scalar_bitcasts`, `whilst/lowering/_iree_loops_in_dispatch.py`).

    EQX_ON_ERROR=nan python iree_limits/bitcast_of_broadcast_in_dispatch.py

prints, for the loop in a dispatch with and without the bitcasts commuted,
"compiled" or IREE's first error.
"""
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")

import numpy as np  # noqa: E402
from iree.compiler import ir, tools  # noqa: E402

import whilst  # noqa: E402
from hoisted_nested_loop import solve  # noqa: E402  (this folder, run as a script)
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare  # noqa: E402
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch  # noqa: E402


def compiled_with(text: str, rewrite: str, replacement) -> str:
    """"compiled", or iree-compile's first error, for prepared module `text` with its
    loops in dispatches, `_iree_loops_in_dispatch`'s function `rewrite` replaced by
    `replacement` (None: as whilst has it) while the loops move."""
    flags = next(f for f in flag_sets(("llvm-cpu",), loops_in_dispatch=True)
                 if has_loops_in_dispatch(f))
    kept = getattr(in_dispatch, rewrite)
    setattr(in_dispatch, rewrite, kept if replacement is None else replacement)
    try:
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            assert in_dispatch.loops_in_dispatch(module)
            source = module.operation.get_asm(enable_debug_info=False)
    finally:
        setattr(in_dispatch, rewrite, kept)
    try:
        tools.compile_str(source, extra_args=flags)
        return "compiled"
    except tools.CompilerToolError as e:
        first = next((line for line in str(e).splitlines() if "error:" in line), str(e))
        return first.strip()[:200]


def main():
    args = np.array([10.0, 10.0], np.float32), np.array([0.1, 0.02, 0.4, 0.02], np.float32)
    text = prepare([whilst.export(solve, *args)])
    for label, replacement in [("bitcasts commuted", None), ("as exported", lambda loop: None)]:
        print(f"{label}: {compiled_with(text, '_scalar_bitcasts', replacement)}")


if __name__ == "__main__":
    main()
