"""A loop stepped from the host whose carries start from the results of a loop
moved into a dispatch: with either fusion setting, every call of the module fails
("ref is null; while invoking native function hal.buffer.subspan"), whatever the
input. `jax.grad` of a loop under a `gradient_memory` of a few rows (32 to 256
bytes) makes it: its forward While and its recomputing loop move into dispatches
and its gradient While, which writes slots, stays on the host, its carries
starting from the forward While's results. Leaving either moved loop on the host,
or starting the gradient While's carries from copies, makes it run (whilst's
forms of that gradient have since changed, and it now runs without copies too).
A host loop that starts a carry from a copy of such a result and reads the
result itself in its body fails the same way: `jax.grad` of an 8-step loop
counted from `jnp.int32(0)` under the default policy, whose gradient While over
chunks starts from and reads the step count of the forward While over chunks,
moved. It runs with no copy, or with copies for both. Neither program fails
any more, with copies or without (the second since before 2026-12-02; the first's
gradient While now moves too), so the copies await a program that needs them or
a check that none does (bench/NOTES.md).

    python iree_limits/dispatch_result_as_loop_init.py

compiles both gradients with copies for the carries and the body's reads
(`_host_loop_inits_copied`, `whilst/lowering/_iree_loops_in_dispatch.py`), for
the carries only, and with none, and prints what a call gives, and the gradient
of the loop unrolled.
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch
from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import opaque_copy


def f(x):
    """y <- 1.5 y + 0.1 while y < 10, a budget of 64 bytes."""
    return whilst.while_loop(lambda i, y: y < 10.0, lambda i, y: (i + 1, y * 1.5 + 0.1),
                             [0, x], gradient_memory=64)[1]


def unrolled(x):
    while x < 10.0:
        x = x * 1.5 + 0.1
    return x


def g(y, a):
    """sum(y) after y <- sin(a y) * 0.9 + 0.1 over 3 floats, 8 steps counted from
    `jnp.int32(0)`, default policy; the gradient with respect to y and a."""
    return jnp.sum(whilst.while_loop(lambda i, y: i < 8,
                                     lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                                     [jnp.int32(0), y])[1])


def g_unrolled(y, a):
    for _ in range(8):
        y = jnp.sin(a * y) * 0.9 + 0.1
    return jnp.sum(y)


def carries_copied(module):
    """`_host_loop_inits_copied` for the carries only."""
    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        for index, value in enumerate(loop.operands):
            if in_dispatch._region_result(value):
                loop.operands[index] = opaque_copy(value, loop, index)


def main():
    copied = in_dispatch._host_loop_inits_copied
    cases = [(f, unrolled, (np.float32(1.0),)),
             (g, g_unrolled, (np.array([0.1, 0.5, 1.0], np.float32), np.float32(1.1)))]
    for fn, oracle, args in cases:
        argnums = tuple(range(len(args)))
        print(f"{fn.__doc__}\n  unrolled, jax.grad: "
              f"{float(jax.grad(oracle, argnums)(*args)[-1]):.4f}")
        for label, rule in [("copies for carries and reads", copied),
                            ("copies for carries only", carries_copied),
                            ("no copy", lambda module: None)]:
            in_dispatch._host_loop_inits_copied = rule
            try:
                module = whilst.compile(jax.grad(fn, argnums), *args, cache=False)
            finally:
                in_dispatch._host_loop_inits_copied = copied
            try:
                print(f"  {label}: {float(module.load('local-sync')(*args)[-1]):.4f}")
            except Exception as e:  # noqa: BLE001 (what IREE says is the point)
                print(f"  {label}: {str(e).splitlines()[0][:160]}")


if __name__ == "__main__":
    main()
