"""A loop stepped from the host whose carries start from the results of a loop
moved into a dispatch: with either fusion setting, every call of the module fails
("ref is null; while invoking native function hal.buffer.subspan"), whatever the
input. `jax.grad` of a loop under a `gradient_memory` of a few rows (32 to 256
bytes) makes it: its forward While and its recomputing loop move into dispatches
and its gradient While, which writes slots, stays on the host, its carries
starting from the forward While's results. Leaving either moved loop on the host,
or starting the gradient While's carries from copies, makes it run.

    python iree_limits/dispatch_result_as_loop_init.py

compiles the gradient with and without those copies (`_host_loop_inits_copied`,
`whilst/lowering/_iree_loops_in_dispatch.py`) and prints what a call gives, and
the gradient of the loop unrolled.
"""
import jax
import numpy as np

import whilst
from whilst.lowering import _iree_loops_in_dispatch as in_dispatch


def f(x):
    """y <- 1.5 y + 0.1 while y < 10, a budget of 64 bytes."""
    return whilst.while_loop(lambda i, y: y < 10.0, lambda i, y: (i + 1, y * 1.5 + 0.1),
                             [0, x], gradient_memory=64)[1]


def unrolled(x):
    while x < 10.0:
        x = x * 1.5 + 0.1
    return x


def main():
    x = np.float32(1.0)
    print(f"unrolled, jax.grad: {float(jax.grad(unrolled)(x)):.4f}")
    copied = in_dispatch._host_loop_inits_copied
    for label, rule in [("carries from copies", copied),
                        ("carries from the dispatch's results", lambda module: None)]:
        in_dispatch._host_loop_inits_copied = rule
        try:
            module = whilst.compile(jax.grad(f), x, cache=False)
        finally:
            in_dispatch._host_loop_inits_copied = copied
        try:
            print(f"{label}: {float(module.load('local-sync')(x)):.4f}")
        except Exception as e:  # noqa: BLE001 (what IREE says is the point)
            print(f"{label}: {str(e).splitlines()[0][:160]}")


if __name__ == "__main__":
    main()
