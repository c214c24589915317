"""Checkpointed reverse mode with no bound (issue 6): extra body evaluations per step of
`jax.grad` through an n-step loop with K checkpoints, whilst (`while_loop(checkpoints=K)`)
next to equinox's online treeverse (`while_loop(kind="checkpointed", checkpoints=K)`),
both measured in this run by counting real body calls (a `jax.debug.callback` in the
body), plus whilst's prediction (`whilst.ir.schedule_cost`), the lower bound for a
forward that does not know n (`n - K`), and the median time of one gradient (no callback,
JAX CPU; whilst and equinox timed alternately, 21 batches of calls of about 2 ms each)
with their ratio.

Extra per step = (body calls during jax.grad - 2 n) / n.

    .venv/bin/python bench/checkpoint_table.py [--quick] [--iree]

Measured (2-core x86 VM shared with other jobs, load 2.5-4.5, so noisy; jax 0.12.0.1,
equinox 0.13.8, 2026-11-24; times from one run; ratio: the median over 4 runs for n = 100
and 1000 (range in brackets), that run for n = 4000; before: whilst at 988b6c6, run
alternately with this in the same way):

       K      n   whilst predicted  equinox   bound  whilst ms  equinox ms  ratio            before
      90    100    0.100     0.100    0.100   0.100       0.16        0.17   1.00 (0.98-1.03) 1.02
      90   1000    0.910     0.910    0.910   0.910       0.32        0.34   0.94 (0.92-0.96) 1.09
      90   4000    0.978     0.978    0.978   0.978       0.85        0.93   0.91             1.17
      16    100    0.840     0.840    0.840   0.840       0.13        0.13   1.00 (0.95-1.00) 1.02
      16   1000    1.978     1.978    2.764   0.984       0.33        0.40   0.82 (0.81-0.85) 0.97
      16   4000    2.793     2.793    3.954   0.996       1.33        1.94   0.69             0.90
       4    100    2.860     2.860    3.030   0.960       0.07        0.07   0.94 (0.94-0.95) 1.04
       4   1000    7.314     7.314   16.701   0.996       0.54        1.24   0.44 (0.43-0.44) 0.53
       4   4000   11.642    11.642   70.081   0.999       2.84       18.51   0.15             0.20

With `--iree`, whilst's gradient is also compiled by IREE for llvm-cpu and timed on
local-sync (median of 5 calls; one module per K, n is an input). `--quick --iree` on
2026-12-02 (jax 0.12), IREE ms and IREE / whilst's JAX time, before (gradient Whiles
that write slots stepped from the host) and after (in a dispatch, as the forward
While; runs alternated, one process each):

       K      n   before ms  before x   after ms  after x
      90    100       7.66     28.6x       7.58    32.9x
      90   1000     110.76    210.1x     112.10   270.0x
      16    100       9.73     84.1x       0.12     1.2x
      16   1000      88.32    184.3x       0.64     1.7x
       4    100      15.10    197.5x       0.11     1.5x
       4   1000     241.57    377.6x       0.60     1.3x

At K = 90 the gradient While's slots (90 x 16 floats, 5.6 KiB) were past what a loop
could carry in a dispatch (`MAX_CARRIED_BYTES`, then 4 KiB), so it was stepped from
the host, and IREE 3.13 ran its `stablehlo.case`s from the host: its body (all
branches counted) read back 5 scalars and recorded 26 dispatches in 20 submissions
with 32 transient allocations, 40-165 us per iteration. With the bound at 8 KiB it
runs in a dispatch too (2026-12-03, one process, a CI run beside it; the bound's
4096 against 8192 timed interleaved in another process: 6.48 against 0.169 ms at
n = 100, 164 against 1.35 ms at n = 1000):

       K      n   IREE ms  IREE / whilst's JAX
      90    100      0.27      2.5x
      90   1000      1.23      5.0x
      16    100      0.13      1.6x
      16   1000      0.73      1.7x
       4    100      0.10      2.7x
       4   1000      0.70      1.5x

Where n <= (K+1)(K+2)/2 both sit on the bound n - K (a forward that does not know n
stores at most K of the n states the reversal needs), which cannot be beaten. With
this 16-float body the time is per-iteration overhead and a fixed cost per call, not
body evaluations. XLA:CPU (jax 0.12) compiles each of these small loops whole into one
function, so what counts per iteration is the code in the body, not thunks. PjRt runs
a program XLA estimates under 1000 flops (a loop body counted once) on the calling
thread, others on a worker thread, some 50 us more per call here: equinox's programs
count 434 and 754 flops at K = 4 and 16, 2954 at K = 90; whilst's 523, 783 and 2619
(its binomial split is a loop under jax.jit on CPU, `xla_cpu_choice`). At K = 90 and
n = 100 both spend some 90% of the time on that fixed cost (155 us at n = 0 for both).

Before, whilst's gradient While stepped forwards before its `lax.switch`: every
iteration evaluated the body (sin) and its vjp's residuals (cos), and XLA fused a
second copy of the body into the write of the stored step (equinox's loop also
evaluates sin and cos every iteration, once). On XLA:CPU each branch now evaluates
what its action needs, the body in the advancing ones and the vjp in the reverse one
(`_checkpoint._transpose`, exports unchanged), and the forward's Wang and Moin branch
returns one level rather than the int32[K] level array, which XLA copied in and out
of it every step.
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


def median_times(K, n, repeats=21, batch_s=2e-3):
    """Median seconds of one gradient, whilst's and equinox's, timed alternately so
    that a change of load on the machine affects both, each time over a batch of
    calls of about `batch_s` seconds."""
    grads = [make(kind, K, False, None) for kind in ("whilst", "equinox")]
    x = jnp.full(D, 0.3)
    for grad in grads:
        jax.block_until_ready(grad(x, n))
    t0 = time.perf_counter()
    jax.block_until_ready(grads[0](x, n))
    calls = max(1, round(batch_s / (time.perf_counter() - t0)))
    times = [[], []]
    for _ in range(repeats):
        for grad, ts in zip(grads, times):
            t0 = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(grad(x, n))
            ts.append((time.perf_counter() - t0) / calls)
    return [float(np.median(ts)) for ts in times]


def iree_gradient(grad):
    """`grad` (whilst's, from `make`) compiled by IREE for llvm-cpu, loaded on
    local-sync (the trip count n is an input: one module for every n)."""
    x = np.full(D, 0.3, np.float32)
    return whilst.compile(grad, x, np.int32(1)).load("local-sync").main


def iree_median_time(main, n, want, repeats=5):
    """Median seconds of one call of `main` (after a check of its result)."""
    x = np.full(D, 0.3, np.float32)
    np.testing.assert_allclose(main(x, np.int32(n)), want, rtol=1e-4, atol=1e-6)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        main(x, np.int32(n))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 100 and 1000 only")
    parser.add_argument("--iree", action="store_true",
                        help="also time whilst's gradient on IREE (llvm-cpu, local-sync)")
    args = parser.parse_args()
    ns = [100, 1000] if args.quick else [100, 1000, 4000]
    print(f"jax {jax.__version__}, equinox {eqxi.__name__.split('.')[0]} "
          f"{__import__('equinox').__version__}, body: x <- sin(x)*0.9+0.1, x f32[{D}]")
    print("extra body evaluations per step during jax.grad (beyond n forward + n reversed)")
    header = f"{'K':>4} {'n':>6} {'whilst':>8} {'predicted':>9} {'equinox':>8} {'bound':>7}" \
             f" {'whilst ms':>10} {'equinox ms':>11} {'ratio':>6}"
    if args.iree:
        header += f" {'IREE ms':>9} {'IREE/whilst':>11}"
    print(header)
    for K in [90, 16, 4]:
        grad = make("whilst", K, False, None) if args.iree else None
        iree_main = iree_gradient(grad) if args.iree else None
        for n in ns:
            w = extra_per_step("whilst", K, n)
            e = extra_per_step("equinox", K, n)
            tw, te = median_times(K, n)
            row = (f"{K:>4} {n:>6} {w:>8.3f} {schedule_cost(n, K) / n:>9.3f} {e:>8.3f} "
                   f"{max(n - K, 0) / n:>7.3f} {tw * 1e3:>10.2f} {te * 1e3:>11.2f} "
                   f"{tw / te:>6.2f}")
            if iree_main is not None:
                ti = iree_median_time(iree_main, n, np.asarray(grad(jnp.full(D, 0.3), n)))
                row += f" {ti * 1e3:>9.2f} {ti / tw:>10.1f}x"
            print(row, flush=True)


if __name__ == "__main__":
    main()
