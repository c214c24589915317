"""IREE 3.13 (llvm-cpu): `jax.grad` of conjugate gradient written as a `lax.scan` (the
solver of samples/cg.py, n = 128, its 56 steps, no whilst loop) computes NaN in
every element once the entry function carries

    stream.affinity = #hal.device.affinity<@__device_0>

which whilst gives every function it compiles (without it IREE copies every
loop-carried buffer on every loop iteration: research/iree-inplace, fact 1).
The module as `jax.export` emits it, compiled with the same flags, computes
JAX's values; so does whilst's own gradient While of the same solver.
bench/iree_vs_jax.py meets this in the CG row's floor (the fixed-length twin),
which therefore has no time.

    python iree_limits/affinity_scan_gradient.py
"""
import os
import sys

import iree.runtime as rt
import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import ir, tools
from jax import lax

from whilst.lowering import compile_flags
from whilst.lowering._iree import AFFINITY
from whilst.lowering._ir_walk import public_functions

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples"))
from cg import problem  # noqa: E402

STEPS = 56  # what the sample's solver takes on this system under JAX


def loss(A, b):
    """0.5 |x|^2 for x after STEPS conjugate gradient steps on (A + A^T) / 2."""
    A = 0.5 * (A + A.T)

    def step(carry, _):
        x, r, p, rr = carry
        Ap = A @ p
        alpha = rr / (p @ Ap)
        r = r - alpha * Ap
        rr_next = r @ r
        return (x + alpha * p, r, r + (rr_next / rr) * p, rr_next), None

    (x, *_), _ = lax.scan(step, (jnp.zeros_like(b), b, b, b @ b), None, length=STEPS)
    return 0.5 * jnp.sum(x ** 2)


def with_affinity(text: str) -> str:
    """`text` with the affinity attribute on each public function."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        for op in public_functions(module):
            op.attributes["stream.affinity"] = ir.Attribute.parse(AFFINITY)
        return module.operation.get_asm(enable_debug_info=False)


def run(text: str, args):
    ctx = rt.SystemContext(config=rt.Config("local-sync"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(
        ctx.instance, tools.compile_str(text, extra_args=compile_flags(("llvm-cpu",)))))
    (name,) = [n for n in ctx.modules.keys() if n != "hal"]
    return [np.asarray(o.to_host()) for o in ctx.modules[name]["main"](*args)]


def main():
    A, b = problem(128)
    grad = jax.grad(loss, argnums=(0, 1))
    want = jax.jit(grad)(A, b)
    text = jax.export.export(jax.jit(grad))(A, b).mlir_module()
    for label, module in (("as jax.export emits it", text),
                          ("with stream.affinity", with_affinity(text))):
        got = run(module, (A, b))
        nans = sum(int(np.isnan(g).sum()) for g in got)
        error = max(float(np.nanmax(np.abs(g - w), initial=0)) for g, w in zip(got, want))
        print(f"{label}: {nans} NaN of {sum(g.size for g in got)}, "
              f"max |IREE - JAX| elsewhere {error:.2g}")


if __name__ == "__main__":
    main()
