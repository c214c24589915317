"""IREE 3.13 (llvm-cpu and vulkan-spirv): with aggressive dispatch fusion, the
gradient of a vmapped loop whose booleans are int32 0s and 1s (as whilst prepares
modules for Vulkan, whilst/lowering/_iree_narrow_types.py) is wrong: the example
whose loop runs one step gets the gradient of a loop that ran none (1.0, expected
1.1472633). The same module with IREE's default fusion is right, and so is XLA on
the same StableHLO; with i1 booleans aggressive fusion is right too. whilst
compiles modules for vulkan-spirv with the default fusion (`flag_sets`).

    python iree_limits/aggressive_fusion_int32_booleans.py
"""
import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import tools

import whilst
from whilst.lowering import compile_flags, prepare, target_metadata
from whilst.runtime.seal import seal


def per_example(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, jnp.sin(x) * 1.5 + 0.1),
                             [0, x], maximum_iterations=8)[1]


def main() -> None:
    xs, ns = np.array([0.1, 0.7, -0.4, 1.2], np.float32), np.array([0, 1, 3, 8], np.int32)
    fn = jax.grad(lambda xs, ns: jax.vmap(per_example)(xs, ns).sum())
    exported = whilst.export(fn, xs, ns, name="main", targets=["vulkan-spirv"])
    text = prepare([exported], targets=target_metadata(["llvm-cpu", "vulkan-spirv"]))
    print("expected:", np.asarray(fn(xs, ns)))
    for aggressive in (True, False):
        flags = compile_flags(["llvm-cpu"], aggressive_fusion=aggressive)
        module = whilst.runtime.load(seal(tools.compile_str(text, extra_args=flags)))
        print(f"aggressive fusion {aggressive}:", module.main(xs, ns))


if __name__ == "__main__":
    main()
