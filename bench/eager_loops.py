"""Eager calls of one loop, called again: whilst against jax.lax, same process.

An eager `whilst.lax.fori_loop(0, 3, body, 0)` (no jax.jit around it) called a
second time with the same body, carry types and options reuses its trace and
compiled form (`whilst/frontend/_traced_loops.py`), as `jax.lax.fori_loop` does;
the first call's time (trace and compile) is printed for scale. Loops: the issue's
fori_loop, a `whilst.lax.while_loop` over a vector and a `whilst.while_loop`.

    python bench/eager_loops.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import whilst
import whilst.lax
from _timing import blocking, measure, table


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


if __name__ == "__main__":
    main()
