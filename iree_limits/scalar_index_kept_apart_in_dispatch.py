"""IREE 3.13 (llvm-cpu): llvm-cpu codegen of a gradient While in one dispatch fails
where a scalar read through a vector behind a `util.optimization_barrier` (a 0-d
`vector.transfer_write` into a `tensor.empty`) is reshaped to one element and used as
a gather's index ("'memref.expand_shape' op rank 0 memrefs can only be
extended/collapsed with/from ones": bufferization expands the scalar's buffer to a
dynamic size). whilst keeps shared values apart so in the loops it moves into
dispatches (`_shared_values_materialized`), every one in gradient Whiles: the clamped
position at which the gradient of `y <- cos(y)` while `t < 2.0` reads its stacks
(two gathers and a scatter) is one. Kept apart as one element, then reshaped to a
scalar (which folds into the gather's reshape), it compiles; whilst does so
(`_kept_apart`, `whilst/lowering/_iree_loops_in_dispatch.py`).

    python iree_limits/scalar_index_kept_apart_in_dispatch.py

prints, for the gradient's loops in dispatches with scalars kept apart as one element
and as scalars, "compiled" or IREE's first error.
"""
import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import ir

import whilst
from bitcast_of_broadcast_in_dispatch import compiled_with  # (this folder, run as a script)
from whilst.lowering import prepare
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch


def cos_while_float(x):
    return whilst.while_loop(lambda t, _: t < 2.0, lambda t, y: (t + 1.0, jnp.cos(y)),
                             [0.0, x])[1]


def kept_as_scalar(value):
    """`_kept_apart` with a scalar read through a 0-d vector."""
    vector = in_dispatch._to_vector(value)
    kept = ir.Operation.create("util.optimization_barrier", results=[vector.type],
                               operands=[vector]).result
    return in_dispatch._to_tensor(kept, value.type)


def main():
    text = prepare([whilst.export(jax.grad(cos_while_float), np.float32(1.0))])
    for label, replacement in [("as one element", None), ("as a scalar", kept_as_scalar)]:
        print(f"{label}: {compiled_with(text, '_kept_apart', replacement)}")


if __name__ == "__main__":
    main()
