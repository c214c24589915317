"""whilst's programs on a GPU: IREE `cuda` and `vulkan` checked against the CPU result
of the same module, and timed against JAX on the same GPU.

Two steps, since a GPU machine may have no IREE compiler (only `iree-base-runtime`):

    python bench/gpu_check.py prepare DIR [--quick]   # where whilst[compile] is installed
    python bench/gpu_check.py run DIR [--quick]       # on the GPU machine

`prepare` compiles each program into one module per GPU target, for llvm-cpu and
cuda and for llvm-cpu and vulkan-spirv (a module with a vulkan-spirv target is compiled
without aggressive fusion for all its targets), runs each with `local-sync` and saves
the modules, the inputs and the CPU outputs in DIR.
It also compiles each program's floor for llvm-cpu and cuda: the same program
with each whilst loop replaced by a `lax.scan` of exactly the steps it takes on these
inputs (`fixed_length.py`), stepped from the host, what IREE 3.13 makes of the
framework's own exact-length program; it is kept where its CPU result matches
(without the entry's `stream.affinity` where only that form does, as `iree_vs_jax.py`
does).
`run` loads each module with every GPU driver that has a device, compares the outputs
with the CPU outputs of the same module, checks JAX's GPU result against them too when
JAX sees a GPU, times all of them and the floor on cuda interleaved in one process
(`_timing.measure`), times small calls again in `iree-benchmark-module` (what
`whilst.runtime` adds to a call), and writes DIR/gpu.json and DIR/gpu.png; `merge`
joins the results of runs made back to back (a driver per process). It exits non-zero
if any result differs. With no GPU driver it says so and exits 0, so the pair runs
anywhere.

Programs: those of `iree_vs_jax.py` (sin, pushpop, tanh and each sample's
`bench_program`), the README's quickstart gradient, and two large batches where the
GPU has work to do: the LSTM training step at 4096 sequences and the ODE fit's loss and
gradient summed over 4096 initial conditions (each solved by its own adaptive loop).
IREE 3.13 knows no Hopper target (`--iree-cuda-target=sm_90` fails with "missing GPU
target"), so cuda modules carry sm_80 PTX, which the driver compiles for the device
when the module loads.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import fmt_ratio, fmt_time, measure, table, write_json  # noqa: E402

GPU_TARGETS = {"cuda": "cuda", "vulkan-spirv": "vulkan"}  # compile target -> driver
CUDA_ARCH = "sm_80"
LARGE_BATCH = 4096
# Calls on cuda shorter than this are also timed in iree-benchmark-module, to show
# what `whilst.runtime` adds to a small call.
SMALL_CALL_S = 0.02


def programs(quick: bool) -> dict:
    """name -> (fn, args, rtol): the programs to check (needs JAX and whilst)."""
    import jax
    import jax.numpy as jnp
    import whilst
    from iree_vs_jax import PROGRAMS

    found = {p.name: (p.fn, p.args, p.rtol)
             for group in PROGRAMS.values() for p in group({}, quick)}

    def fixed_point(W, x):
        def cond(i, x, dx):
            return dx > 1e-4

        def body(i, x, dx):
            y = jnp.tanh(W @ x)
            return i + 1, y, jnp.max(jnp.abs(y - x))
        _, x, _ = whilst.while_loop(cond, body, [0, x, jnp.inf], maximum_iterations=100)
        return jnp.sum(x ** 2)

    W = np.eye(4, dtype=np.float32) * 0.5
    found["quickstart: grad"] = (jax.grad(fixed_point), (W, np.ones(4, np.float32)), 1e-4)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "samples"))
    import lstm
    import ode_fit
    batch = 256 if quick else LARGE_BATCH
    fn, args = lstm.bench_program(batch_size=batch)
    found[f"lstm batch {batch}"] = (fn, args, 1e-3)

    fn, (log_params, y0, t_obs, y_obs) = ode_fit.bench_program()
    y0s = y0 * np.random.default_rng(0).uniform(0.8, 1.25, (batch, 1)).astype(np.float32)

    def batch_loss(log_params, y0s, t_obs, y_obs):
        """sum of the ODE fit's loss over initial conditions."""
        return jnp.sum(jax.vmap(ode_fit.loss, (None, 0, None, None))(log_params, y0s, t_obs,
                                                                     y_obs))
    found[f"ode fit batch {batch}"] = (jax.value_and_grad(batch_loss),
                                       (log_params, y0s, t_obs, y_obs), 1e-3)
    return found


