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
import whilst.lowering._iree as iree_lowering
from whilst.lowering._ir_walk import ops_where
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


def unread_results_apart(module):
    """The form before: each result of a carry that starts from a copy behind a
    barrier of its own, read or not; the others behind one."""
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        results = [r for r in loop.results if ir.RankedTensorType(r.type).has_static_shape]
        copied = [r for r in results if _starts_from_copy(loop, r.result_number)]
        rest = [r for r in results if r not in copied]
        with ir.InsertionPoint.after(loop), loop.location:
            for group in [[r] for r in copied] + ([rest] if rest else []):
                barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                              results=[r.type for r in group], operands=group)
                for old, new in zip(group, barrier.results):
                    old.replace_all_uses_except(new, barrier)


def run(fence, driver):
    saved = iree_lowering.loop_results_fenced
    if fence is not None:
        iree_lowering.loop_results_fenced = fence
    try:
        compiled = whilst.compile(jax.jacrev(jax.jacrev(f)), X, cache=False,
                                  loops_in_dispatch=False)
        return np.asarray(compiled.load(driver).main(X))
    except RuntimeError as e:
        return f"failed: {str(e)[:200]}"
    finally:
        iree_lowering.loop_results_fenced = saved


if __name__ == "__main__":
    print("unread result apart  local-task:", run(unread_results_apart, "local-task"))
    print("unread result fenced local-task:", run(None, "local-task"),
          "  local-sync:", run(None, "local-sync"))
    print("want (JAX)          ", np.asarray(jax.jacrev(jax.jacrev(f_unrolled))(X)))
