"""IREE 3.13 (llvm-cpu, `local-task`): a buffer that a pending submission reads
through an indirect command buffer's binding table is freed when the program drops
its last reference to it, and its memory is reused before the submission runs.

The gradient of a vmapped loop (each example stops at its own `n`) and a small
second function, compiled into one module as whilst did before
`whilst/lowering/_iree_direct_bindings.py` and called in turn 3000 times each on
`local-task`: the gradient came back wrong in 14-79 of 3000 calls (examples 2
and 3 as if their loops had run one step), and the process sometimes crashed
(a scatter in the forward While at a row read from reused memory). Compiled with
`--iree-hal-indirect-command-buffers=false` (what whilst passes), or run on
`local-sync`, every call is right.

    python iree_limits/local_task_binding_lifetime.py [CALLS]
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import tools

import whilst
from whilst.lowering import flag_sets, prepare, target_metadata
from whilst.lowering._iree_direct_bindings import DIRECT_BINDINGS
from whilst.runtime.seal import seal


def per_example(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 1.5 + 0.1),
                             [0, x], maximum_iterations=8)[1]


def square(x):
    return whilst.while_loop(lambda x: x < 8.0, lambda x: x * x, [x], maximum_iterations=10)


def main(calls: int) -> None:
    xs, ns = np.array([0.1, 0.7, -0.4, 1.2], np.float32), np.array([0, 1, 3, 8], np.int32)
    exports = [whilst.export(jax.grad(lambda xs, ns: jax.vmap(per_example)(xs, ns).sum()),
                             xs, ns, name="grad_of_vmap"),
               whilst.export(jax.grad(square), np.float32(2.0), name="other")]
    text = prepare(exports, targets=target_metadata(["llvm-cpu"]))
    flags = flag_sets(["llvm-cpu"])[0]
    want = np.asarray(jax.grad(lambda xs, ns: jax.vmap(per_example)(xs, ns).sum())(xs, ns))
    for label, used in (("indirect bindings (IREE's default)", [f for f in flags
                                                                if f != DIRECT_BINDINGS]),
                        ("direct bindings (whilst)", flags)):
        module = whilst.runtime.load(seal(tools.compile_str(text, extra_args=used)),
                                     driver="local-task")
        wrong = 0
        for _ in range(calls):
            module.other(np.float32(2.0))
            wrong += not np.allclose(module.grad_of_vmap(xs, ns), want, rtol=1e-4, atol=1e-5)
        print(f"{label}: {wrong} of {calls} gradients wrong")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