def prepare(out_dir: str, quick: bool, only: str | None = None,
            drivers: list[str] | None = None) -> None:
    """Compile every program (those whose names contain one of the comma-separated
    `only` words) into one module per GPU driver (of `drivers`, default all), each
    for the CPU and that driver's target; save modules, inputs, CPU outputs."""
    import jax
    import whilst

    if os.path.exists(out_dir) and os.listdir(out_dir):
        sys.exit(f"{out_dir} is not empty: give prepare a new folder (nothing was written)")
    os.makedirs(out_dir, exist_ok=True)
    manifest = {}
    chosen = {name: p for name, p in programs(quick).items()
              if only is None or any(word in name for word in only.split(","))}
    targets = {t: d for t, d in GPU_TARGETS.items() if drivers is None or d in drivers}
    for k, (name, (fn, args, rtol)) in enumerate(chosen.items()):
        stem = f"p{k}"
        np.savez(os.path.join(out_dir, stem + "_in.npz"), *map(np.asarray, args))
        manifest[name] = {"stem": stem, "rtol": rtol}
        for target, driver in targets.items():
            # One module per GPU target: a module for vulkan-spirv is compiled without
            # aggressive fusion, for every target in it (README, "Compiling").
            print(f"compiling {name} for {target} ...", flush=True)
            compiled = whilst.compile(fn, *args, target=["llvm-cpu", target],
                                      gpu_arch={target: CUDA_ARCH} if target == "cuda"
                                      else None, cache=False)
            with open(os.path.join(out_dir, f"{stem}_{driver}.vmfb"), "wb") as f:
                f.write(compiled.data)
            outputs = jax.tree_util.tree_leaves(compiled.load("local-sync").main(*args))
            np.savez(os.path.join(out_dir, f"{stem}_{driver}_cpu.npz"),
                     *map(np.asarray, outputs))
            if target != "cuda":
                continue
            floor = _floor(fn, args, outputs, rtol)
            if isinstance(floor, dict):
                with open(os.path.join(out_dir, stem + "_floor.vmfb"), "wb") as f:
                    f.write(floor.pop("data"))
                manifest[name]["floor"] = floor
            else:
                print(f"  no floor: {floor}")
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(f"wrote {len(manifest)} programs to {out_dir}")


def _floor(fn, args, want, rtol):
    """The exact-length twin of `fn` compiled for llvm-cpu and cuda, shaped as GPU
    exports are, its scans stepped from the host (IREE's own form of the program, not
    whilst's loops in one dispatch): {"data", "unroll", "affinity"}, or why there is
    none (a string)."""
    import whilst
    from fixed_length import fixed_length, trip_counts
    from iree_vs_jax import without_affinity
    from whilst._compile import compile_stage, prepare_stage
    from whilst.ir._gpu_export import exporting_for_gpu

    targets = ("llvm-cpu", "cuda")
    try:
        with exporting_for_gpu(True):  # the steps per iteration a GPU export takes
            trips = trip_counts(fn, *args)
        prepared = prepare_stage([whilst.export(fixed_length(fn, trips), *args,
                                                targets=targets)], targets)
    except (ValueError, whilst.CompileError) as e:
        return str(e).splitlines()[0]
    for affinity, text in ((True, prepared), (False, without_affinity(prepared))):
        try:
            compiled = compile_stage(text, ["main"], targets, gpu_arch={"cuda": CUDA_ARCH},
                                     cache=False, loops_in_dispatch=False)
        except whilst.CompileError as e:
            return str(e).splitlines()[0]
        got = [np.asarray(g) for g in _leaves(compiled.load("local-sync").main(*args))]
        if _max_error(got, [np.asarray(w) for w in want]) <= rtol:
            return {"data": compiled.data, "unroll": [t.unroll for t in trips],
                    "affinity": affinity}
    return "the CPU result of the floor differs from the program's"


