"""IREE's aggressive dispatch fusion against its default fusion, on the programs of
bench/iree_vs_jax.py (issue 10).

Each program is exported and prepared once, compiled by iree-compile with each
fusion setting (`whilst.lowering.compile_flags(..., aggressive_fusion=...)`;
a setting iree-compile rejects is reported and left out), checked against JAX,
and then only execution is timed: JAX CPU and both modules on `local-sync`,
interleaved in this process, `--rounds` times. Printed per program: dispatches
per iteration of each emitted loop (stream IR, forward and gradient Whiles), the
median of the rounds' medians and their range.

    .venv/bin/python bench/fusion_ab.py [--programs sin,pushpop,tanh,samples]
        [--rounds 5] [--budget 3] [--json bench/results/fusion_ab.json]
"""
from __future__ import annotations

import argparse
import functools
import statistics

import jax
from iree.compiler import tools

import whilst
from _timing import blocking, fmt_time, machine, measure, table, write_json
from iree_vs_jax import PROGRAMS, _allclose
from whilst.lowering import compile_flags, loop_counts, prepare
from whilst.runtime import load
from whilst.runtime.seal import seal

SETTINGS = {"default": False, "aggressive": True}


def compile_settings(text: str) -> dict:
    """`{setting: (vmfb bytes, [dispatches per loop iteration]) or error line}`."""
    compiled = {}
    for setting, aggressive in SETTINGS.items():
        flags = compile_flags(("llvm-cpu",), aggressive_fusion=aggressive)
        try:
            data = tools.compile_str(text, extra_args=flags)
        except tools.CompilerToolError as e:
            compiled[setting] = next((line.strip() for line in str(e).splitlines()
                                      if "error:" in line), "iree-compile failed")[:160]
            continue
        stream = tools.compile_str(text, extra_args=[*flags, "--compile-to=stream"]).decode()
        compiled[setting] = (data, [dispatches for _, dispatches in loop_counts(stream)])
    return compiled


def run_program(p, rounds: int, budget_s: float) -> dict:
    text = prepare([whilst.export(p.fn, *p.args, name="main")])
    compiled = compile_settings(text)
    jitted = jax.jit(p.fn).lower(*p.args).compile()
    want = jax.block_until_ready(jitted(*p.args))
    calls = {"jax": blocking(jitted, *p.args)}
    row = {"program": p.name, "dispatches": {}, "failed": {}}
    for setting, result in compiled.items():
        if isinstance(result, str):
            row["failed"][setting] = result
            continue
        data, row["dispatches"][setting] = result
        call = functools.partial(load(seal(data)).main, *p.args)
        if not _allclose(call(), want, p.rtol):
            raise AssertionError(f"{p.name}: IREE ({setting} fusion) result differs from JAX's")
        calls[setting] = call
    medians = {name: [] for name in calls}
    for _ in range(rounds):
        for name, timing in measure(calls, budget_s=budget_s).items():
            medians[name].append(timing.median)
    for name, values in medians.items():
        row[name] = {"median": statistics.median(values), "min": min(values),
                     "max": max(values)}
    return row


def print_rows(rows):
    lines = []
    for r in rows:
        line = [r["program"]]
        for name in ("jax", *SETTINGS):
            t = r.get(name)
            line.append("-" if t is None else
                        f"{fmt_time(t['median'])} ({fmt_time(t['min'])}-{fmt_time(t['max'])})")
        for setting in SETTINGS:
            line.append(r["failed"].get(setting, "fails") if setting not in r["dispatches"]
                        else "/".join(map(str, r["dispatches"][setting])) or "-")
        speedup = ("-" if "aggressive" not in r or "default" not in r else
                   f"{r['default']['median'] / r['aggressive']['median']:.2f}x")
        lines.append(line + [speedup])
    table("\nIREE local-sync, default vs aggressive fusion (median of round medians, "
          "range over rounds; dispatches per iteration of each loop)",
          ["program", "JAX", "default", "aggressive", "disp. default", "disp. aggressive",
           "default/aggressive"], lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per round")
    parser.add_argument("--json", metavar="OUT.json")
    args = parser.parse_args()
    print(machine())
    rows = []
    for group in args.programs.split(","):
        for p in PROGRAMS[group]({}, False):
            print(f"running {p.name} ...", flush=True)
            rows.append(run_program(p, args.rounds, args.budget))
    print_rows(rows)
    if args.json:
        write_json(args.json, {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
