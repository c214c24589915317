"""IREE 3.13's cuda code of the sin loop unrolled 32 or 64 times gives wrong results
(H100, sm_80 PTX; under IREE's default runtime settings and whilst's alike). After its
full iterations the loop picks the carry of the steps that passed out of the k + 1
carries it computed. Unrolled 64 times with the pick a one-hot sum
(`whilst.ir.iree_forms._onehot.pick`), elements of the result come back 0 for every n (0
included, where no iteration runs); with the pick a chain of selects instead, the
result is wrong where the loop ends before its first full iteration (0 < n < k), at
k = 32 as at 64. Unrolled 4, 8 or 16 times, both forms are right for every n, and a
lone one-hot sum over 65 x 64 values is right too. So whilst's GPU exports unroll at
most 16 steps (`whilst.ir._unroll.MAX_GPU_UNROLL`).

    python iree_limits/gpu_pick_reduction.py prepare DIR   # with iree-base-compiler
    python iree_limits/gpu_pick_reduction.py run DIR [DRIVER ...]   # on the GPU

`run` prints, for each driver (default cuda and local-sync), the largest difference
from numpy's loop of each module at several n. Where the k = 64 modules are right
on cuda, IREE fixed it: raise MAX_GPU_UNROLL and delete this file.

Each module is exported as for a CPU (whose unrolling whilst does not cap) and
compiled for llvm-cpu and cuda, with IREE's default fusion and with its aggressive
fusion (what `whilst.compile` tries first).
"""
from __future__ import annotations

import functools
import os
import sys

import numpy as np

# label -> (unroll, aggressive fusion)
MODULES = {"k64": (64, False), "k64 fused": (64, True), "k16": (16, False),
           "k16 fused": (16, True)}
STEPS = (0, 1, 5, 63, 64, 65, 100, 1000, 10_000)


def sin_steps(x, n, unroll):
    """n steps of x = sin(x) * 0.9 + 0.1 (n is data), `unroll` steps per iteration."""
    import jax.numpy as jnp

    import whilst

    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 0.9 + 0.1),
                             [0, x], unroll=unroll)[1]


def reference(x, n):
    for _ in range(n):
        x = (np.sin(x) * np.float32(0.9) + np.float32(0.1)).astype(np.float32)
    return x


def _inputs():
    return np.random.default_rng(0).standard_normal(64).astype(np.float32), np.int32(10_000)


def prepare(out_dir: str) -> None:
    from iree.compiler import tools

    import whilst
    from whilst.lowering import compile_flags, prepare as prepared, target_metadata

    os.makedirs(out_dir, exist_ok=True)
    targets = ("llvm-cpu", "cuda")
    for label, (unroll, fused) in MODULES.items():
        exported = whilst.export(functools.partial(sin_steps, unroll=unroll), *_inputs())
        text = prepared([exported], target_metadata(targets))
        data = tools.compile_str(text, extra_args=compile_flags(targets,
                                                                aggressive_fusion=fused))
        with open(os.path.join(out_dir, label.replace(" ", "_") + ".vmfb"), "wb") as f:
            f.write(data)
    print(f"wrote {len(MODULES)} modules to {out_dir}")


def run(out_dir: str, drivers) -> None:
    import whilst.runtime

    x, _ = _inputs()
    for label in MODULES:
        with open(os.path.join(out_dir, label.replace(" ", "_") + ".vmfb"), "rb") as f:
            data = f.read()
        for driver in drivers:
            try:
                main = whilst.runtime.load(data, driver=driver).main
            except whilst.runtime.LoadError as e:
                print(f"{label:12s} {driver}: {str(e).splitlines()[0][:100]}")
                continue
            errors = [float(np.abs(main(x, np.int32(n)) - reference(x, n)).max())
                      for n in STEPS]
            print(f"{label:12s} {driver:10s} largest error at n = {STEPS}: "
                  + " ".join(f"{e:.2g}" for e in errors), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("prepare", "run"):
        sys.exit(__doc__)
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3:] or ["cuda", "local-sync"])
