"""A loop moved into a dispatch that writes rows in place into a stack started
from a fill made in the body of a loop stepped from the host: llvm-cpu refuses
its kernel, "exceeded stack allocation limit of 32768 bytes for function. Got
1049280 bytes": IREE folds the fill into a constant the kernel keeps in its stack
memory. The same stack started from a `tensor.empty`, or filled row by row in the
dispatch, compiles. A budget's chunk loop inside its forward While over chunks
has this form, with its residual stacks' zero fill (kept where a stack of that type
is made in an enclosing block, `_leave_uninitialized`, `whilst/lowering/_iree.py`).

    python iree_limits/fill_into_dispatch_loop.py

compiles such a loop with whilst's defaults, without and with the workaround
(`_stack_init`, `whilst/lowering/_iree_loops_in_dispatch.py`: a residual stack
starts from a `tensor.empty` in the dispatch region, a fill of a constant is
written there row by row), and prints each compile's last stage, which says
whether the loop went back to the host and why.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch


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
    splat = in_dispatch._splat
    for label, rule in [("the fill captured", lambda value: None),
                        ("filled row by row in the dispatch", splat)]:
        in_dispatch._splat = rule
        try:
            module = whilst.compile(f, np.ones(4, np.float32), np.int32(5), cache=False)
        finally:
            in_dispatch._splat = splat
        print(f"{label}: {module.stages[-1][0]}")


if __name__ == "__main__":
    main()
