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
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")   # the module below imports diffrax

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import whilst  # noqa: E402
from bitcast_of_broadcast_in_dispatch import compiled_with  # noqa: E402  (this folder)
from whilst.lowering import prepare  # noqa: E402


def loss(u, theta, n):
    """sum(u ** 2) after n steps of u <- u cos(u) + theta[0], at most 6."""
    return jnp.sum(whilst.while_loop(lambda i, u: i < n,
                                     lambda i, u: (i + 1, u * jnp.cos(u) + theta[0]),
                                     [0, u], maximum_iterations=6)[1] ** 2)


def main():
    args = (np.array([0.1, 0.5, -0.3], np.float32), np.array([0.3, 0.7], np.float32),
            np.int32(2))
    text = prepare([whilst.export(jax.grad(loss, argnums=(0, 1)), *args)])
    for label, replacement in [("kept apart", None), ("as exported", lambda loop: None)]:
        print(f"{label}: {compiled_with(text, '_scalar_pads', replacement)}")


if __name__ == "__main__":
    main()
