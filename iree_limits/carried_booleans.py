"""IREE 3.13 (vulkan-spirv, run on an NVIDIA H100 with the 580 driver): booleans
(i1 tensors) that a `stablehlo.while` carries, and small boolean results, come
back wrong on the `vulkan` driver; the same modules are right on `local-sync`
and `cuda` (what was measured: README.md).

Modules prepared for Vulkan carry and store every boolean as int32 0 or 1
(`booleans_as_int32`, whilst/lowering/_iree_narrow_types.py); without it the
LSTM rows of bench/gpu_check.py fail on vulkan.

This script compiles the comparison below for llvm-cpu and vulkan-spirv and,
where a Vulkan device exists, prints both drivers' results (on the H100:
`[True, False, True]` and `[False, False, False]`):

    python iree_limits/carried_booleans.py
"""
import numpy as np
from iree import runtime as rt
from iree.compiler import tools

FLAGS = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local,vulkan",
         "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]

SMALL_COMPARISON = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xi1> {
  %zero = stablehlo.constant dense<0.0> : tensor<3xf32>
  %p = stablehlo.compare GT, %x, %zero : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  return %p : tensor<3xi1>
}
"""


def run(text, args):
    vmfb = tools.compile_str(text, extra_args=FLAGS)
    results = {}
    for driver in ("local-sync", "vulkan"):
        try:
            config = rt.Config(driver)
        except Exception as e:  # noqa: BLE001 - no such device here
            results[driver] = f"no device ({str(e).splitlines()[0][:60]})"
            continue
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
        results[driver] = [np.asarray(ctx.modules.module.main(a).to_host()).tolist()
                           for a in args]
    return results


if __name__ == "__main__":
    print("x > 0 for x = [1, -1, 2]:", run(SMALL_COMPARISON,
                                          [np.array([1.0, -1.0, 2.0], np.float32)]))
