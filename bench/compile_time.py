"""iree-compile time of the programs of bench/iree_vs_jax.py, and what it depends on
(issue 10).

Each program is exported and prepared once; then each flag variant (whilst's
first host-driven flag set, `whilst.lowering.flag_sets`, plus the variant's extra flags;
a later flag overrides an earlier one) is compiled `--rounds` times, variants
interleaved, as `whilst.compile(..., cache=False)` compiles (one iree-compile
process). Printed per program and variant: executables in the module (the
`hal.executable`s iree-compile generates code for, one by one), median wall
and CPU seconds of the compiles (CPU = the child's user + system time, less
disturbed by other jobs on a shared machine), and with `--run` the median
run time on `local-sync`, all variants timed interleaved in this process.

    .venv/bin/python bench/compile_time.py [--programs samples,sin,pushpop]
        [--rounds 3] [--variant 'const-eval=--iree-opt-const-eval=true' ...] [--run]
        [--json bench/results/compile_time.json]
"""
from __future__ import annotations

import argparse
import functools
import resource
import shlex
import statistics
import time

import jax
from iree.compiler import tools

import whilst
from _timing import fmt_time, machine, measure, table, write_json
from iree_vs_jax import PROGRAMS, _allclose
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare
from whilst.runtime import load
from whilst.runtime.seal import seal


def executables(text: str, flags: list[str]) -> int:
    """How many `hal.executable`s iree-compile generates code for."""
    from whilst.lowering._iree_ir import ir

    sources = tools.compile_str(text, extra_args=[*flags, "--compile-to=executable-sources"])
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(sources.decode())
        return sum(op.operation.name == "hal.executable" for op in module.body.operations)


def timed_compile(text: str, flags: list[str]) -> tuple[bytes, float, float]:
    """`(vmfb, wall seconds, CPU seconds)` of one iree-compile."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    data = tools.compile_str(text, extra_args=flags)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return data, wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def run_program(p, variants: dict[str, list[str]], rounds: int, run: bool) -> dict:
    text = prepare([whilst.export(p.fn, *p.args, name="main")])
    base = next(f for f in flag_sets(("llvm-cpu",)) if not has_loops_in_dispatch(f))
    flags = {name: [*base, *extra] for name, extra in variants.items()}
    row = {"program": p.name, "variants": {}}
    for name, f in flags.items():
        try:
            row["variants"][name] = {"executables": executables(text, f), "wall": [], "cpu": []}
        except tools.CompilerToolError:
            row["variants"][name] = {"failed": True}
    built = {}
    for _ in range(rounds):
        for name, f in flags.items():
            v = row["variants"][name]
            if v.get("failed"):
                continue
            built[name], wall, cpu = timed_compile(text, f)
            v["wall"].append(wall)
            v["cpu"].append(cpu)
    for v in row["variants"].values():
        if not v.get("failed"):
            v["wall_s"], v["cpu_s"] = statistics.median(v["wall"]), statistics.median(v["cpu"])
    if run:
        want = jax.block_until_ready(jax.jit(p.fn)(*p.args))
        calls = {}
        for name, data in built.items():
            calls[name] = functools.partial(load(seal(data)).main, *p.args)
            if not _allclose(calls[name](), want, p.rtol):
                raise AssertionError(f"{p.name}: IREE ({name}) result differs from JAX's")
        for name, timing in measure(calls, budget_s=3.0).items():
            row["variants"][name]["run_s"] = timing.median
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="samples",
                        help=f"comma-separated groups of {','.join(PROGRAMS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="extra iree-compile flags to compare with whilst's own")
    parser.add_argument("--run", action="store_true", help="also time the modules' runs")
    parser.add_argument("--json", metavar="OUT.json")
    args = parser.parse_args()

    variants = {"whilst": []}
    for v in args.variant:
        name, _, extra = v.partition("=")
        variants[name] = shlex.split(extra)
    print(machine())
    rows = []
    for group in args.programs.split(","):
        for p in PROGRAMS[group]({}, True):
            print(f"compiling {p.name} ...", flush=True)
            rows.append(run_program(p, variants, args.rounds, args.run))
    lines = []
    for r in rows:
        for name, v in r["variants"].items():
            if v.get("failed"):
                lines.append([r["program"], name, "iree-compile failed", "", "", ""])
                continue
            lines.append([r["program"], name, v["executables"], f"{v['wall_s']:.2f} s",
                          f"{v['cpu_s']:.2f} s", fmt_time(v.get("run_s"))])
    table(f"\niree-compile (medians of {args.rounds}; run: local-sync)",
          ["program", "flags", "executables", "wall", "CPU", "run"], lines)
    if args.json:
        write_json(args.json, {"machine": machine(), "variants": variants, "rows": rows})


if __name__ == "__main__":
    main()
