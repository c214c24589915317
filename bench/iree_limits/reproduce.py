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


def symbolic_batch_grad():
    """jax.grad of a loss of a vmapped loop over a symbolic batch `b` (whilst.compile
    refuses it, see `whilst.lowering._iree_dims.symbolic_stack_loops`; here the
    refusal is skipped). Its residual rows are `f32[b]`-like: writing one with
    `dynamic_update_slice` needs a rank-raising `dynamic_broadcast_in_dim`
    ("explicitly marked illegal"); a row `scatter` passes (symbolic_row_write.py),
    but reading a row back needs a rank-lowering `dynamic_reshape` or
    `dynamic_gather` (both illegal), and `reduce` over a `real_dynamic_slice` of
    the row fails in codegen ("failed to resolve workgroup count hint in terms of
    workload ordinals")."""
    from whilst.lowering import _iree
    _iree._refuse_symbolic_stacks = lambda module, name: None

    def step_loop(x, limit):
        return whilst.while_loop(lambda i, x: x < limit, lambda i, x: (i + 1, x * 1.5 + 0.1),
                                 [0, x], maximum_iterations=20)
    fwd = jax.vmap(step_loop)
    (b,) = jax_export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b,), np.float32)
    return jax.grad(lambda xs, ls: jnp.sum(fwd(xs, ls)[1] ** 2)), (spec, spec)


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
    "symbolic_batch_grad": symbolic_batch_grad,
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
