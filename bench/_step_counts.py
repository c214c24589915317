"""Dispatches, command-buffer submissions and readbacks per iteration of a
module's outer loop (a solver's step loop), counted on one call on IREE
`local-sync`.

Dispatches are counted at run time by IREE's HAL profiler
(`iree-run-module --device_profiling_mode=queue-events,host-execution`, read with
`iree-profile statistics`): how often each dispatch function ran. Readbacks
(`stream.resource.load`) leave no trace there, and the profiler does not tell the
submissions of code outside the loops from those in them, so both come from the module's stream phase: each loop's own
loads and `stream.cmd.execute`s (its blocks, less those of the loops nested in it)
times the iterations it ran, counted from a dispatch only that loop holds (the most
any such dispatch ran, divided by its uses per iteration). The outer loop is the
outermost loop that ran most (a gradient's forward While, or its gradient
While); `per_outer_iteration` divides the work of the call's loops (for
dispatches, the call's count less those of its code outside every loop, which
runs once) by its iterations. An iteration is an emitted one: where whilst
unrolls a loop (a body without inner loops), k steps.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

_TOOLS = os.path.dirname(sys.executable)


def runtime_counts(vmfb: bytes, function: str, args) -> dict[str, int]:
    """`{dispatch function: runs}` of one call of `function` of the
    (unsealed) module `vmfb` with the numpy arrays `args`, on local-sync."""
    with tempfile.TemporaryDirectory() as tmp:
        module, profile = os.path.join(tmp, "m.vmfb"), os.path.join(tmp, "p.ireeprof")
        with open(module, "wb") as f:
            f.write(vmfb)
        inputs = []
        for k, arg in enumerate(args):
            path = os.path.join(tmp, f"in{k}.npy")
            np.save(path, np.asarray(arg))
            inputs.append(f"--input=@{path}")
        subprocess.run([os.path.join(_TOOLS, "iree-run-module"), f"--module={module}",
                        "--device=local-sync", f"--function={function}", *inputs,
                        "--device_profiling_mode=queue-events,host-execution",
                        f"--device_profiling_output={profile}"],
                       check=True, capture_output=True)
        rows = subprocess.run([os.path.join(_TOOLS, "iree-profile"), "statistics",
                               "--format=jsonl", profile],
                              check=True, capture_output=True, text=True).stdout
    dispatches = {}
    for line in rows.splitlines():
        row = json.loads(line)
        if row.get("function_name"):
            name = row["function_name"]
            dispatches[name] = dispatches.get(name, 0) + row["sample_count"]
    return dispatches


def _loop_regions(stream_text: str, function: str):
    """`[(loop or None, readbacks, {dispatch: uses}, outermost, submissions)]` of
    `function` in
    stream-phase text: one entry per loop (its own blocks) and one (None) for the
    blocks outside every loop."""
    from whilst.lowering._iree_ir import ir

    regions = []
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stream_text)
        func = next(op for op in module.body.operations
                    if op.operation.name == "util.func"
                    and ir.StringAttr(op.attributes["sym_name"]).value == function)
        blocks = list(func.regions[0].blocks)
        loops = sorted({(blocks.index(target), j) for j, block in enumerate(blocks)
                        for target in list(block.operations)[-1].operation.successors
                        if blocks.index(target) <= j})
        inside = lambda inner, outer: outer[0] <= inner[0] and inner[1] <= outer[1]
        for loop in [None, *loops]:
            span = range(len(blocks)) if loop is None else range(loop[0], loop[1] + 1)
            nested = [other for other in loops if other != loop
                      and (loop is None or inside(other, loop))]
            own = [blocks[k] for k in span if not any(o[0] <= k <= o[1] for o in nested)]
            counts = {"readbacks": 0, "dispatches": {}, "submissions": 0}

            def visit(op, counts=counts):
                name = op.operation.name
                if name == "stream.resource.load":
                    counts["readbacks"] += 1
                elif name == "stream.cmd.execute":
                    counts["submissions"] += 1
                elif name == "stream.cmd.dispatch":
                    for entry in ir.ArrayAttr(op.operation.attributes["entry_points"]):
                        leaf = str(entry).rsplit("::@", 1)[-1]
                        counts["dispatches"][leaf] = counts["dispatches"].get(leaf, 0) + 1
                return ir.WalkResult.ADVANCE

            for block in own:
                for op in block.operations:
                    op.operation.walk(visit)
            outermost = loop is not None and not any(
                other != loop and inside(loop, other) for other in loops)
            regions.append((loop, counts["readbacks"], counts["dispatches"], outermost,
                            counts["submissions"]))
    return regions


def per_outer_iteration(stream_text: str, function: str,
                        dispatch_runs: dict[str, int]) -> dict[str, float | None]:
    """Dispatches, submissions and readbacks of one call's loops (`dispatch_runs`
    from `runtime_counts`) per iteration of the outer loop, and that loop's
    iterations ("iterations"); submissions and readbacks None where a loop holding
    some has no dispatch of its own to count its iterations by. All None when the
    function has no loop."""
    regions = _loop_regions(stream_text, function)
    owners = {}
    for k, (_, _, dispatches, _, _) in enumerate(regions):
        for name in dispatches:
            owners.setdefault(name, set()).add(k)
    runs = []
    for k, (loop, _, dispatches, _, _) in enumerate(regions):
        counted = [dispatch_runs.get(name, 0) / uses for name, uses in dispatches.items()
                   if owners[name] == {k}]
        runs.append(1 if loop is None else max(counted, default=None))
    outer = [r for r, (_, _, _, outermost, _) in zip(runs, regions) if outermost and r]
    if not outer:
        return dict.fromkeys(("iterations", "dispatches", "submissions", "readbacks"))
    iterations = max(outer)

    def per_iteration(position):   # a region entry's static count, times its runs
        total = 0.0
        for r, region in zip(runs[1:], regions[1:]):
            if region[position] and r is None:
                return None
            total += region[position] * (r or 0)
        return total / iterations

    _, _, once, _, _ = regions[0]
    return {"iterations": iterations,
            "dispatches": (sum(dispatch_runs.values()) - sum(once.values())) / iterations,
            "submissions": per_iteration(4), "readbacks": per_iteration(1)}
