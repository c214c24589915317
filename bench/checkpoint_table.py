"""Checkpointed reverse mode with no bound (issue 6): extra body evaluations per step of
`jax.grad` through an n-step loop with K checkpoints, whilst (`while_loop(checkpoints=K)`)
next to equinox's online treeverse (`while_loop(kind="checkpointed", checkpoints=K)`),
both measured in this run by counting real body calls (a `jax.debug.callback` in the
body), plus whilst's prediction (`whilst.ir.schedule_cost`), the lower bound for a
forward that does not know n (`n - K`), and the median time of one gradient (no callback,
JAX CPU).

Extra per step = (body calls during jax.grad - 2 n) / n.

    .venv/bin/python bench/checkpoint_table.py [--quick]
"""
from __future__ import annotations

import argparse
import time

import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from whilst.ir import schedule_cost

D = 16


def step(x):
    return jnp.sin(x) * 0.9 + 0.1


def make(kind, K, counted, calls):
    def body(i, x):
        if counted:
            jax.debug.callback(lambda: calls.append(1))
        return i + 1, step(x)

    def loss(x, n):
        if kind == "whilst":
            out = whilst.while_loop(lambda i, x: i < n, body, [0, x], checkpoints=K)[1]
        else:
            out = eqxi.while_loop(lambda c: c[0] < n, lambda c: body(*c), (0, x),
                                  kind="checkpointed", checkpoints=K)[1]
        return jnp.sum(out)

    return jax.jit(jax.grad(loss))


def extra_per_step(kind, K, n):
    calls = []
    grad = make(kind, K, True, calls)
    jax.block_until_ready(grad(jnp.full(D, 0.3), n))
    jax.effects_barrier()
    return (len(calls) - 2 * n) / n


def median_time(kind, K, n, repeats=5):
    grad = make(kind, K, False, None)
    x = jnp.full(D, 0.3)
    jax.block_until_ready(grad(x, n))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(x, n))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 100 and 1000 only")
    args = parser.parse_args()
    ns = [100, 1000] if args.quick else [100, 1000, 4000]
    print(f"jax {jax.__version__}, equinox {eqxi.__name__.split('.')[0]} "
          f"{__import__('equinox').__version__}, body: x <- sin(x)*0.9+0.1, x f32[{D}]")
    print("extra body evaluations per step during jax.grad (beyond n forward + n reversed)")
    header = f"{'K':>4} {'n':>6} {'whilst':>8} {'predicted':>9} {'equinox':>8} {'bound':>7}" \
             f" {'whilst ms':>10} {'equinox ms':>11}"
    print(header)
    for K in [90, 16, 4]:
        for n in ns:
            w = extra_per_step("whilst", K, n)
            e = extra_per_step("equinox", K, n)
            tw, te = median_time("whilst", K, n), median_time("equinox", K, n)
            print(f"{K:>4} {n:>6} {w:>8.3f} {schedule_cost(n, K) / n:>9.3f} {e:>8.3f} "
                  f"{max(n - K, 0) / n:>7.3f} {tw * 1e3:>10.2f} {te * 1e3:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
