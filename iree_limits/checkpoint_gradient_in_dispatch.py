"""A checkpointed second derivative computed wrong with its gradient Whiles in one
dispatch each (llvm-cpu): `jax.grad(jax.grad(f))` of a 3-step loop with
`checkpoints=2` gives -2.87 where `jax.grad` of the loop unrolled gives -73.5 (the
IREE corpus's `checkpoint_jvp_and_grad_of_grad`). Stepped from the host, the same
loops give -73.5. Keeping the updates of their slot writes apart from the gathers
they reread (`_iree_fusion._rereading_scatter`), or every shared value apart, does
not change it; whether IREE or whilst's rewrite is at fault was not found. So
gradient and linear Whiles that write slots stay on the host (`_writes_slots`,
`whilst/lowering/_iree_loops_in_dispatch.py`); stored gradient Whiles, which only
read their rows, move.

    python iree_limits/checkpoint_gradient_in_dispatch.py

prints the second derivative with those loops on the host and in dispatches, and
the unrolled loop's.
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch


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
    writes_slots = in_dispatch._writes_slots
    for label, rule in [("slot-writing loops on the host", writes_slots),
                        ("slot-writing loops in dispatches", lambda loop: False)]:
        in_dispatch._writes_slots = rule
        try:
            module = whilst.compile(second, x, cache=False)
        finally:
            in_dispatch._writes_slots = writes_slots
        print(f"{label}: {float(module.load()(x)):.4f} ({module.stages[-1][0][:100]})")


if __name__ == "__main__":
    main()
