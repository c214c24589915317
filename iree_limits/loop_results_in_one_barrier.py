"""IREE 3.13 (llvm-cpu, aggressive fusion): diffrax's event-stopped Tsit5 solve
through diffrax's own loops (`lax.while_loop`s, its default
`RecursiveCheckpointAdjoint`) fails on every call ("ref is null; while invoking
native function hal.buffer.subspan") when all the results of its step loop pass
through one `stablehlo.optimization_barrier` (the form `loop_results_fenced`,
whilst/lowering/_iree_loop_results.py, had for every loop). The failure needs, in
that barrier, a result whose carry starts from a copy of `distinct_loop_inits`
(whilst/lowering/_iree_loops.py; the step loop has two) together with nine of the
other 35 results, used and unused ones: without the copies, with fewer results in
the barrier, or with the copies' results behind barriers of their own (whilst's form
now) the module runs. The default fusion ran every form. One function holding both
event solves of `tests/clients/test_diffrax.py` through `WhilstAdjoint` failed the
same way. This script compiles the module both ways and prints

    one barrier        failed: main: the IREE runtime failed ... ref is null ...
    copies apart       (array(2.5869288, ...), array([8.697555, 5.70798 ], ...))
    want (JAX)         (Array(2.545524, ...), Array([8.702844 , 5.7616386], ...))

(the stop times differ by float32 rounding of the first steps' error estimates;
README, "diffrax").

    python iree_limits/loop_results_in_one_barrier.py   (needs diffrax)

By hand: `--save DIR` writes the prepared module with one barrier as
DIR/loop_results_in_one_barrier.mlir (2,100 lines; smaller cuts of it ran), then

    iree-compile DIR/loop_results_in_one_barrier.mlir --iree-input-type=stablehlo \\
      --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \\
      --iree-llvmcpu-target-cpu=host --iree-opt-const-eval=false \\
      --iree-global-opt-enable-warn-on-uninitialized-values=false \\
      --iree-dispatch-creation-enable-aggressive-fusion=true -o m.vmfb
    iree-run-module --module=m.vmfb --function=main --input="2xf32=10 10" \\
      --input="4xf32=0.1 0.02 0.4 0.02"
"""
from _diffrax_lv import RATES, Y0  # first: sets EQX_ON_ERROR for equinox

import argparse
import os

import diffrax
import jax
import jax.numpy as jnp

import whilst
import whilst.lowering._iree as iree_lowering
from whilst.lowering._ir_walk import ops_where


def event_solve(y0, rates):
    """Lotka-Volterra, Tsit5, PID controller (rtol = atol = 1e-5), stopped at the end
    of the step where y[0] falls below 9: (t, y) there."""
    field = lambda t, y, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                                       -p[2] * y[1] + p[3] * y[0] * y[1]])
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field), diffrax.Tsit5(), 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5), max_steps=256,
        event=diffrax.Event(lambda t, y, args, **kw: y[0] - 9.0, root_finder=None))
    return sol.ts[-1], sol.ys[-1]


def results_in_one_barrier(module):
    """The form before: every loop's results of static shape through one barrier."""
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        results = [r for r in loop.results if ir.RankedTensorType(r.type).has_static_shape]
        with ir.InsertionPoint.after(loop), loop.location:
            barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                          results=[r.type for r in results], operands=results)
        for old, new in zip(results, barrier.results):
            old.replace_all_uses_except(new, barrier)


def solve(one_barrier, save=None):
    saved = iree_lowering.loop_results_fenced
    if one_barrier:
        iree_lowering.loop_results_fenced = results_in_one_barrier
    try:
        exported = whilst.export(event_solve, Y0, RATES)
        if save:
            with open(os.path.join(save, "loop_results_in_one_barrier.mlir"), "w") as f:
                f.write(iree_lowering.prepare([exported]))
        compiled = whilst.compile(exported, cache=False)
        assert "default fusion" not in compiled.stages[-1][0], compiled.stages
        return compiled.load()(Y0, RATES)
    except RuntimeError as e:
        return f"failed: {str(e)[:160]}"
    finally:
        iree_lowering.loop_results_fenced = saved


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", metavar="DIR")
    save = parser.parse_args().save
    print("one barrier       ", solve(True, save))
    print("copies apart      ", solve(False))
    print("want (JAX)        ", jax.jit(event_solve)(Y0, RATES))
