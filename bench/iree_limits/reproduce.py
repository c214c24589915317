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


def wide_window_scatter():
    """A scatter-add of 2 x 2 windows at computed positions (`lax.scatter_add` with
    the indexed dims as windows wider than 1; `x.at[...]` never emits it):
    iree-compile rejects it with "'iree_linalg_ext.scatter' op expected indices to
    be equal to batch rank or batch rank + 1", which scatters pass only with every
    indexed dim inserted (a window of 1)."""
    dims = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0, 1))

    def add(x, starts):
        return lax.scatter_add(x, starts, jnp.ones((2, 2, 2), x.dtype), dims)
    return add, (np.zeros((5, 3), np.float32), np.array([[0, 1], [2, 0]], np.int32))


CASES = {
    "wide_window_scatter": wide_window_scatter,
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
