"""Eager calls of one loop, called again: whilst against jax.lax, same process.

An eager `whilst.lax.fori_loop(0, 3, body, 0)` (no jax.jit around it) called a
second time with the same body, carry types and options reuses its trace and
compiled form (`whilst/frontend/_traced_loops.py`), as `jax.lax.fori_loop` does;
the first call's time (trace and compile) is printed for scale. Loops: the issue's
fori_loop, a `whilst.lax.while_loop` over a vector and a `whilst.while_loop`.

With `--gradients`, eager `jax.grad` (no jax.jit; JAX traces and compiles again on
every call, for `lax.scan` as for whilst) of 64 floats `y <- sin(0.9 y) * 0.9 + 0.1`
for n steps: whilst's loop with `maximum_iterations=n` (its rows fit the default
budget at 10^3 steps), and counted by a float, without a bound (the default budget's
chunks: a loop of 10^3 steps ends in its first, one of 10^4 does not), against
`lax.scan` of n steps; and the second derivative of TensorFlow's
testIteratedGradients loop counted by a float (two steps of `cos`, no bound known)
against `cos(cos(x))`. Time per call, each pair measured interleaved in this process.

    python bench/eager_loops.py [--gradients] [--json OUT.json]
"""
import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
import whilst.lax
from _timing import blocking, machine, measure, table, write_json
from higher_order import cos_twice_float


def add_index(i, c):
    return c + i


def below_ten(x):
    return jnp.sum(x) < 10.0


def doubled(x):
    return x * 2.0


def tf_cond(i, x):
    return jnp.sum(x) < 10.0


def tf_body(i, x):
    return i + 1, x * 2.0


def pair_cond(carry):
    return tf_cond(*carry)


def pair_body(carry):
    return tf_body(*carry)


def main():
    x = np.full(4, 0.1, np.float32)
    pairs = {
        "fori_loop(0, 3)": (lambda: whilst.lax.fori_loop(0, 3, add_index, 0),
                            lambda: lax.fori_loop(0, 3, add_index, 0)),
        "while_loop(f32[4])": (lambda: whilst.lax.while_loop(below_ten, doubled, x),
                               lambda: lax.while_loop(below_ten, doubled, x)),
        "tf while_loop(f32[4])": (lambda: whilst.while_loop(tf_cond, tf_body, [0, x]),
                                  lambda: lax.while_loop(pair_cond, pair_body, (0, x))),
    }
    rows = []
    for name, (ours, theirs) in pairs.items():
        start = time.perf_counter()
        jax.block_until_ready(ours())
        first_ms = (time.perf_counter() - start) * 1e3
        t = measure({"whilst": blocking(ours), "jax": blocking(theirs)}, budget_s=1.0)
        rows.append([name, f"{first_ms:.1f}", f"{t['whilst'].median * 1e3:.3f}",
                     f"{t['jax'].median * 1e3:.3f}",
                     f"{t['whilst'].median / t['jax'].median:.2f}x"])
    table("Eager loop calls (ms; whilst's first call traces and compiles)",
          ["loop", "whilst 1st", "whilst again", "jax again", "whilst/jax"], rows)


def sin_step(y):
    return jnp.sin(0.9 * y) * 0.9 + 0.1


def sin_loss(y, n, bounded):
    """sum(y_n ** 2): whilst's loop, bounded by n or counted by a float."""
    if bounded:
        _, y = whilst.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, sin_step(y)),
                                 [0, y], maximum_iterations=n)
    else:
        _, y = whilst.while_loop(lambda t, y: t < n, lambda t, y: (t + 1.0, sin_step(y)),
                                 [0.0, y])
    return jnp.sum(y ** 2)


def scan_loss(y, n):
    return jnp.sum(lax.scan(lambda y, _: (sin_step(y), None), y, None, length=n)[0] ** 2)


def gradients() -> list[dict]:
    """Eager gradients (module docstring): ms per call of whilst and of JAX."""
    y = np.linspace(-1, 1, 64, dtype=np.float32)
    cases = {}
    for n, bounded in [(1000, True), (1000, False), (10000, False)]:
        label = f"{n} steps, " + ("bounded" if bounded else "float-counted")
        ours = functools.partial(jax.grad(sin_loss), y, n if bounded else float(n), bounded)
        cases[label] = ours, functools.partial(jax.grad(scan_loss), y, n)
    cases["2nd derivative, cos twice"] = (
        functools.partial(jax.grad(jax.grad(cos_twice_float)), 1.0),
        functools.partial(jax.grad(jax.grad(lambda x: jnp.cos(jnp.cos(x)))), 1.0))
    results, rows = [], []
    for label, (ours, theirs) in cases.items():
        np.testing.assert_allclose(ours(), theirs(), rtol=2e-5)
        t = measure({"whilst": blocking(ours), "jax": blocking(theirs)}, budget_s=4.0)
        ratio = t["whilst"].median / t["jax"].median
        results.append(dict(case=label, whilst_s=t["whilst"].median, jax_s=t["jax"].median,
                            ratio=ratio))
        rows.append([label, f"{t['whilst'].median * 1e3:.1f}", f"{t['jax'].median * 1e3:.1f}",
                     f"{ratio:.2f}x"])
    table("Eager jax.grad calls (ms; each traces and compiles again)",
          ["loop", "whilst", "jax", "whilst/jax"], rows)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradients", action="store_true",
                        help="eager gradients against lax.scan's and the unrolled loop's")
    parser.add_argument("--json", help="write the gradients' figures here")
    opts = parser.parse_args()
    if opts.gradients:
        figures = gradients()
        if opts.json:
            write_json(opts.json, dict(machine=machine(), eager_gradients=figures))
    else:
        main()