def _loaded(path):
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _max_error(got, want) -> float:
    """Largest |got - want| relative to max(1, |want|max) over all leaves (inf if the
    structure or a shape differs)."""
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            return float("inf")
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max(initial=0.0)) / scale)
    return worst


def _gpu_drivers(wanted: list[str] | None = None) -> list[str]:
    """The GPU drivers (of `wanted`, default all) that find a device here."""
    import iree.runtime as rt
    present = []
    for driver in wanted or GPU_TARGETS.values():
        try:
            rt.get_device(driver)
            present.append(driver)
        except Exception as e:  # noqa: BLE001 - any failure means: no such device here
            print(f"no {driver} device: {e}")
    return present


def _jax_gpu(quick: bool):
    """The programs as JAX functions on the GPU, or None where JAX sees no GPU."""
    try:
        import jax
        if not jax.devices("gpu"):
            return None
    except Exception as e:  # noqa: BLE001 - no JAX, or no GPU backend
        print(f"no JAX GPU: {str(e).splitlines()[0][:100]}")
        return None
    return programs(quick)


def run(out_dir: str, quick: bool, budget_s: float, drivers: list[str] | None = None,
        min_repeats: int = 3, only: str | None = None, jax_column: bool = True,
        name: str = "gpu") -> int:
    """Check and time every prepared program (those whose names contain one of the
    comma-separated `only` words) on each GPU driver (of `drivers`, default all) at
    least `min_repeats` times, and JAX on the GPU (`jax_column`), into DIR/NAME.json
    (rewritten after each program, so that a crash keeps the programs before it) and
    DIR/NAME.png; 1 if a result differs."""
    import whilst.runtime

    drivers = _gpu_drivers(drivers)
    if not drivers:
        print("no GPU driver has a device here: nothing to check")
        return 0
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    jax_programs = _jax_gpu(quick) if jax_column else None
    rows, failures = [], []
    results = {"drivers": drivers, "jax": jax_programs is not None, "rows": rows,
               "failures": failures, "machine": _gpu_machine()}
    for program, entry in manifest.items():
        if only is not None and not any(word in program for word in only.split(",")):
            continue
        print(f"{program} ...", flush=True)
        failed_before = len(failures)
        stem, rtol = entry["stem"], entry["rtol"]
        args = _loaded(os.path.join(out_dir, stem + "_in.npz"))
        calls, row = {}, {"program": program}
        # The CPU result of each driver's module; floor and JAX are checked against cuda's.
        want = {d: _loaded(path) for d in drivers
                if os.path.exists(path := os.path.join(out_dir, f"{stem}_{d}_cpu.npz"))}
        reference = want.get("cuda") or next(iter(want.values()), [])
        for driver in drivers:
            try:
                with open(os.path.join(out_dir, f"{stem}_{driver}.vmfb"), "rb") as f:
                    fn = whilst.runtime.load(f.read(), driver=driver).main
                error = _max_error(_leaves(fn(*args)), want[driver])
            except Exception as e:  # noqa: BLE001 - report every failure, go on
                failures.append(f"{program} on {driver}: {type(e).__name__}: {str(e)[:300]}")
                continue
            row[f"{driver}_error"] = error
            if error > rtol:
                failures.append(f"{program} on {driver}: differs from the CPU by {error:.3g}")
            calls[driver] = _blocking_host(functools.partial(fn, *args))
        if "floor" in entry and "cuda" in drivers:
            with open(os.path.join(out_dir, stem + "_floor.vmfb"), "rb") as f:
                floor = whilst.runtime.load(f.read(), driver="cuda").main
            row["floor_error"] = _max_error(_leaves(floor(*args)), reference)
            if row["floor_error"] <= rtol:  # IREE's own program, not whilst's: not a failure
                calls["floor"] = _blocking_host(functools.partial(floor, *args))
        if jax_programs is not None and program in jax_programs:
            import jax
            jitted = jax.jit(jax_programs[program][0])
            device_args = jax.device_put(args, jax.devices("gpu")[0])
            error = _max_error(_leaves(jitted(*device_args)), reference)
            row["jax_error"] = error
            if error > rtol:
                failures.append(f"{program} on JAX GPU: differs from IREE's CPU result by "
                                f"{error:.3g}")
            calls["jax"] = lambda jitted=jitted, a=device_args: jax.block_until_ready(
                jitted(*a))
        for key, timing in measure(calls, warmup=1, budget_s=budget_s,
                                   min_repeats=min_repeats).items():
            row[f"{key}_s"] = timing.median
            row[f"{key}_spread"] = timing.spread
        if row.get("cuda_s", 1.0) < SMALL_CALL_S:
            row["cuda_module_s"] = _module_time(os.path.join(out_dir, stem + "_cuda.vmfb"), args)
        rows.append(row)
        write_json(os.path.join(out_dir, name + ".json"), results)
        print(f"{program}: " + ", ".join(f"{k} {fmt_time(row[k + '_s'])}" for k in calls)
              + "".join(f"\n  FAILED {f}" for f in failures[failed_before:]), flush=True)
    print_results(results)
    plot(results, os.path.join(out_dir, name + ".png"))
    return 1 if failures else 0


