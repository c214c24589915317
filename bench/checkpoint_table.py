"""Checkpointed reverse mode with no bound (issue 6): extra body evaluations per step of
`jax.grad` through an n-step loop with K checkpoints, whilst (`while_loop(checkpoints=K)`)
next to equinox's online treeverse (`while_loop(kind="checkpointed", checkpoints=K)`),
both measured in this run by counting real body calls (a `jax.debug.callback` in the
body), plus whilst's prediction (`whilst.ir.schedule_cost`), the lower bound for a
forward that does not know n (`n - K`), and the median time of one gradient (no callback,
JAX CPU).

Extra per step = (body calls during jax.grad - 2 n) / n.

    .venv/bin/python bench/checkpoint_table.py [--quick]

Measured (2-core x86, jax 0.10.2, equinox 0.13.8, one run):

       K      n   whilst predicted  equinox   bound  whilst ms  equinox ms
      90    100    0.100     0.100    0.100   0.100       0.52        0.41
      90   1000    0.910     0.910    0.910   0.910       5.98        5.81
      90   4000    0.978     0.978    0.978   0.978      25.37       27.84
      16    100    0.840     0.840    0.840   0.840       0.66        1.05
      16   1000    1.978     1.978    2.764   0.984      12.45        9.45
      16   4000    2.793     2.793    3.954   0.996      73.60       44.06
       4    100    2.860     2.860    3.030   0.960       1.06        0.28
       4   1000    7.314     7.314   16.701   0.996      40.76        7.63
       4   4000   11.642    11.642   70.081   0.999     231.45      161.01

Where n <= (K+1)(K+2)/2 both sit on the bound n - K (a forward that does not know n
stores at most K of the n states the reversal needs), which cannot be beaten. With
this 16-float body the time is the gradient While's per-iteration overhead (schedule
arithmetic, binary search, cond), not body evaluations.
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
