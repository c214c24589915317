"""IREE 3.13 (llvm-cpu): two loop carries that start from one value share a buffer
(`equal_barrier_copies.py`), and a copy `init | barrier(false)` of an all-true
boolean init is no copy: IREE folds `true | x` to `true`, and the copies start from
one splat again. Below, three boolean masks start all true, two of them from copies
made so; with the loop stepped from the host, all three are one buffer. So
did the gradient of diffrax's Tsit5 under `WhilstAdjoint(checkpoints=8)` in that
form (two boolean checkpoint arrays of its forward While; `[1062, -5426, -2.52,
32.9]` against `[1097, -5767, 3.68, -28.7]`). whilst copies booleans with `xor`
(`identity_element`, `whilst/lowering/_iree_loops.py`), which reads its operand
whatever the init holds. This script prints

    'or' copies   [[0 0 0 1 1 1 1 1], [0 0 0 1 1 1 1 1], [0 0 0 1 1 1 1 1]]
    'xor' copies  [[0 0 0 1 1 1 1 1], [1 1 1 1 1 1 1 1], [1 1 1 1 1 1 1 1]]
    want (numpy)  [[0 0 0 1 1 1 1 1], [1 1 1 1 1 1 1 1], [1 1 1 1 1 1 1 1]]

    python iree_limits/all_true_boolean_copies.py
"""
import jax.numpy as jnp
import numpy as np

import whilst
import whilst.lowering._iree_loops as iree_loops


def three_masks(n, fill=True):
    """Three boolean masks that start equal (all `fill`); for i < n the first clears
    element i, the second copies its element i to i + 1, the third sets element
    7 - i to the second's element i."""
    def body(i, a, b, c):
        return (i + 1, a.at[i].set(False), b.at[i + 1].set(b[i]), c.at[7 - i].set(b[i]))
    start = jnp.full(8, fill)
    return whilst.while_loop(lambda i, *masks: i < n, body, [0, start, start, start])[1:]


def numpy_three_masks(n, fill=True):
    a, b, c = (np.full(8, fill) for _ in range(3))
    for i in range(n):
        a[i], c[7 - i] = False, b[i]
        if i + 1 < 8:
            b[i + 1] = b[i]
    return a, b, c


def masks(combine):
    """`three_masks(3)` on IREE, every loop stepped from the host, boolean copies
    made with `stablehlo.{combine}`."""
    saved = iree_loops.identity_element

    def identity_element(element):
        identity, op = saved(element)
        return identity, (f"stablehlo.{combine}" if op == "stablehlo.xor" else op)

    iree_loops.identity_element = identity_element
    try:
        module = whilst.compile(three_masks, np.int32(0), cache=False, loops_in_dispatch=False)
        return module.load()(np.int32(3))
    finally:
        iree_loops.identity_element = saved


def shown(arrays):
    return "[" + ", ".join(str(np.asarray(a).astype(int)).replace("\n", "") for a in arrays) + "]"


if __name__ == "__main__":
    print("'or' copies  ", shown(masks("or")))
    print("'xor' copies ", shown(masks("xor")))
    print("want (numpy) ", shown(numpy_three_masks(3)))
