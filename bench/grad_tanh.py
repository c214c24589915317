"""Reverse mode through `x <- tanh(W x)` (issue 3): time and memory of the gradient
with respect to a closed-over W, D=256.

Part 1: n=2048 actual steps, maximum_iterations=4096. whilst on JAX CPU and on
IREE (local-sync, local-task) with a budget that stores every step
(`gradient_memory=64 MiB`), and on JAX and IREE local-sync with the default
budget (1 MiB: chunks of 479 steps stored, recomputed from checkpoints at their
starts), next to (a) `lax.scan` of
exactly n steps and (b) equinox's `while_loop(kind="checkpointed",
max_steps=4096)`, all in this process. Goal: whilst within 1.1x of the exact
scan, faster than equinox.

Part 2: n=10 with maximum_iterations 256, 4096, 65536 and the default budget.
Goal: time and memory stay flat (the `jax-bounded-while` package: 36 ms, 754 ms,
5.2 s).

Memory columns: `residuals` is what whilst stores per loop (whilst.residual_report;
for the scan, its stacked residuals); `XLA temp` is the compiled JAX program's
temporary buffers (memory_analysis); `peak RSS` is how far one call raises the
process's peak resident memory on its first call after compiling and loading
(0 B: served from memory the process already held; later calls reuse
the allocators' cached buffers).

    .venv/bin/python bench/grad_tanh.py [--quick] [--part 1|2] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import functools

import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
from _timing import (blocking, fmt_bytes, fmt_ratio, fmt_time, jax_temp_bytes, machine,
                     measure, peak_rss_delta, table, write_json)

D = 256


def inputs(seed: int = 0):
    """W with stable non-zero fixed points (1.5 I plus a small random part), so the
    gradient after thousands of steps neither vanishes nor explodes; x0 ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    W = 1.5 * np.eye(D) + 0.1 * rng.standard_normal((D, D)) / np.sqrt(D)
    return W.astype(np.float32), rng.standard_normal(D).astype(np.float32)


def whilst_loss(W, x0, n, *, maximum_iterations, **loop_options):
    """sum(x_n ** 2) after n steps of x <- tanh(W x), as one whilst loop (n is data)."""
    def cond(i, x):
        return i < n

    def body(i, x):
        return i + 1, jnp.tanh(W @ x)

    _, x = whilst.while_loop(cond, body, [jnp.int32(0), x0],
                             maximum_iterations=maximum_iterations, name="tanh",
                             **loop_options)
    return jnp.sum(x ** 2)


def scan_loss(W, x0, *, steps):
    """The same loss as a `lax.scan` of exactly `steps` steps (steps is static)."""
    x, _ = lax.scan(lambda x, _: (jnp.tanh(W @ x), None), x0, None, length=steps)
    return jnp.sum(x ** 2)


def equinox_loss(W, x0, n, *, max_steps):
    """The same loss with equinox's checkpointed while loop (default checkpoints)."""
    _, x = eqxi.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jnp.tanh(W @ c[1])),
                           (jnp.int32(0), x0), max_steps=max_steps, kind="checkpointed")
    return jnp.sum(x ** 2)


def _scan_residual_bytes(steps: int) -> int:
    """Bytes lax.scan stacks for the gradient: the residuals `jax.vjp` keeps whose
    leading dim is the step count (one row per step)."""
    W, x0 = inputs()
    _, scan_vjp = jax.vjp(functools.partial(scan_loss, steps=steps), W, x0)
    return sum(r.nbytes for r in jax.tree_util.tree_leaves(scan_vjp)
               if r.ndim and r.shape[0] == steps)


class Variant:
    """One way of computing grad_W: a zero-argument call and its memory figures."""

    def __init__(self, name, call, residual_bytes=None, temp_bytes=None, cold_rss=None):
        self.name, self.call = name, call
        self.residual_bytes, self.temp_bytes, self.cold_rss = residual_bytes, temp_bytes, cold_rss


def jax_variant(name, loss, args, residual_bytes=None):
    """grad_W compiled ahead of time by XLA, so the first (cold) call compiles nothing."""
    compiled = jax.jit(jax.grad(loss)).lower(*args).compile()
    call = blocking(compiled, *args)
    return Variant(name, call, residual_bytes, jax_temp_bytes(compiled),
                   cold_rss=peak_rss_delta(call))


def iree_variants(loss, args, drivers, residual_bytes, suffix=""):
    """whilst compiled once for IREE llvm-cpu, loaded once per driver."""
    compiled = whilst.compile(jax.grad(loss), *args)
    out = []
    for driver in drivers:
        module = compiled.load(driver)
        call = functools.partial(module.main, *args)
        out.append(Variant(f"whilst IREE {driver}{suffix}", call, residual_bytes,
                           cold_rss=peak_rss_delta(call)))
    return out


