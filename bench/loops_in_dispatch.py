"""Loops in one dispatch against loops stepped from the host, on IREE llvm-cpu.

Per program, in this process: each outermost loop's work per iteration and op
count (`loop_work`), whether `_iree_loops_in_dispatch._worth_it`
takes it, and the median call time of the same prepared module compiled both ways,
IREE `local-sync`, with the ratio in-dispatch / host-driven. In dispatches:
`flag_sets`' LOOPS_IN_DISPATCH set, every loop that fits moved, taken or not;
host-driven: the first of the other flag sets that compiles, as `compile_module`
tries them. The rule `_worth_it` draws is meant to take the loops whose ratio is
below 1.

    EQX_ON_ERROR=nan .venv/bin/python bench/loops_in_dispatch.py
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("EQX_ON_ERROR", "nan")   # equinox's checks as NaN (exportable)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from iree.compiler import tools  # noqa: E402
from iree.compiler.passmanager import PassManager  # noqa: E402

import whilst  # noqa: E402
from _timing import fmt_ratio, fmt_time, measure, table  # noqa: E402
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare, source_for  # noqa: E402
from whilst.lowering._iree_ir import ir  # noqa: E402
from whilst.lowering._ir_walk import ops_where  # noqa: E402
from whilst.lowering._iree_loops_in_dispatch import (  # noqa: E402
    _enclosing_loops, _fits, _into_dispatch, _worth_it, loop_work)
from whilst.runtime.seal import seal  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clients import CASES as CLIENT_CASES  # noqa: E402

X64 = np.linspace(0.0, 1.0, 64, dtype=np.float32)
N = np.int32(10000)


def lax_sines(x, n):
    """`lax.while_loop` of x <- sin(x) 0.9 + 0.1 over 64 floats: one step per iteration."""
    return jax.lax.while_loop(lambda c: c[0] < n,
                              lambda c: (c[0] + 1, jnp.sin(c[1]) * 0.9 + 0.1), (0, x))[1]


def whilst_sines(x, n):
    """The same loop as whilst's: unrolled, several steps per iteration."""
    return whilst.lax.while_loop(lambda c: c[0] < n,
                                 lambda c: (c[0] + 1, jnp.sin(c[1]) * 0.9 + 0.1), (0, x))[1]


CASES = {
    "lax_sines_64": (lax_sines, (X64, N)),
    "whilst_sines_64": (whilst_sines, (X64, N)),
    "whilst_sines_4": (whilst_sines, (X64[:4], N)),
    **{name: CLIENT_CASES[name] for name in (
        "lv_solve_own_loops", "lv_solve_whilst_adjoint", "newton", "fixed_point", "bfgs",
        "decay_grad_whilst_adjoint", "lv_grad_whilst_adjoint", "fixed_point_grad")},
}


def every_loop_in_dispatch(text: str) -> tuple[str, list[str]]:
    """`text` with every outermost loop that fits in a dispatch moved there, and per
    loop "work/ops (taken)" or "(left)" as `_worth_it` judges it."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        PassManager.parse("builtin.module(inline, symbol-dce)").run(module.operation)
        notes = []
        for number, loop in enumerate(ops_where(module, lambda op: op.name == "stablehlo.while")):
            if _enclosing_loops(loop) or not _fits(loop):
                continue
            work, ops = loop_work(loop)
            notes.append(f"{work}/{ops} ({'taken' if _worth_it(loop) else 'left'})")
            _into_dispatch(loop, number)
        return module.operation.get_asm(enable_debug_info=False), notes


def main():
    sets = flag_sets(("llvm-cpu",), loops_in_dispatch=True)
    host = [f for f in sets if not has_loops_in_dispatch(f)]   # as compile_module tries them
    in_dispatch = next(f for f in sets if has_loops_in_dispatch(f))
    rows = []
    for name, (fn, args) in CASES.items():
        text = prepare([whilst.export(fn, *args)])
        moved, notes = every_loop_in_dispatch(text)
        want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
        calls = {}
        tries = [("host", source_for(text, f), f) for f in host] + [
            ("dispatch", moved, in_dispatch)]
        for label, source, flags in tries:
            if label in calls:
                continue
            try:
                module = whilst.runtime.load(seal(tools.compile_str(source, extra_args=flags)))
            except tools.CompilerToolError:
                continue
            got = jax.tree_util.tree_leaves(module.main(*args))
            assert all(np.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want)), name
            calls[label] = lambda module=module: module.main(*args)
        times = measure(calls)
        host_t, dispatch_t = (times[k].median if k in times else None
                              for k in ("host", "dispatch"))
        rows.append([name, ", ".join(notes) or "-", fmt_time(host_t), fmt_time(dispatch_t),
                     fmt_ratio(dispatch_t / host_t if host_t and dispatch_t else None)])
    table("Loops stepped from the host vs whole in one dispatch, IREE local-sync "
          "(work/ops: result elements and ops per iteration of each loop)",
          ["program", "work/ops", "host-driven", "in dispatch", "dispatch/host"], rows)


if __name__ == "__main__":
    main()
