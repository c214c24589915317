"""IREE against JAX CPU on the same whilst programs (issue 4).

Each program is one function: it is compiled once for JAX CPU (jit, ahead of
time) and once for IREE llvm-cpu (`whilst.compile`), loaded with the
`local-sync` and `local-task` drivers, checked (IREE results allclose to JAX's),
and then only execution is timed, all variants interleaved in this process.
Printed: medians, per-step time and the IREE/JAX ratio (goal: <= 1.0).

The floor (issue 10): the program's fixed-length twin (bench/fixed_length.py:
each whilst loop a `lax.scan` of exactly the steps it takes on these inputs,
differentiated by JAX) compiled by `whilst.compile` with whilst's IREE flags and
timed on local-sync with the rest, at scan unroll 1 and at the unroll whilst
chose; the faster is the floor. It is what IREE 3.13 makes of the framework's own
exact-length program: whilst-IREE/floor is the overhead of whilst's loops,
floor/JAX what IREE costs against XLA. Per emitted loop iteration, the
stream-phase module's host readbacks and dispatches (`loop_counts`) are printed
for both, with the steps each emitted iteration runs.

Programs (the PROGRAMS table; add one with `register`):
  1. sin       10k steps of x = sin(x)*0.9 + 0.1 on f32[64] (forward only)
  2. pushpop   jax.grad of that loop with maximum_iterations=N, N = 1000, 4000,
               16000: forward push plus reverse pop (time should grow linearly)
  3. tanh      grad_W of x <- tanh(W x), D=256, n=2048, maximum_iterations=4096
  (2 and 3 pass `gradient_memory=STORE_ALL`, so every step is stored as the
  rows' names say, beyond the default 1 MiB budget)
  4. samples   each `samples/*.py` defining `bench_program()` that returns
               `(fn, args)` is registered as `sample:<file name>`.

    .venv/bin/python bench/iree_vs_jax.py [--quick] [--unroll 1,8,64]
        [--json bench/results/iree_vs_jax.json] [--plot bench/results]
    .venv/bin/python bench/iree_vs_jax.py --from-json OUT.json --plot DIR   # redraw only
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import os
import sys
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _timing import (blocking, fmt_ratio, fmt_time, machine, measure, table, write_json)
from fixed_length import fixed_length, trip_counts
from whilst._compile import compile_stage, prepare_stage
from whilst.lowering import compile_to_stream, loop_counts, unroll_factors
from whilst.lowering._ir_walk import public_functions

DRIVERS = ("local-sync", "local-task")
FLOOR_DRIVER = "local-sync"
# label -> the floor's scan unroll: 1, or None for the unroll whilst chooses per loop.
FLOOR_UNROLLS = {"k=1": 1, "k=whilst": None}
SAMPLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples")


@dataclasses.dataclass
class Program:
    """A function to run on both backends; `steps` loop iterations per call (forward
    steps; a gradient runs as many again backwards); programs of one `group` with
    different `steps` form one line of the steps-vs-time plot."""
    name: str
    group: str
    fn: Callable
    args: tuple
    steps: int
    rtol: float = 1e-4


# group -> builder(loop_options, quick) -> [Program]; loop_options are passed to
# whilst.while_loop (e.g. {"unroll": 8}).
PROGRAMS: dict[str, Callable[[dict, bool], list[Program]]] = {}


def register(group: str):
    """Decorator adding a program builder to PROGRAMS."""
    def add(builder):
        PROGRAMS[group] = builder
        return builder
    return add


def sin_loop(x, n, **loop_options):
    """n steps of x = sin(x)*0.9 + 0.1 (n is data)."""
    _, x = whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                             [jnp.int32(0), x], name="sin", **loop_options)
    return x


STORE_ALL = 64 << 20  # gradient_memory that stores every step of pushpop and tanh


def sin_loop_grad_loss(x, n, *, maximum_iterations, **loop_options):
    """sum of the final x of n sin steps, bounded by maximum_iterations, every step
    stored for reverse mode."""
    _, y = whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                             [jnp.int32(0), x], maximum_iterations=maximum_iterations,
                             name="pushpop", gradient_memory=STORE_ALL, **loop_options)
    return jnp.sum(y)


def _x64():
    return np.random.default_rng(0).standard_normal(64).astype(np.float32)


@register("sin")
def _sin(loop_options, quick):
    n = 10_000
    return [Program(f"sin {n} steps", "sin", functools.partial(sin_loop, **loop_options),
                    (_x64(), np.int32(n)), n)]


@register("pushpop")
def _pushpop(loop_options, quick):
    return [Program(f"pushpop {n}", "pushpop",
                    jax.grad(functools.partial(sin_loop_grad_loss, maximum_iterations=n,
                                               **loop_options)),
                    (_x64(), np.int32(n)), n, rtol=1e-3)
            for n in ((1000, 4000) if quick else (1000, 4000, 16000))]


@register("tanh")
def _tanh(loop_options, quick):
    from grad_tanh import inputs, whilst_loss
    W, x0 = inputs()
    loss = functools.partial(whilst_loss, maximum_iterations=4096, gradient_memory=STORE_ALL,
                             **loop_options)
    return [Program("tanh grad_W n=2048", "tanh", jax.grad(loss), (W, x0, np.int32(2048)),
                    2048, rtol=2e-3)]


@register("samples")
def _samples(loop_options, quick):
    """Samples opt in by defining `bench_program() -> (fn, args)`; loop options do not
    reach them (they call whilst.while_loop themselves)."""
    programs = []
    for file in sorted(os.listdir(SAMPLES_DIR)):
        path = os.path.join(SAMPLES_DIR, file)
        if not file.endswith(".py") or "def bench_program" not in open(path).read():
            continue
        sys.path.insert(0, SAMPLES_DIR)
        try:
            fn, args = importlib.import_module(file[:-3]).bench_program()
        finally:
            sys.path.remove(SAMPLES_DIR)
        programs.append(Program(f"sample:{file[:-3]}", "samples", fn, tuple(args), 1,
                                rtol=1e-3))
    return programs


def loop_option_sets(unroll: str | None) -> list[dict]:
    """One dict of whilst.while_loop options per requested unroll setting."""
    if unroll is None:
        return [{}]
    if "unroll" not in inspect.signature(whilst.while_loop).parameters:
        print("whilst.while_loop has no unroll= keyword: --unroll ignored")
        return [{}]
    return [{"unroll": int(k)} for k in unroll.split(",")]


def _allclose(got, want, rtol):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    return len(got) == len(want) and all(
        np.allclose(np.asarray(g), np.asarray(w), rtol=rtol,
                    atol=rtol * max(1.0, float(np.abs(np.asarray(w)).max(initial=0))))
        for g, w in zip(got, want))


def run_program(p: Program, drivers, budget_s) -> dict:
    """Compile for both backends and the floor, check IREE against JAX, time
    execution only."""
    jitted = jax.jit(p.fn).lower(*p.args).compile()
    t = time.perf_counter()
    exported = whilst.export(p.fn, *p.args)
    prepared = prepare_stage([exported], ("llvm-cpu",))
    # Times a real iree-compile, as whilst.compile(p.fn, *p.args, cache=False) runs it.
    compiled = compile_stage(prepared, [exported.name], ("llvm-cpu",), cache=False)
    compile_s = time.perf_counter() - t
    want = jax.block_until_ready(jitted(*p.args))
    calls = {"jax": blocking(jitted, *p.args)}
    for driver in drivers:
        call = functools.partial(compiled.load(driver).main, *p.args)
        if not _allclose(call(), want, p.rtol):
            raise AssertionError(f"{p.name}: IREE {driver} result differs from JAX's")
        calls[driver] = call
    trips = trip_counts(p.fn, *p.args)
    floors = {}
    for label, unroll in FLOOR_UNROLLS.items():
        if unroll is None and all(t.unroll == 1 for t in trips):
            continue  # the same program as k=1
        floors[label] = floor_program(p, trips, unroll, want)
        if "call" in floors[label]:
            calls[f"floor {label}"] = floors[label].pop("call")
    timings = measure(calls, budget_s=budget_s)
    row = dict(program=p.name, group=p.group, steps=p.steps, iree_compile_s=compile_s,
               jax_s=timings["jax"].median, jax_spread=timings["jax"].spread,
               trips=[dataclasses.asdict(t) for t in trips],
               loops=dict(unroll=unroll_factors(exported.text),
                          per_iteration=per_iteration(prepared)))
    for driver in drivers:
        row[f"{driver}_s"] = timings[driver].median
        row[f"{driver}_spread"] = timings[driver].spread
        row[f"{driver}_ratio"] = timings[driver].median / timings["jax"].median
    for label, floor in floors.items():
        if f"floor {label}" in timings:
            floor.update(s=timings[f"floor {label}"].median,
                         spread=timings[f"floor {label}"].spread)
    row["floors"] = floors
    timed = {label: f for label, f in floors.items() if "s" in f}
    if timed:
        best = min(timed, key=lambda label: timed[label]["s"])
        row.update(floor=best, floor_s=timed[best]["s"],
                   floor_ratio=timed[best]["s"] / row["jax_s"],
                   over_floor=row[f"{FLOOR_DRIVER}_s"] / timed[best]["s"])
    return row


def floor_program(p: Program, trips, unroll, want) -> dict:
    """The fixed-length twin of `p` (bench/fixed_length.py) prepared and compiled as
    `whilst.compile` does, checked against JAX's results: {"call", "unroll" (per
    loop), "per_iteration", "affinity"}, or {"error"} where iree-compile fails on it
    or its results differ from JAX's. Where they differ only with the entry's
    `stream.affinity` (iree_limits/affinity_scan_gradient.py), the floor is
    the module without it ("affinity": False), which copies loop-carried buffers."""
    twin = fixed_length(p.fn, trips, unroll)
    prepared = prepare_stage([whilst.export(twin, *p.args)], ("llvm-cpu",))
    for affinity, text in ((True, prepared), (False, without_affinity(prepared))):
        try:
            compiled = compile_stage(text, ["main"], ("llvm-cpu",), cache=False)
        except whilst.CompileError as e:
            return {"error": str(e).splitlines()[0]}
        call = functools.partial(compiled.load(FLOOR_DRIVER).main, *p.args)
        got = call()
        if _allclose(got, want, p.rtol):
            return {"call": call, "affinity": affinity,
                    "unroll": [t.unroll if unroll is None else unroll for t in trips],
                    "per_iteration": per_iteration(text)}
        nans = sum(int(np.isnan(np.asarray(g)).sum()) for g in jax.tree_util.tree_leaves(got))
    return {"error": f"IREE's result differs from JAX's ({nans} NaN)"}


def without_affinity(text: str) -> str:
    """Prepared module text with no `stream.affinity` on its public functions."""
    from whilst.lowering._iree_ir import ir

    with ir.Context():
        module = ir.Module.parse(text)
        for op in public_functions(module):
            del op.attributes["stream.affinity"]
        return module.operation.get_asm(enable_debug_info=False)


def per_iteration(text: str) -> list[list[int]]:
    """`[[readbacks, dispatches]]` per emitted loop iteration of each innermost loop of
    prepared module text in the stream phase (`whilst.lowering.loop_counts`)."""
    return [list(c) for c in loop_counts(compile_to_stream(text))]


def print_results(rows, drivers):
    header = ["program", "steps", "JAX", "JAX/step"]
    for d in drivers:
        header += [d, f"{d}/step", f"{d}/JAX"]
    header.append("IREE compile")
    lines = []
    for r in rows:
        line = [r["program"], r["steps"], fmt_time(r["jax_s"]), fmt_time(r["jax_s"] / r["steps"])]
        for d in drivers:
            line += [fmt_time(r[f"{d}_s"]), fmt_time(r[f"{d}_s"] / r["steps"]),
                     fmt_ratio(r[f"{d}_ratio"])]
        line.append(fmt_time(r["iree_compile_s"]))
        lines.append(line)
    table("\nIREE vs JAX CPU (medians; ratio = IREE time / JAX time, goal <= 1.00x)",
          header, lines)
    misses = [f"{r['program']} on {d} ({r[f'{d}_ratio']:.2f}x)" for r in rows for d in drivers
              if r[f"{d}_ratio"] > 1.0]
    print("goal missed (IREE/JAX > 1.0): " + ("; ".join(misses) if misses else "none"))
    floors = [r for r in rows if "floors" in r]
    if floors:
        print_floors(floors)


def print_floors(rows):
    """The floor table: JAX, whilst on FLOOR_DRIVER and the floor, their ratios, and
    readbacks/dispatches per emitted loop iteration (steps per iteration in brackets)."""
    d = FLOOR_DRIVER
    lines = []
    for r in rows:
        floor = r["floors"].get(r.get("floor"), {"per_iteration": [], "unroll": []})
        lines.append([r["program"], fmt_time(r["jax_s"]), fmt_time(r[f"{d}_s"]),
                      f"{fmt_time(r['floor_s'])} ({r['floor']}"
                      f"{'' if floor['affinity'] else ', no affinity'})" if "floor" in r else "-",
                      fmt_ratio(r[f"{d}_ratio"]), fmt_ratio(r.get("floor_ratio")),
                      fmt_ratio(r.get("over_floor")),
                      ", ".join(f"{t['most']}" + (f" (>={t['fewest']})" if t["fewest"] != t["most"]
                                                  else "") for t in r["trips"]),
                      _loops(r["loops"]["per_iteration"], r["loops"]["unroll"]),
                      _loops(floor["per_iteration"], floor["unroll"])])
    table(f"\nFloor: each whilst loop a lax.scan of its trip count, compiled with whilst's "
          f"IREE flags ({d}; medians)",
          ["program", "JAX", f"whilst {d}", "floor", "whilst/JAX", "floor/JAX", "whilst/floor",
           "trips", "whilst loads/dispatches [k]", "floor loads/dispatches [k]"], lines)
    for r in rows:
        failed = {label: f["error"] for label, f in r["floors"].items() if "error" in f}
        for label, error in failed.items():
            print(f"{r['program']}: no floor {label}: {error}")


def _loops(per_iteration, unroll) -> str:
    """`2/23, 2/26 [64, 64]`: readbacks/dispatches per emitted iteration of each
    innermost loop; [k]: steps per emitted iteration of each source loop."""
    return (", ".join(f"{loads}/{dispatches}" for loads, dispatches in per_iteration)
            + f" [{', '.join(map(str, unroll))}]")


def plot(rows, drivers, out_dir):
    """ratios.png: IREE/JAX per program and driver, and floor/JAX; steps.png: time
    against steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4))
    xs = np.arange(len(rows))
    series = [(f"{d}_ratio", f"IREE {d}") for d in drivers]
    if any("floor_ratio" in r for r in rows):
        series.append(("floor_ratio", f"floor: lax.scan on IREE {FLOOR_DRIVER}"))
    width = 0.8 / len(series)
    for k, (key, label) in enumerate(series):
        ax.bar(xs + k * width, [r.get(key, np.nan) for r in rows], width, label=label)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="JAX CPU (goal)")
    ax.set_yscale("log")
    ax.set_xticks(xs + width * (len(series) - 1) / 2)
    ax.set_xticklabels([r["program"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel("IREE time / JAX time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "ratios.png"), dpi=120)
    plt.close(fig)

    lines = {}
    for r in rows:
        lines.setdefault(r["group"], []).append(r)
    lines = {g: rs for g, rs in lines.items() if len({r["steps"] for r in rs}) > 1}
    fig, ax = plt.subplots(figsize=(6, 4))
    for group, rs in lines.items():
        rs = sorted(rs, key=lambda r: r["steps"])
        steps = [r["steps"] for r in rs]
        for backend in ("jax", *drivers):
            ax.plot(steps, [r[f"{backend}_s"] for r in rs], marker="o",
                    label=f"{group} {'JAX CPU' if backend == 'jax' else 'IREE ' + backend}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps")
    ax.set_ylabel("median time (s)")
    ax.set_title("time against steps (slope 1 = linear)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "steps.png"), dpi=120)
    plt.close(fig)
    print(f"wrote {out_dir}/ratios.png, {out_dir}/steps.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    parser.add_argument("--plot", metavar="DIR", help="draw ratios.png and steps.png in DIR")
    parser.add_argument("--from-json", metavar="IN.json", help="redraw saved results, no runs")
    parser.add_argument("--unroll", metavar="K[,K...]",
                        help="compare unroll settings (if whilst.while_loop takes unroll=)")
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"comma-separated groups (default: {','.join(PROGRAMS)})")
    args = parser.parse_args()

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        print(machine())
        budget = 0.5 if args.quick else 6.0
        rows = []
        for options in loop_option_sets(args.unroll):
            for group in args.programs.split(","):
                for p in PROGRAMS[group](options, args.quick):
                    if options:
                        p.name += " " + ",".join(f"{k}={v}" for k, v in options.items())
                    print(f"running {p.name} ...", flush=True)
                    rows.append(dict(run_program(p, DRIVERS, budget), options=options))
        results = {"machine": machine(), "drivers": list(DRIVERS), "rows": rows}
        if args.json:
            write_json(args.json, results)
    print_results(results["rows"], results["drivers"])
    if args.plot:
        plot(results["rows"], results["drivers"], args.plot)


if __name__ == "__main__":
    main()
