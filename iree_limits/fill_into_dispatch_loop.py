"""A loop moved into a dispatch that writes rows in place into a stack started
from a zero fill made inside the body of a loop stepped from the host: llvm-cpu
refuses its kernel, "exceeded stack allocation limit of 32768 bytes for function.
Got 1049280 bytes": IREE folds the fill into a constant the kernel keeps in its
stack memory. The same stack started from a fill outside every loop
(`tests/iree/test_loops_in_dispatch.py`, rows past the state bound) or from a
`tensor.empty` compiles. A budget's chunk loop inside its forward While over chunks
has this form, with its residual stacks' zero fill (kept where a stack of that type
is made in an enclosing block, `_leave_uninitialized`, `whilst/lowering/_iree.py`).

    python iree_limits/fill_into_dispatch_loop.py

compiles such a loop with whilst's defaults and prints the compile stage, which
says why it went back to the host. whilst starts a residual stack in a moved
loop from a `tensor.empty` in its dispatch region instead (`_unwritten`,
`whilst/lowering/_iree_loops_in_dispatch.py`); a user's own fill still goes back.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst


def f(x, n):
    """Twice: a stack of 65536 rows of 4 floats from zeros, n rows written, summed."""
    def outer(j, c):
        total, x = c

        def body(s):
            i, x, stack = s
            x = jnp.cos(x) * 0.9 + 0.1
            return i + 1, x, lax.dynamic_update_slice(stack, x[None], (i, 0))

        _, x, stack = lax.while_loop(lambda s: s[0] < n, body,
                                     (0, x, jnp.zeros((65536, 4), jnp.float32)))
        return total + jnp.sum(stack), x
    return lax.fori_loop(0, 2, outer, (0.0, x))


def main():
    module = whilst.compile(f, np.ones(4, np.float32), np.int32(5), cache=False)
    print(module.stages[-1][0])


if __name__ == "__main__":
    main()
