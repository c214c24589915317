"""IREE 3.13's cuda code of a one-hot sum over the rows of a small array leaves some
elements 0: `whilst.ir._onehot.pick` (one row of x[n, w], picked bit for bit by
summing `where(arange(n) == j, bits(x), 0)` over axis 0) for each of n x w below, in
three forms, against numpy's `x[j]`. whilst's GPU exports pick a loop's last steps by
a chain of selects instead (`whilst.ir._while_lowering._pick_step`).

    python bench/iree_limits/gpu_pick_reduction.py prepare DIR   # with iree-base-compiler
    python bench/iree_limits/gpu_pick_reduction.py run DIR [DRIVER ...]   # on the GPU

`run` prints, for each driver (default cuda, vulkan and local-sync), the forms and
sizes whose result differs from numpy. Where none differs on cuda any more, IREE
fixed it: let GPU exports pick by the one-hot sum again and delete this file.

  axis0: the sum over axis 0 of x[n, w] (what whilst emits);
  inner: the same over axis 1 of x.T (an innermost reduction);
  chain: n - 1 selects, no reduction (what GPU exports emit).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

SIZES = [(5, 64), (8, 64), (9, 64), (16, 64), (17, 64), (32, 64), (33, 64), (64, 64),
         (65, 64), (129, 64), (64, 1), (65, 1), (4096, 1), (64, 8)]
FORMS = ("axis0", "inner", "chain")
CHAIN_MOST = 129  # rows up to which the chain form is built (n - 1 selects)
PICKED = (0, 3, 7, 16, 31, 63, 64, 100, 4095)  # rows picked (clipped to n - 1)


def picks(j, *xs):
    """Each x[min(j, n - 1)] in each form (a zero row for chains not built)."""
    import jax.numpy as jnp
    from jax import lax

    from whilst.ir._onehot import pick

    outs = []
    for x in xs:
        n = x.shape[0]
        jj = jnp.minimum(j, n - 1)
        x = lax.optimization_barrier(x)
        outs.append(pick(x, lax.broadcasted_iota(np.int32, x.shape, 0) == jj, 0)[0])
        xt = lax.optimization_barrier(x.T)
        outs.append(pick(xt, lax.broadcasted_iota(np.int32, xt.shape, 1) == jj, 1)[:, 0])
        chosen = x[0] * 0
        if n <= CHAIN_MOST:
            chosen = x[0]
            for s in range(1, n):
                chosen = jnp.where(jj == s, x[s], chosen)
        outs.append(chosen)
    return tuple(outs)


def prepare(out_dir: str) -> None:
    import whilst

    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(size).astype(np.float32) for size in SIZES]
    compiled = whilst.compile(picks, np.int32(0), *xs,
                              target=["llvm-cpu", "cuda", "vulkan-spirv"], cache=False)
    with open(os.path.join(out_dir, "picks.vmfb"), "wb") as f:
        f.write(compiled.data)
    np.savez(os.path.join(out_dir, "picks_in.npz"), *xs)
    print(f"wrote {out_dir}/picks.vmfb")


def run(out_dir: str, drivers) -> dict:
    import whilst.runtime

    with np.load(os.path.join(out_dir, "picks_in.npz")) as data:
        xs = [data[f"arr_{i}"] for i in range(len(data.files))]
    with open(os.path.join(out_dir, "picks.vmfb"), "rb") as f:
        module_bytes = f.read()
    wrong = {}
    for driver in drivers:
        try:
            module = whilst.runtime.load(module_bytes, driver=driver)
        except whilst.runtime.LoadError as e:
            print(f"{driver}: {str(e).splitlines()[0][:120]}")
            continue
        wrong[driver] = []
        for j in PICKED:
            outs = iter(module.main(np.int32(j), *xs))
            for (n, w), x in zip(SIZES, xs):
                for form in FORMS:
                    got = next(outs)
                    if form == "chain" and n > CHAIN_MOST:
                        continue
                    differing = int((got != x[min(j, n - 1)]).sum())
                    if differing:
                        wrong[driver].append(f"{form} {n}x{w} j={j}: {differing} of {w}")
        print(f"{driver}: " + ("; ".join(wrong[driver]) or "every pick right"), flush=True)
    return wrong


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("prepare", "run"):
        sys.exit(__doc__)
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2])
    else:
        found = run(sys.argv[2], sys.argv[3:] or ["cuda", "vulkan", "local-sync"])
        with open(os.path.join(sys.argv[2], "picks.json"), "w") as f:
            json.dump(found, f, indent=1)
