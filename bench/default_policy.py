"""The default gradient policy against the stored path, per step (issue 41).

Loop: 64 floats (`--width`), `y <- sin(a y) * 0.9 + 0.1` while `i < n`,
`maximum_iterations=n`; `jax.grad` with respect to `y0` and `a`. Two policies,
compiled per length:

- default: no argument (`gradient_memory` 1 MiB): every step stored while n rows
  fit, otherwise chunks of stored steps recomputed from checkpoints;
- stored: `gradient_memory=2**34`, a budget that holds every step's rows.

For each length n (10^2 .. 10^5; 10^6 with --long; `--lengths` for others) and
backend (JAX CPU under `jax.jit`, IREE llvm-cpu on local-sync), both measured
interleaved in this process, it prints the time per step of each and their ratio
default / stored. Goal (issue 41): at most 1.5x (1.2x) at every length.
`--unbounded`: the default policy's loop has no `maximum_iterations` (it runs in
chunks at any length, as a loop whose stop depends on the data).

    .venv/bin/python bench/default_policy.py [--long] [--backend jax|iree|both]
        [--width 64] [--unbounded] [--lengths N ...] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _timing import blocking, fmt_ratio, fmt_time, machine, measure, table, write_json


def loss(y, a, *, n, bounded=True, **options):
    """sum(y_n) after n steps `y <- sin(a y) * 0.9 + 0.1`, one whilst loop
    (`maximum_iterations=n` where `bounded`)."""
    _, y = whilst.while_loop(lambda i, y: i < n,
                             lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                             [jnp.int32(0), y], maximum_iterations=n if bounded else None,
                             **options)
    return jnp.sum(y)


POLICIES = {"default": {}, "stored": {"gradient_memory": 2**34}}


def calls(backend, n, args, unbounded=False):
    """`{policy: zero-argument call}` of the gradient at length n on `backend`."""
    out = {}
    for policy, options in POLICIES.items():
        bounded = not (unbounded and policy == "default")
        grad = jax.grad(functools.partial(loss, n=n, bounded=bounded, **options), (0, 1))
        if backend == "jax":
            out[policy] = blocking(jax.jit(grad).lower(*args).compile(), *args)
        else:
            module = whilst.compile(grad, *args).load("local-sync")
            out[policy] = functools.partial(module.main, *args)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="also n = 10^6")
    parser.add_argument("--backend", choices=["jax", "iree", "both"], default="both")
    parser.add_argument("--budget-s", type=float, default=1.5)
    parser.add_argument("--width", type=int, default=64, help="floats in the loop's state")
    parser.add_argument("--unbounded", action="store_true",
                        help="the default policy's loop without maximum_iterations")
    parser.add_argument("--lengths", type=int, nargs="+")
    parser.add_argument("--json")
    opts = parser.parse_args()
    lengths = opts.lengths or [10**2, 10**3, 10**4, 10**5] + ([10**6] if opts.long else [])
    backends = ["jax", "iree"] if opts.backend == "both" else [opts.backend]
    rng = np.random.default_rng(0)
    args = (rng.uniform(-1, 1, opts.width).astype(np.float32), np.float32(1.1))
    rows, results = [], []
    for backend in backends:
        for n in lengths:
            fns = calls(backend, n, args, opts.unbounded)
            want = [np.asarray(g) for g in fns["stored"]()]
            for got, w in zip(fns["default"](), want):
                np.testing.assert_allclose(np.asarray(got), w, rtol=2e-3, atol=1e-5)
            timings = measure(fns, budget_s=opts.budget_s)
            per_step = {p: timings[p].median / n for p in POLICIES}
            ratio = per_step["default"] / per_step["stored"]
            rows.append([backend, f"{n:.0e}", fmt_time(per_step["default"]),
                         fmt_time(per_step["stored"]), fmt_ratio(ratio)])
            results.append(dict(backend=backend, n=n, ratio=ratio,
                                **{f"{p}_s_per_step": t for p, t in per_step.items()}))
            print(*rows[-1], flush=True)
    table(f"jax.grad of the {opts.width}-float sin loop"
          f"{' (default: unbounded)' * opts.unbounded}: time per step, default policy over "
          "stored path (same process)",
          ["backend", "n", "default/step", "stored/step", "default/stored"], rows)
    if opts.json:
        write_json(opts.json, dict(machine=machine(), width=opts.width,
                                   unbounded=opts.unbounded, results=results))


if __name__ == "__main__":
    main()
