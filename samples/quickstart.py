"""Quickstart: one data-dependent loop, traced, exported to StableHLO, compiled by IREE
for the host CPU, run through the embedded runtime, and checked against plain Python.

    python samples/quickstart.py

The loop is Heron's method for square roots, run until the estimate stops moving
(the trip count depends on the data), and its gradient with respect to the input.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

import whilst


def heron_sqrt(a):
    """Newton's iteration x <- (x + a/x)/2 until |x*x - a| <= 1e-6 * a."""
    def cond(i, x):
        return jnp.abs(x * x - a) > 1e-6 * a

    def body(i, x):
        return i + 1, 0.5 * (x + a / x)

    steps, root = whilst.while_loop(cond, body, [0, a], maximum_iterations=64,
                                    name="heron")
    return root, steps


def plain_python(a):
    x, steps = a, 0
    while abs(x * x - a) > 1e-6 * a and steps < 64:
        x, steps = 0.5 * (x + a / x), steps + 1
    return x, steps


def main():
    a = np.float32(1234.5)
    stages = {}
    t = time.perf_counter()
    exported = [whilst.export(heron_sqrt, a, name="sqrt"),
                whilst.export(jax.grad(lambda a: heron_sqrt(a)[0]), a, name="dsqrt")]
    stages["trace + export to StableHLO"] = time.perf_counter() - t
    t = time.perf_counter()
    module = whilst.compile(exported, target="llvm-cpu")
    stages["IREE compile (llvm-cpu, host)"] = time.perf_counter() - t
    t = time.perf_counter()
    runtime_module = whilst.runtime.load(module.data)
    (root, steps), droot = runtime_module.sqrt(a), runtime_module.dsqrt(a)
    stages["load + run on the IREE runtime"] = time.perf_counter() - t

    ref_root, ref_steps = plain_python(float(a))
    print("Heron's square root of", a)
    print(f"  IREE:         sqrt = {float(root):.6f} after {int(steps)} steps, "
          f"d sqrt/da = {float(droot):.6f}")
    print(f"  plain Python: sqrt = {ref_root:.6f} after {ref_steps} steps, "
          f"d sqrt/da = {0.5 / ref_root:.6f} (1 / (2 sqrt a))")
    for stage, seconds in stages.items():
        print(f"  {stage:<32} {seconds * 1e3:8.1f} ms")
    assert int(steps) == ref_steps and np.isclose(root, ref_root, rtol=1e-5)
    assert np.isclose(droot, 0.5 / ref_root, rtol=1e-3)


if __name__ == "__main__":
    main()
