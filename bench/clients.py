"""Client libraries' programs on whilst (issue 34): diffrax solves (its own loops
passed unchanged, and its loops routed to whilst by `WhilstAdjoint`; a neural ODE) and
optimistix root finds, fixed points, minimisations and least squares.

Per case, in this process: the `whilst.compile` time (s, no cache; the fallback
flag set it needed, if any), whether IREE's results match JAX's (allclose to
rtol 2e-4, the client tests' tolerance for Runge-Kutta gradients), and
the median call time of JAX CPU (jit, timed on its own, warm) and of whilst's
module on IREE `local-sync`, with the ratio IREE / JAX; and per iteration of the
outer loop (a solver step, or k steps where whilst unrolls the loop; `steps`: its
iterations in one call) the dispatches, command-buffer submissions and readbacks
of the call's loops on IREE (`_step_counts`: dispatches counted by IREE's
profiler, submissions and readbacks from the stream phase).

    EQX_ON_ERROR=nan .venv/bin/python bench/clients.py [--only NAME,...] [--no-loops-in-dispatch]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("EQX_ON_ERROR", "nan")   # equinox's checks as NaN (exportable)

import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import whilst  # noqa: E402
from whilst.integrations.diffrax import WhilstAdjoint  # noqa: E402

from _step_counts import per_outer_iteration, runtime_counts  # noqa: E402
from _timing import blocking, fmt_ratio, fmt_time, measure, table  # noqa: E402
from iree.compiler import tools  # noqa: E402
from whilst._compile import FALLBACK_NOTE  # noqa: E402
from whilst.lowering import has_loops_in_dispatch, prepare, source_for  # noqa: E402

# The neural ODE and the optimistix programs the client tests check
# (tests/clients/test_diffrax.py, test_optimistix.py).
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
sys.path[:0] = [os.path.join(TESTS, "clients"), TESTS]  # the client tests import helpers
from test_diffrax import WEIGHTS, neural_ode  # noqa: E402
from test_optimistix import bfgs, fixed_point, levenberg_marquardt, newton  # noqa: E402

Y0 = np.array([10.0, 10.0], np.float32)
RATES = np.array([0.1, 0.02, 0.4, 0.02], np.float32)


def lv_solve(y0, rates, adjoint=diffrax.RecursiveCheckpointAdjoint(), solver=diffrax.Tsit5(),
             saveat=diffrax.SaveAt(ts=jnp.linspace(0, 10, 21))):
    """Lotka-Volterra, Tsit5, PID controller, SaveAt 21 times (about 34 steps)."""
    field = lambda t, y, p: jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1],
                                       -p[2] * y[1] + p[3] * y[0] * y[1]])
    return diffrax.diffeqsolve(
        diffrax.ODETerm(field), solver, 0.0, 10.0, 0.1, y0, args=rates,
        stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
        saveat=saveat, max_steps=256, adjoint=adjoint).ys


def lv_grad(y0, rates):
    """d/d rates of sum(lv_solve) through WhilstAdjoint (default policy)."""
    return jax.grad(lambda p: jnp.sum(lv_solve(y0, p, WhilstAdjoint())))(rates)


def lv_batch(y0s, rates):
    """y(10) of each initial condition, vmapped, through WhilstAdjoint."""
    return jax.vmap(lambda y: lv_solve(y, rates, WhilstAdjoint(),
                                       saveat=diffrax.SaveAt(t1=True)))(y0s)


def decay_grad(y0, rate):
    """d/d rate of sum(y(1)), dy/dt = -rate y, 10 Euler steps, through WhilstAdjoint."""
    solve = lambda r: diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, r: -r * y), diffrax.Euler(), 0.0, 1.0, 0.1, y0, args=r,
        saveat=diffrax.SaveAt(t1=True), max_steps=64, adjoint=WhilstAdjoint()).ys
    return jax.grad(lambda r: jnp.sum(solve(r)))(rate)


Y3 = np.array([0.5, 0.2, 0.8], np.float32)
CASES = {   # name -> (fn, args)
    "lv_solve_own_loops": (lv_solve, (Y0, RATES)),
    "lv_solve_whilst_adjoint": (lambda y, p: lv_solve(y, p, WhilstAdjoint()), (Y0, RATES)),
    "decay_grad_whilst_adjoint": (decay_grad, (np.array([1.0, 2.0], np.float32),
                                               np.float32(0.7))),
    "lv_grad_whilst_adjoint": (lv_grad, (Y0, RATES)),
    "lv_dopri5_whilst_adjoint": (lambda y, p: lv_solve(y, p, WhilstAdjoint(),
                                                       solver=diffrax.Dopri5()), (Y0, RATES)),
    "lv_batch1024_whilst_adjoint": (lv_batch, (
        Y0 * np.linspace(0.5, 1.5, 1024, dtype=np.float32)[:, None], RATES)),
    "node_solve_whilst_adjoint": (lambda y, w: neural_ode(y, w, WhilstAdjoint()),
                                  (Y0 / 10, WEIGHTS)),
    "node_grad_whilst_adjoint": (jax.grad(lambda w, y: jnp.sum(
        neural_ode(y, w, WhilstAdjoint()) ** 2)), (WEIGHTS, Y0 / 10)),
    "newton": (newton, (Y3, np.float32(0.9))),
    "fixed_point": (fixed_point, (Y3, np.float32(0.9))),
    "fixed_point_grad": (jax.grad(lambda y, a: jnp.sum(fixed_point(y, a)), argnums=1),
                         (Y3, np.float32(0.9))),
    "bfgs": (bfgs, (np.array([-1.0, 1.0, 0.5], np.float32), np.float32(10.0))),
    "levenberg_marquardt": (levenberg_marquardt, (np.array([-1.0, 1.0, 0.5], np.float32),
                                                  np.float32(10.0))),
}


def stream_phase(fn, args, compiled) -> str:
    """`fn`'s module at iree-compile's stream phase, as `whilst.compile` compiled it
    into `compiled` (its flags and the module text they take)."""
    text = source_for(prepare([whilst.export(fn, *args)]), compiled.flags)
    return tools.compile_str(text, extra_args=[*compiled.flags, "--compile-to=stream"]).decode()


def fmt_count(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--no-loops-in-dispatch", dest="loops_in_dispatch",
                        action="store_false",
                        help="whilst.compile(..., loops_in_dispatch=False): every loop "
                             "stepped from the host")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(CASES)
    rows = []
    for name in names:
        fn, call_args = CASES[name]
        jitted = jax.jit(fn)
        want = jax.block_until_ready(jitted(*call_args))
        t = time.perf_counter()
        compiled = whilst.compile(fn, *call_args, cache=False,
                                  loops_in_dispatch=args.loops_in_dispatch)
        seconds = time.perf_counter() - t
        module = compiled.load("local-sync")
        got = module.main(*call_args)
        matches = all(np.allclose(g, w, rtol=2e-4, atol=1e-5) for g, w in
                      zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)))
        jax_time = measure({"jax": blocking(jitted, *call_args)})["jax"].median
        iree_time = measure({"iree": lambda: module.main(*call_args)})["iree"].median
        fallback = (" (default fusion)" if FALLBACK_NOTE in compiled.stages[-1][0] else
                    " (loops in dispatches)" if has_loops_in_dispatch(compiled.flags) else "")
        counts = per_outer_iteration(stream_phase(fn, call_args, compiled), "main",
                                     runtime_counts(compiled.data, "main",
                                                    jax.tree_util.tree_leaves(call_args)))
        rows.append([name, f"{seconds:.1f}{fallback}", "yes" if matches else "NO",
                     fmt_time(jax_time), fmt_time(iree_time), fmt_ratio(iree_time / jax_time),
                     *(fmt_count(counts[k]) for k in ("iterations", "dispatches",
                                                      "submissions", "readbacks"))])
    table("Client programs: JAX CPU (alone, warm) vs whilst on IREE local-sync; IREE's "
          "work per outer-loop iteration (solver step)",
          ["case", "compile s", "matches", "JAX", "IREE", "IREE/JAX", "steps", "dispatches",
           "submissions", "readbacks"], rows)


if __name__ == "__main__":
    main()
