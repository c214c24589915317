"""IREE 3.13's cuda code of the sin loop unrolled 64 times leaves elements of its
result 0 (H100, sm_80 PTX): after its full iterations the loop picks the carry of
the steps that passed out of the 65 stacked carries by a one-hot sum
(`whilst.ir._onehot.pick`), and in that module the pick comes back 0 where it
should hold a carry, for every n (0 included, where no iteration runs). The same
loop unrolled 4 times is right, and so is a lone one-hot sum over 65 x 64 values
(every size from 5 x 64 to 4096 x 1, whichever axis). whilst's GPU exports pick by
a chain of selects (`whilst.ir._while_lowering._pick_step`).

    python bench/iree_limits/gpu_pick_reduction.py prepare DIR   # with iree-base-compiler
    python bench/iree_limits/gpu_pick_reduction.py run DIR [DRIVER ...]   # on the GPU

`run` prints, for each driver (default cuda, vulkan and local-sync), the largest
difference from numpy's loop of each module at several n. Where the first module
is right on cuda, IREE fixed it: let GPU exports pick by the one-hot sum again
and delete this file.

  k64 sum:     unroll=64, exported as for a CPU (the one-hot sum), IREE's default
               fusion (what failed);
  k4 sum:      unroll=4, the same form;
  k64 selects: unroll=64, exported as for a GPU (the chain of selects);
  ... fused:   the same with aggressive fusion (what whilst compiles first).
"""
from __future__ import annotations

import functools
import os
import sys

import numpy as np

# label -> (unroll, targets the export is shaped for, aggressive fusion)
MODULES = {"k64 sum": (64, (), False), "k64 sum fused": (64, (), True),
           "k4 sum": (4, (), False), "k64 selects": (64, ("cuda",), False),
           "k64 selects fused": (64, ("cuda",), True)}
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
    for label, (unroll, export_targets, fused) in MODULES.items():
        exported = whilst.export(functools.partial(sin_steps, unroll=unroll), *_inputs(),
                                 targets=export_targets)
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
        run(sys.argv[2], sys.argv[3:] or ["cuda", "vulkan", "local-sync"])
