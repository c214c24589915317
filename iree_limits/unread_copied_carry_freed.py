"""IREE 3.13 (llvm-cpu, local-task): a loop that runs no iteration frees, as it ends,
the allocation its carry started in, values still in use packed beside it.

`jax.jacrev(jax.jacrev(f))` of a loop over 3 floats without a bound (the default
policy) fails on every `local-task` call:

    transient buffer has not been committed; ensure the alloca signal semaphores
    are satisfied before accessing it; while invoking native function
    hal.command_buffer.dispatch

(`local-sync` passes by luck). One of its loops runs no iteration and carries a
`tensor<3xf32>` that starts from a copy of `distinct_loop_inits` (the carry starts
from the same value as another) and whose result nothing reads, so its barrier of its
own was erased (`loop_results_fenced`, whilst/lowering/_iree_loop_results.py). IREE
packs that copy into one allocation with a 42 KB value the program reads after the
loop, and deallocates the carry's buffer at the loop's exit (`hal.device.queue.dealloca
... flags(PreferOrigin)` of the loop's block argument): with no iteration run, that is
the packed allocation. whilst now passes such unread results through the loop's
barrier with its other results. This script compiles the program both ways (every
loop stepped from the host) and prints

    unread result apart  local-task: failed: ... transient buffer has not been committed ...
    unread result fenced local-task: [[33.59 39.36 3.967] ...]   local-sync: [[33.59 ...
    want (JAX)           [[33.59 39.36 3.967] ...]

    python iree_limits/unread_copied_carry_freed.py
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
import whilst.lowering._iree_loop_results as loop_results
from whilst.lowering._iree_loop_results import _starts_from_copy

X = np.array([0.3, 0.7, 1.1], np.float32)


def f(x):
    """sum(y ** 2) after 3 steps of y <- sin(y) x[0] + y x[1], counted by a float."""
    _, y = whilst.while_loop(lambda t, y: t < 3.0,
                             lambda t, y: (t + 1.0, jnp.sin(y) * x[0] + y * x[1]), [0.0, x])
    return jnp.sum(y ** 2)


def f_unrolled(x):
    y = x
    for _ in range(3):
        y = jnp.sin(y) * x[0] + y * x[1]
    return jnp.sum(y ** 2)


def read_or_not(loop, result) -> bool:
    """The rule before: every result of a carry that starts from a copy goes through
    a barrier of its own, read or not."""
    return _starts_from_copy(loop, result.result_number)


def run(before, driver):
    """`jacrev(jacrev(f))(X)` on `driver`, prepared by whilst's rule or, where
    `before`, the rule before."""
    saved = loop_results._fenced_apart
    if before:
        loop_results._fenced_apart = read_or_not
    try:
        compiled = whilst.compile(jax.jacrev(jax.jacrev(f)), X, cache=False,
                                  loops_in_dispatch=False)
        return np.asarray(compiled.load(driver).main(X))
    except RuntimeError as e:
        return f"failed: {str(e)[:200]}"
    finally:
        loop_results._fenced_apart = saved


if __name__ == "__main__":
    print("unread result apart  local-task:", run(True, "local-task"))
    print("unread result fenced local-task:", run(False, "local-task"),
          "  local-sync:", run(False, "local-sync"))
    print("want (JAX)          ", np.asarray(jax.jacrev(jax.jacrev(f_unrolled))(X)))
