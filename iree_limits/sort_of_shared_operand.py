"""IREE 3.13 (llvm-cpu) sorts in place, into the buffer of the sort's operand, and
where that operand is also read elsewhere it should sort a copy; with a loop in a
dispatch it did not. `jax.grad(jax.grad(f))` of a 3-step loop with `checkpoints=2`
(the IREE corpus's `checkpoint_jvp_and_grad_of_grad`): the checkpoint schedule
sorts the step numbers of the slots that the forward While returns (`argsort`),
and also reads them unsorted; with the gradient While, which writes slots, in a
dispatch, it read them sorted, and the second derivative came out -2.87 on
local-sync and -18.1 on local-task, where `jax.grad` of the loop unrolled gives
-73.5. Stepped from the host, or run with `--iree-flow-trace-dispatch-tensors`, it
was right. whilst sorts such operands from a copy of their own
(`sort_operands_copied`, `whilst/lowering/_iree_sort_operands.py`).

    python iree_limits/sort_of_shared_operand.py

prints the second derivative with and without those copies, on both CPU drivers,
and the unrolled loop's.
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from whilst.lowering import _iree as iree


def f(x):
    """x <- sin(x) x + x, 3 steps, 2 checkpoints."""
    return whilst.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, jnp.sin(x) * x + x),
                             [0, x], checkpoints=2)[1]


def unrolled(x):
    for _ in range(3):
        x = jnp.sin(x) * x + x
    return x


def main():
    x = np.float32(0.8)
    second = jax.grad(jax.grad(f))
    print(f"unrolled, jax.grad twice: {float(jax.grad(jax.grad(unrolled))(x)):.4f}")
    copied = iree.sort_operands_copied
    for label, rule in [("sorted from copies", copied),
                        ("sorted in place", lambda module: None)]:
        iree.sort_operands_copied = rule
        try:
            module = whilst.compile(second, x, cache=False)
        finally:
            iree.sort_operands_copied = copied
        got = [f"{float(module.load(driver)(x)):.4f}" for driver in ("local-sync", "local-task")]
        print(f"{label}: local-sync {got[0]}, local-task {got[1]} "
              f"({module.stages[-1][0][:100]})")


if __name__ == "__main__":
    main()