def run_variants(variants, reference, budget_s):
    """Time the variants interleaved; check every gradient against `reference`'s."""
    want = np.asarray(reference.call())
    for v in variants:
        got = np.asarray(v.call())
        if not np.allclose(got, want, rtol=2e-3, atol=2e-4 * np.abs(want).max()):
            raise AssertionError(f"{v.name}: gradient differs from {reference.name}'s "
                                 f"(max abs diff {np.abs(got - want).max():.3g})")
    timings = measure({v.name: v.call for v in variants}, budget_s=budget_s)
    rows = []
    for v in variants:
        rows.append(dict(name=v.name, median_s=timings[v.name].median,
                         spread=timings[v.name].spread, residual_bytes=v.residual_bytes,
                         xla_temp_bytes=v.temp_bytes, peak_rss_bytes=v.cold_rss))
    return rows


STORE_ALL = 64 << 20  # gradient_memory that holds every step of part 1


def part1(n, max_iter, drivers, budget_s):
    W, x0 = inputs()
    args = (W, x0, np.int32(n))
    loss = functools.partial(whilst_loss, maximum_iterations=max_iter,
                             gradient_memory=STORE_ALL)
    default = functools.partial(whilst_loss, maximum_iterations=max_iter)
    residuals = whilst.residual_report(loss, *args).bytes_per_iteration * max_iter
    scan = jax_variant(f"lax.scan, exactly {n} steps", functools.partial(scan_loss, steps=n),
                       (W, x0), _scan_residual_bytes(n))
    default_residuals = whilst.residual_report(default, *args).total_bytes
    variants = [
        jax_variant("whilst JAX", loss, args, residuals),
        jax_variant("whilst JAX, default budget", default, args, default_residuals),
        scan,
        jax_variant("equinox checkpointed JAX",
                    functools.partial(equinox_loss, max_steps=max_iter), args),
        *iree_variants(loss, args, drivers, residuals),
        *iree_variants(default, args, drivers[:1], default_residuals, ", default budget"),
    ]
    rows = run_variants(variants, scan, budget_s)
    base = next(r["median_s"] for r in rows if r["name"] == scan.name)
    for r in rows:
        r["vs_scan"] = r["median_s"] / base
    table(f"\ngrad_W of x <- tanh(W x), D={D}, n={n}, maximum_iterations={max_iter}",
          ["variant", "median", "IQR", "vs scan", "residuals", "XLA temp", "peak RSS"],
          [[r["name"], fmt_time(r["median_s"]), f"{r['spread']:.0%}", fmt_ratio(r["vs_scan"]),
            fmt_bytes(r["residual_bytes"]), fmt_bytes(r["xla_temp_bytes"]),
            fmt_bytes(r["peak_rss_bytes"])] for r in rows])
    return rows


def part2(n, max_iters, budget_s):
    """Every variant at every bound, timed interleaved in one `measure`, so that the
    ratios to the first bound do not drift with the machine between bounds."""
    W, x0 = inputs()
    args = (W, x0, np.int32(n))
    scan = jax_variant(f"lax.scan, exactly {n} steps", functools.partial(scan_loss, steps=n),
                       (W, x0), _scan_residual_bytes(n))
    variants, bounds = [scan], {scan.name: (scan.name, None)}
    for m in max_iters:
        loss = functools.partial(whilst_loss, maximum_iterations=m)
        residuals = whilst.residual_report(loss, *args).total_bytes
        for v in [jax_variant("whilst JAX", loss, args, residuals),
                  *iree_variants(loss, args, ["local-sync"], residuals),
                  jax_variant("equinox checkpointed JAX",
                              functools.partial(equinox_loss, max_steps=m), args)]:
            bounds[f"{v.name}, max {m}"] = (v.name, m)
            v.name = f"{v.name}, max {m}"
            variants.append(v)
    rows = [dict(r, name=bounds[r["name"]][0], maximum_iterations=bounds[r["name"]][1])
            for r in run_variants(variants, scan, budget_s)]
    first = {r["name"]: r["median_s"] for r in rows
             if r["maximum_iterations"] in (max_iters[0], None)}
    for r in rows:
        r["vs_first_max"] = r["median_s"] / first[r["name"]]
    table(f"\ngrad_W of x <- tanh(W x), D={D}, n={n}: time against maximum_iterations "
          f"(flat = 1.00x; jax-bounded-while: 36 ms, 754 ms, 5.2 s)",
          ["variant", "max iter", "median", "IQR", f"vs max={max_iters[0]}", "residuals",
           "XLA temp", "peak RSS"],
          [[r["name"], r["maximum_iterations"] or "-", fmt_time(r["median_s"]),
            f"{r['spread']:.0%}", fmt_ratio(r["vs_first_max"]), fmt_bytes(r["residual_bytes"]),
            fmt_bytes(r["xla_temp_bytes"]), fmt_bytes(r["peak_rss_bytes"])] for r in rows])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--part", type=int, choices=[1, 2], help="run one part only")
    parser.add_argument("--json", metavar="OUT.json", help="write the results as JSON")
    args = parser.parse_args()
    budget = 0.5 if args.quick else 8.0
    print(machine())
    results = {"machine": machine()}
    if args.part in (None, 1):
        results["n2048"] = part1(2048, 4096, ["local-sync", "local-task"], budget)
    if args.part in (None, 2):
        results["n10"] = part2(10, [256, 4096] if args.quick else [256, 4096, 65536],
                               budget)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
