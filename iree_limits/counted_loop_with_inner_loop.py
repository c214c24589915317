"""IREE 3.13 (llvm-cpu): a loop that pushes rows to stacks (the forward While of a
stored gradient), holds a loop in its body (a `lax.scan`) and is bounded by its
trip count (`i < min(bound, steps - k0)` for a cond `k < steps`, whilst's counted
form) stops after its first step: the gradient's loss comes out as after one step.
The same module with the cond tested in the loop (the trip count not used), and
the exported StableHLO run by XLA (`jax.export`'s `call`), give the Python loop's
values. whilst bounds such loops by their cond alone
(`whilst/ir/_while_lowering.py`, `holds_a_loop`); this script builds the module
both ways (`unroll=1`, one step per iteration, is what jax 0.10.2 chose for
tests/iree/test_scan_unroll.py) and prints

    with the workaround    [4.148412, 3.488912]  want [4.148412, 3.488913]
    counted (IREE's bug)   [4.148412, 4.148412]  want [4.148412, 3.488913]

    python iree_limits/counted_loop_with_inner_loop.py
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
import whilst.ir._while_lowering as while_lowering

THETA = np.array([0.3, 0.7], np.float32)
U = np.linspace(-1.0, 1.0, 11).astype(np.float32)


def step(u, theta):
    _, ys = lax.scan(lambda c, x: (c * 0.5 + x * theta[0], c), 0.0, u)
    return u - 0.1 * ys


def loss(u, theta, steps):
    _, u = whilst.while_loop(lambda k, u: k < steps, lambda k, u: (k + 1, step(u, theta)),
                             [0, u], maximum_iterations=6, unroll=1)
    return jnp.sum(u ** 2)


def python_loss(u, theta, steps):
    for _ in range(steps):
        u = step(u, theta)
    return float(jnp.sum(u ** 2))


def losses(counted):
    saved = while_lowering.holds_a_loop
    if counted:
        while_lowering.holds_a_loop = lambda jaxpr: False
    try:
        exported = whilst.export(jax.value_and_grad(loss, argnums=(0, 1)), U, THETA,
                                 np.int32(0), name="grad")
    finally:
        while_lowering.holds_a_loop = saved
    module = whilst.compile(exported).load()
    return [round(float(module.grad(U, THETA, np.int32(n))[0]), 6) for n in (1, 4)]


if __name__ == "__main__":
    want = [round(python_loss(U, THETA, n), 6) for n in (1, 4)]
    print("with the workaround   ", losses(False), " want", want)
    print("counted (IREE's bug)  ", losses(True), " want", want)
