"""A loop that emits one row per step into a `whilst.TensorArray`, against the same
loop writing into a preallocated array with `.at[i].set` (issue 37).

The programs (forward: the rows; gradient: of a weighted sum of the rows), each with
a TensorArray, one with `run_time_checks=True` (debug_checks and a mask of written
elements) and a preallocated array, and the checked forward program checkified (its
Error's arrays returned too), are checked against each other, then timed on JAX (jit, CPU) and on
IREE (llvm-cpu, local-sync), all variants interleaved in this process
(`_timing.measure`). Printed: the medians, their ratios to the preallocated
program's per backend, and the readbacks and dispatches per emitted loop iteration
of each IREE module.

    .venv/bin/python bench/tensor_array.py [--steps 512] [--width 64] [--budget 3]
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _timing import blocking, fmt_ratio, fmt_time, measure, table
from jax.experimental import checkify
from whilst.lowering import compile_to_stream, loop_counts, prepare

VARIANTS = ("TensorArray", "TensorArray+checks", "preallocated")


def programs(steps: int, width: int):
    """`{name: fn(x, scale)}`: the rows h <- tanh(scale * h + 0.1) while max(h) < 2
    (always true: every step runs; the test is data-dependent), stacked
    `[steps, width]`, written by a TensorArray or by `.at[i].set`."""
    def cond(i, rows, h):
        return jnp.max(h) < 2.0

    def step(scale, h):
        return jnp.tanh(scale * h + 0.1)

    def tensor_array(x, scale, run_time_checks=False):
        ta = whilst.TensorArray(jnp.float32, size=0, dynamic_size=True,
                                element_shape=(width,), run_time_checks=run_time_checks)
        _, ta, _ = whilst.while_loop(
            cond, lambda i, ta, h: (i + 1, ta.write(i, step(scale, h)), step(scale, h)),
            [0, ta, x], maximum_iterations=steps)
        return ta.stack()

    def preallocated(x, scale):
        rows = jnp.zeros((steps, width), jnp.float32)
        _, rows, _ = whilst.while_loop(
            cond, lambda i, rows, h: (i + 1, rows.at[i].set(step(scale, h)), step(scale, h)),
            [0, rows, x], maximum_iterations=steps)
        return rows

    weights = np.linspace(0.5, 1.5, steps, dtype=np.float32)[:, None]
    found = {}
    def with_checks(x, scale):
        return tensor_array(x, scale, run_time_checks=True)

    for name, fn in zip(VARIANTS, (tensor_array, with_checks, preallocated)):
        found[f"{name} forward"] = fn
        found[f"{name} gradient"] = jax.grad(
            lambda x, s, fn=fn: jnp.sum(fn(x, s) * weights), (0, 1))
    checked = checkify.checkify(with_checks, errors=checkify.user_checks)

    def checkified(x, scale):
        err, rows = checked(x, scale)
        return jax.tree_util.tree_leaves(err), rows
    found["TensorArray+checks checkified forward"] = checkified
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=512)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--budget", type=float, default=3.0)
    args = parser.parse_args()
    x = np.linspace(-0.5, 0.5, args.width, dtype=np.float32)
    scale = np.float32(0.9)
    fns = programs(args.steps, args.width)
    calls, counts = {}, {}
    for name, fn in fns.items():
        exported = whilst.export(fn, x, scale)
        module = whilst.compile(exported).load()
        jitted = jax.jit(fn)
        want = jax.tree_util.tree_leaves(jitted(x, scale))
        got = jax.tree_util.tree_leaves(module(x, scale))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        calls[f"JAX {name}"] = blocking(jitted, x, scale)
        calls[f"IREE {name}"] = blocking(module, x, scale)
        counts[name] = loop_counts(compile_to_stream(prepare([exported])))
    timings = measure(calls, budget_s=args.budget)
    rows = []
    for part in ("forward", "gradient"):
        for backend in ("JAX", "IREE"):
            t = {v: timings[f"{backend} {v} {part}"].median for v in VARIANTS}
            rows.append([f"{backend} {part}", *map(fmt_time, t.values()),
                         fmt_ratio(t["TensorArray"] / t["preallocated"]),
                         fmt_ratio(t["TensorArray+checks"] / t["preallocated"])])
        if part == "forward":
            for backend in ("JAX", "IREE"):
                t = timings[f"{backend} TensorArray+checks checkified forward"].median
                pre = timings[f"{backend} preallocated forward"].median
                rows.append([f"{backend} forward checkified", "", fmt_time(t), "", "",
                             fmt_ratio(t / pre)])
    table(f"{args.steps} steps writing f32[{args.width}] rows (medians)",
          ["program", *VARIANTS, "TA/pre", "TA+checks/pre"], rows)
    table("IREE stream phase, per emitted loop iteration: (readbacks, dispatches)",
          ["program", "loops"], [[name, str(c)] for name, c in counts.items()])


if __name__ == "__main__":
    main()
