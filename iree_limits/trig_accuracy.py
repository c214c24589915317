"""IREE 3.13 (llvm-cpu) computes float32 sin and cos less accurately than XLA, the
more so the larger the argument (its range reduction), and returns huge values or
inf for huge arguments. whilst does not rewrite these: Cephes' sinf/cosf written
in lax ops (reduction by pi/4 in three parts, polynomials on [-pi/4, pi/4]) were
within 8e-8 of the exact values up to |x| = 1e6, and cut the dispatches of the
unrolled sin benchmark loop from 45 to 5 per iteration, but ran it 3-4x slower, so
they were dropped (the times and errors measured: README.md). This prints the
errors against float64 numpy:

    python iree_limits/trig_accuracy.py
"""
import jax.numpy as jnp
import numpy as np

import whilst


def main():
    ranges = {"|x| <= 10": np.linspace(-10, 10, 20001), "|x| <= 200": np.linspace(-200, 200, 20001),
              "huge": np.array([1e10, -1e20, 1e30])}
    for name, fn, ref in [("sin", jnp.sin, np.sin), ("cos", jnp.cos, np.cos)]:
        for label, x in ranges.items():
            x = x.astype(np.float32)
            iree = whilst.compile(fn, x, cache=False).load()(x).astype(np.float64)
            xla = np.asarray(fn(jnp.asarray(x))).astype(np.float64)
            exact = ref(x.astype(np.float64))
            print(f"{name} {label:>10}: max abs error IREE {np.nanmax(np.abs(iree - exact)):.2e}, "
                  f"XLA {np.nanmax(np.abs(xla - exact)):.2e}"
                  + (f"; IREE {iree.tolist()} vs XLA {xla.tolist()}" if label == "huge" else ""))


if __name__ == "__main__":
    main()
