"""Reproducers of IREE 3.13 limitations met by whilst programs (llvm-cpu).

    python iree_limits/reproduce.py [NAME ...]

Each entry exports a small program with whilst, prepares it as `whilst.compile`
does, and runs iree-compile with the default and with aggressive fusion (the
flag sets `whilst.compile` tries), printing what IREE says for each. `--save DIR`
also writes each prepared module as DIR/NAME.mlir for `iree-compile` alone. An
entry that starts to pass means IREE lifted the limit: remove it here and the
workaround, refusal or fallback that whilst has for it.
"""
import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import tools
from jax import lax

import whilst
from whilst.lowering import compile_flags, prepare


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


def recording_cg(n):
    """`(loss, A, b)`: conjugate gradient (as in samples/cg.py) that records `rr / bb`
    per step at a computed position (`h.at[k + 1].set(...)`), for at most 4 n steps;
    `loss(A, b, loop=whilst.while_loop)` is 0.5 |x|^2 of the x it reaches with its
    loop run by `loop` (tests/iree/test_iree.py passes the Python loop as the oracle), and
    A, b are a random symmetric positive definite system of size n."""
    def loss(A, b, loop=whilst.while_loop):
        bb = b @ b

        def body(k, x, r, p, rr, h):
            Ap = A @ p
            alpha = rr / (p @ Ap)
            r = r - alpha * Ap
            rr_next = r @ r
            return (k + 1, x + alpha * p, r, r + (rr_next / rr) * p, rr_next,
                    h.at[k + 1].set(rr_next / bb))
        x = loop(lambda k, x, r, p, rr, h: rr > 1e-10 * bb, body,
                 [0, jnp.zeros_like(b), b, b, bb, jnp.zeros(4 * n + 1)],
                 maximum_iterations=4 * n)[1]
        return 0.5 * jnp.sum(x ** 2)

    rng = np.random.default_rng(0)
    M = rng.standard_normal((n, n)).astype(np.float32)
    return (loss, (M @ M.T / n + np.eye(n)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def point_gather_after_dot():
    """The gradient of conjugate gradient (as in samples/cg.py, n = 64) that records
    `rr / bb` per step at a computed position (`h.at[k + 1].set(...)`), without the
    preparation that fences one-element gathers off their users
    (`whilst/lowering/_iree_fusion.py`, skipped here). The gradient While reads
    `h_bar[k + 1]` (a gather, `tensor.extract` in IREE) and adds it to a dot product
    of the same step; with aggressive fusion IREE puts both into one dispatch whose
    llvm-cpu codegen fails ("'arith.select' op failed to verify that all of
    {true_value, false_value, result} have same type": the extracted element is
    vectorized as `vector<f32>`, the select's 0.0 stays `f32`)."""
    from whilst.lowering import _iree_fusion
    _iree_fusion.fenced_point_gathers = lambda module: None
    loss, A, b = recording_cg(64)
    return jax.grad(loss, argnums=(0, 1)), (A, b)


def aggressive_fusion_dominance():
    """A loop writing rows of two 9-row buffers, 9 steps per emitted iteration run
    unpredicated and tested together (`_all_pass`), its last steps' carries then
    picked by a masked sum over the 10 candidates (`_onehot.pick`): with
    `--iree-dispatch-creation-enable-aggressive-fusion`, iree-compile's
    FormDispatchRegionsPass fails ("operand #1 does not dominate this use"): it
    places an op that reads the sum before that `reduce`. The default fusion
    compiles it, and `whilst.compile` falls back to it. Picks among at most 8
    candidates are chains of selects (`_onehot.SELECTED_LINES`), which compile
    with aggressive fusion: the same loop with 5 rows compiles so, and failed
    while its picks were masked sums too (as did the forward-mode derivative of
    `x <- x * w` three times and, before the unpredicated form, the README's
    fixed-point loop). Its trip count is computed from the bound `n` when the
    module runs: bounded by the literal 9, the trip count is a constant once
    `prepare` folds constants (`_iree_folded_constants`), and that compiles."""
    def rows(x, n):
        def body(i, a, b):
            return i + 1, a.at[i].set(x * i), b.at[i].set(x + i)
        return whilst.while_loop(lambda i, a, b: i < n, body,
                                 [0, jnp.zeros(9), jnp.zeros(9)], maximum_iterations=9)
    return rows, (np.float32(2.0), np.int32(9))


CASES = {
    "aggressive_fusion_dominance": aggressive_fusion_dominance,
    "point_gather_after_dot": point_gather_after_dot,
    "wide_window_scatter": wide_window_scatter,
}


def outcome(name, save=None) -> str:
    fn, args = CASES[name]()
    text = prepare([whilst.export(fn, *args, name=name)])
    if save:
        with open(os.path.join(save, f"{name}.mlir"), "w") as f:
            f.write(text)
    results = []
    for aggressive in (False, True):
        try:
            tools.compile_str(text, extra_args=compile_flags(("llvm-cpu",),
                                                             aggressive_fusion=aggressive))
            result = "compiles"
        except tools.CompilerToolError as e:
            lines = [l for l in str(e).splitlines() if "error" in l or "Error code" in l]
            result = "iree-compile fails: " + " | ".join(lines[:3])[:400]
        results.append(f"{'aggressive' if aggressive else 'default'} fusion: {result}")
    return "; ".join(results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(CASES))
    parser.add_argument("--save", metavar="DIR")
    args = parser.parse_args()
    for name in args.names:
        print(f"{name}: {outcome(name, args.save)}", flush=True)


if __name__ == "__main__":
    main()
