"""IREE 3.13 (llvm-cpu): iree-compile segfaults in `iree-stream-refine-usage`
(`ResourceType::getLifetime` from `ValueResourceUsage::updateFromUse` on an
`scf.yield`) on nested loops that const-expr hoisting feeds: a value computed from
constants alone (`jnp.linspace`, diffrax's `SaveAt(ts=...)`) becomes a global, the
outer loop then carries that resource's size as an `index`, and after stream
conversion the inner loop that receives it has more arguments than results (the
after-region yields the constant size, `%c84`, which the condition does not
forward). `--iree-opt-const-expr-hoisting=false` compiles it, and the module runs
right with the default fusion. (With aggressive fusion the module compiles and
every call fails: "ref is null; while invoking native function hal.buffer.subspan".)

The program: a diffrax solve (Lotka-Volterra, Tsit5, PID controller, SaveAt 21
times) with its step loop and SaveAt loop routed to whilst's loops by
`whilst.integrations.diffrax.WhilstAdjoint`, exported with equinox's primitives kept
whole (whilst evaluates them in line, `_library_primitives.py`, and that module
compiles). Smaller nested loops carrying a linspace (`lax.while_loop`s or whilst's)
did not reproduce it.
whilst works around it in `compile_module`: a third flag set, default fusion without
const-expr hoisting (`NO_CONST_EXPR_HOISTING`, whilst/lowering/_iree.py), which is
compiled next once a flag set crashed in `ResourceUsage.cpp` (aggressive fusion with
hoisting crashes the same way on this module).

    EQX_ON_ERROR=nan python iree_limits/hoisted_nested_loop.py
prints, for default fusion with and without hoisting, "crashed" or "compiled".
"""
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from iree.compiler import tools  # noqa: E402

import whilst  # noqa: E402
from whilst._compile import prepare_stage  # noqa: E402
from whilst.integrations.diffrax import WhilstAdjoint  # noqa: E402
from whilst.ir.iree_forms import _export_forms as export_forms  # noqa: E402
from whilst.lowering import flag_sets  # noqa: E402
from whilst.lowering._iree import NO_CONST_EXPR_HOISTING  # noqa: E402


def solve(y0, rates):
    field = lambda t, y, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                                       -p[2] * y[1] + p[3] * y[0] * y[1]])
    return diffrax.diffeqsolve(
        diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0, 10, 21)), max_steps=256,
        adjoint=WhilstAdjoint()).ys


def main():
    args = np.array([10.0, 10.0], np.float32), np.array([0.1, 0.02, 0.4, 0.02], np.float32)
    export_forms.library_primitives_in_line = lambda jaxpr: jaxpr  # kept whole
    text = prepare_stage([whilst.export(solve, *args)], ("llvm-cpu",))
    default = flag_sets(("llvm-cpu",))[1]
    for label, flags in [("default fusion", default),
                         ("default fusion, no const-expr hoisting",
                          [*default, NO_CONST_EXPR_HOISTING])]:
        try:
            tools.compile_str(text, extra_args=flags)
            print(f"{label}: compiled")
        except tools.CompilerToolError as e:
            print(f"{label}: crashed ({'refine' if 'ResourceUsage' in str(e) else 'other'})")


if __name__ == "__main__":
    main()
