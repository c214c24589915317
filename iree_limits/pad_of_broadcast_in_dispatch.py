"""IREE 3.13 (llvm-cpu): llvm-cpu codegen of a gradient While in one dispatch fails on
`pad(broadcast_in_dim(x))` of a scalar `x` ("'memref.expand_shape' op rank 0 memrefs
can only be extended/collapsed with/from ones"): the adjoint of `theta[0]`, a sum
broadcast and padded to `theta`'s length, as in the IREE corpus's
`value_and_grad_two_argnums`. The same loop with the broadcast read through a vector
behind a `util.optimization_barrier` compiles; whilst does so in the loops it moves
into dispatches (`_scalar_pads`, `whilst/lowering/_iree_loops_in_dispatch.py`).

    python iree_limits/pad_of_broadcast_in_dispatch.py

prints, for the gradient While in a dispatch with and without the pads' operands so
kept apart, "compiled" or IREE's first error.
"""
import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import ir, tools

import whilst
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch


def loss(u, theta, n):
    """sum(u ** 2) after n steps of u <- u cos(u) + theta[0], at most 6."""
    return jnp.sum(whilst.while_loop(lambda i, u: i < n,
                                     lambda i, u: (i + 1, u * jnp.cos(u) + theta[0]),
                                     [0, u], maximum_iterations=6)[1] ** 2)


def main():
    args = (np.array([0.1, 0.5, -0.3], np.float32), np.array([0.3, 0.7], np.float32),
            np.int32(2))
    text = prepare([whilst.export(jax.grad(loss, argnums=(0, 1)), *args)])
    flags = next(f for f in flag_sets(("llvm-cpu",), loops_in_dispatch=True)
                 if has_loops_in_dispatch(f))
    keep_apart = in_dispatch._scalar_pads
    for label, rewrite in [("kept apart", keep_apart), ("as exported", lambda loop: None)]:
        in_dispatch._scalar_pads = rewrite
        try:
            with ir.Context(), ir.Location.unknown():
                module = ir.Module.parse(text)
                assert in_dispatch.loops_in_dispatch(module) == 2
                source = module.operation.get_asm(enable_debug_info=False)
        finally:
            in_dispatch._scalar_pads = keep_apart
        try:
            tools.compile_str(source, extra_args=flags)
            print(f"{label}: compiled")
        except tools.CompilerToolError as e:
            first = next((line for line in str(e).splitlines() if "error:" in line), str(e))
            print(f"{label}: {first.strip()[:200]}")


if __name__ == "__main__":
    main()
