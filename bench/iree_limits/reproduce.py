"""Reproducers of IREE 3.13 limitations met by whilst programs (llvm-cpu).

    python bench/iree_limits/reproduce.py [NAME ...]

Each entry exports a small program with whilst, prepares it as `whilst.compile`
does, and runs iree-compile (and the module, when it compiles), printing what
IREE says. `--save DIR` also writes each prepared module as DIR/NAME.mlir for
`iree-compile` alone. An entry that starts to pass means IREE lifted the limit:
remove it here and its xfail in tests/test_iree_corpus.py.
"""
import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export, lax

import whilst
from whilst.lowering import CompileError, compile_text, prepare


def batched_scatter():
    """`jax.vmap` of a write at a per-lane position, outside whilst loops (whilst
    rewrites those in loop bodies, `whilst/ir/_batched_scatter.py`): a scatter with
    batching dimensions, which iree-compile rejects with "'iree_linalg_ext.scatter'
    op expected indices to be equal to batch rank or batch rank + 1"."""
    def write(buf, k, x):
        return lax.dynamic_update_index_in_dim(buf, x, k, 0)
    return jax.vmap(write), (np.zeros((4, 3, 5), np.float32), np.array([0, 2, 1, 2], np.int32),
                             np.ones((4, 5), np.float32))


CASES = {
    "batched_scatter": batched_scatter,
}


def outcome(name, save=None) -> str:
    fn, args = CASES[name]()
    text = prepare([whilst.export(fn, *args, name=name)])
    if save:
        with open(os.path.join(save, f"{name}.mlir"), "w") as f:
            f.write(text)
    try:
        compile_text(text)
    except CompileError as e:
        lines = [l for l in str(e).splitlines() if "error" in l or "Error code" in l]
        return "iree-compile fails: " + " | ".join(lines[:3])[:400]
    return "compiles"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(CASES))
    parser.add_argument("--save", metavar="DIR")
    args = parser.parse_args()
    for name in args.names:
        print(f"{name}: {outcome(name, args.save)}", flush=True)


if __name__ == "__main__":
    main()