def merge(out_dir: str, parts: list[str]) -> int:
    """One DIR/gpu.json and gpu.png from the results of `run`s of the same programs
    back to back (e.g. cuda with JAX, then vulkan in a process of its own): each
    program's row joins the keys of all parts; 1 if any part had a failure."""
    merged = {"drivers": [], "jax": False, "rows": [], "failures": [], "machine": {}}
    by_program = {}
    for part in parts:
        with open(part) as f:
            results = json.load(f)
        merged["drivers"] += [d for d in results["drivers"] if d not in merged["drivers"]]
        merged["jax"] |= results["jax"]
        merged["failures"] += results["failures"]
        merged["machine"].update(results["machine"])
        for row in results["rows"]:
            if row["program"] not in by_program:
                by_program[row["program"]] = {}
                merged["rows"].append(by_program[row["program"]])
            by_program[row["program"]].update(row)
    write_json(os.path.join(out_dir, "gpu.json"), merged)
    print_results(merged)
    plot(merged, os.path.join(out_dir, "gpu.png"))
    return 1 if merged["failures"] else 0


def _module_time(path: str, args) -> float | None:
    """Seconds per call of `main` on cuda in `iree-benchmark-module` (no Python),
    with whilst's device settings (`whilst.runtime._devices.tool_flags`)."""
    from gpu_loop_costs import time_module_on
    from whilst.runtime._devices import tool_flags

    return time_module_on(path, "cuda", tool_flags("cuda"), args, repetitions=30)


def _leaves(outputs) -> list:
    """The arrays of nested tuples and lists of outputs, in order."""
    if isinstance(outputs, (tuple, list)):
        return [leaf for item in outputs for leaf in _leaves(item)]
    return [outputs]


def _blocking_host(call):
    """IREE results are device arrays; reading them to the host waits for the GPU."""
    return lambda: [np.asarray(x) for x in _leaves(call())]


def _gpu_machine() -> dict:
    import importlib.metadata
    info = {"iree": importlib.metadata.version("iree-base-runtime"), "cuda_arch": CUDA_ARCH}
    try:
        import jax
        info["jax"] = jax.__version__
        info["gpu"] = str(jax.devices("gpu")[0].device_kind)
    except Exception:  # noqa: BLE001 - informative only
        pass
    return info


def print_results(results) -> None:
    drivers, rows = results["drivers"], results["rows"]
    header = ["program"] + [f"IREE {d}" for d in drivers] + ["JAX GPU"]
    header += [f"{d}/JAX" for d in drivers] + ["cuda floor", "floor/JAX", "cuda/floor"]
    both = "cuda" in drivers and "vulkan" in drivers
    header += ["vulkan/cuda"] if both else []
    header += ["cuda call/module"] if "cuda" in drivers else []
    header += [f"{d} error" for d in drivers]
    lines = []
    for r in rows:
        jax_s, floor_s, cuda_s = r.get("jax_s"), r.get("floor_s"), r.get("cuda_s")
        line = [r["program"]] + [fmt_time(r.get(f"{d}_s")) for d in drivers]
        line.append(fmt_time(jax_s))
        line += [fmt_ratio(r[f"{d}_s"] / jax_s) if jax_s and f"{d}_s" in r else "-"
                 for d in drivers]
        line += [fmt_time(floor_s), fmt_ratio(floor_s / jax_s) if floor_s and jax_s else "-",
                 fmt_ratio(cuda_s / floor_s) if floor_s and cuda_s else "-"]
        if both:
            line.append(fmt_ratio(r["vulkan_s"] / cuda_s)
                        if "vulkan_s" in r and cuda_s else "-")
        if "cuda" in drivers:
            line.append(fmt_ratio(cuda_s / r["cuda_module_s"])
                        if r.get("cuda_module_s") and cuda_s else "-")
        line += [f"{r[f'{d}_error']:.1e}" if f"{d}_error" in r else
                 "failed" if any(f.startswith(f"{r['program']} on {d}:")
                                 for f in results["failures"]) else "-" for d in drivers]
        lines.append(line)
    table(f"\nIREE on the GPU against JAX on the GPU ({results['machine']}; medians; error "
          "= largest difference from the CPU result of the same module)", header, lines)
    print("failures: " + ("; ".join(results["failures"]) or "none"))


def plot(results, path: str) -> None:
    """Bars of IREE time / JAX GPU time per program and driver (log scale)."""
    rows = [r for r in results["rows"] if r.get("jax_s")]
    if not rows:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [(d, f"IREE {d}") for d in results["drivers"]]
    if any("floor_s" in r for r in rows):
        series.append(("floor", "exact-length scan on IREE cuda (floor)"))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    width = 0.8 / len(series)
    xs = np.arange(len(rows))
    for k, (key, label) in enumerate(series):
        ax.bar(xs + k * width, [r[f"{key}_s"] / r["jax_s"] if f"{key}_s" in r else np.nan
                                for r in rows], width, label=label)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="JAX GPU")
    ax.set_yscale("log")
    ax.set_xticks(xs + width * (len(series) - 1) / 2)
    ax.set_xticklabels([r["program"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("IREE time / JAX GPU time")
    ax.set_title(results["machine"].get("gpu", "GPU"))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["prepare", "run", "merge"])
    parser.add_argument("dir", help="where modules, inputs and CPU outputs are kept")
    parser.add_argument("parts", nargs="*", help="merge: the JSON files of the runs")
    parser.add_argument("--quick", action="store_true", help="smaller programs and batches")
    parser.add_argument("--programs", metavar="WORD[,WORD...]",
                        help="prepare or run only the programs whose names contain one of "
                             "these")
    parser.add_argument("--no-jax", action="store_true",
                        help="run: leave out the JAX GPU column")
    parser.add_argument("--name", default="gpu",
                        help="run: write DIR/NAME.json and DIR/NAME.png (default gpu)")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds of timed calls per program (default 2)")
    parser.add_argument("--drivers", metavar="DRIVER[,DRIVER...]",
                        help="GPU drivers to compile for (prepare) or check (run) (default: "
                             f"{','.join(GPU_TARGETS.values())})")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed calls per program and driver, at least (default 3)")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.dir, args.quick, args.programs,
                args.drivers.split(",") if args.drivers else None)
        return 0
    if args.step == "merge":
        return merge(args.dir, args.parts)
    return run(args.dir, args.quick, args.budget,
               args.drivers.split(",") if args.drivers else None, args.repeats, args.programs,
               not args.no_jax, args.name)


if __name__ == "__main__":
    sys.exit(main())
