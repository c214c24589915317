"""IREE 3.13 (llvm-cpu): `acc + zeros.at[i].set(row)` in a loop adds the whole buffer
every step, where XLA updates row i.

JAX transposes a read of row i of a stack (`stack[i]`) into `zeros.at[i].set(ct)`, and
a gradient While adds that to its accumulator every step: the second derivative of a
stored loop accumulates so the cotangent of the rows its first gradient read. IREE
fuses the scatter into zeros with the add into one dispatch over the whole buffer
(and XLA folds the pair into an update of the row), so a loop of n steps over a
stack of n rows costs n^2. The same loop as one scatter that adds the row
(`combine = add`) costs a row per step: whilst rewrites the first form into the
second (`whilst/lowering/_iree_row_accumulations.py`). This script compiles both
forms of a 256-step loop into an accumulator of N rows of 64 floats and prints the
time per call for N = 1024 and 16384 (2-core machine, busy):

    zeros scatter + add  N=1024: 49.49 ms  N=16384: 889.61 ms
    scatter-add          N=1024: 0.95 ms  N=16384: 1.31 ms

    python iree_limits/zeros_scatter_added.py
"""
import time

import numpy as np

STEPS = 256

LOOP = """
func.func @main(%rows: tensor<STEPSx64xf32>) -> tensor<ROWSx64xf32> attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<STEPS> : tensor<i32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %acc0 = stablehlo.broadcast_in_dim %zero, dims = [] : (tensor<f32>) -> tensor<ROWSx64xf32>
  %r:2 = stablehlo.while(%i = %c0, %acc = %acc0) : tensor<i32>, tensor<ROWSx64xf32>
  cond {
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %row = stablehlo.dynamic_slice %rows, %i, %c0, sizes = [1, 64] : (tensor<STEPSx64xf32>, tensor<i32>, tensor<i32>) -> tensor<1x64xf32>
    %idx = stablehlo.reshape %i : (tensor<i32>) -> tensor<1x1xi32>
    %new = ACCUMULATE
    %next = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %next, %new : tensor<i32>, tensor<ROWSx64xf32>
  }
  return %r#1 : tensor<ROWSx64xf32>
}
"""
SCATTER = """"stablehlo.scatter"(INTO, %idx, %row) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}> ({
    ^bb0(%old: tensor<f32>, %upd: tensor<f32>):
      COMBINE
    }) : (tensor<ROWSx64xf32>, tensor<1x1xi32>, tensor<1x64xf32>) -> tensor<ROWSx64xf32>"""
FORMS = {
    "zeros scatter + add": SCATTER.replace("INTO", "%acc0").replace(
        "COMBINE", "stablehlo.return %upd : tensor<f32>")
    + "\n    %new = stablehlo.add %acc, %written : tensor<ROWSx64xf32>",
    "scatter-add": SCATTER.replace("INTO", "%acc").replace(
        "COMBINE", "%s = stablehlo.add %old, %upd : tensor<f32>\n      "
                   "stablehlo.return %s : tensor<f32>"),
}


def module(form: str, rows: int) -> str:
    accumulate = FORMS[form]
    if form == "zeros scatter + add":
        text = LOOP.replace("%new = ACCUMULATE", "%written = " + accumulate)
    else:
        text = LOOP.replace("ACCUMULATE", accumulate)
    return text.replace("STEPS", str(STEPS)).replace("ROWS", str(rows))


def per_call(form: str, rows: int, x) -> float:
    import iree.compiler as compiler
    import iree.runtime as rt

    vmfb = compiler.compile_str(module(form, rows), target_backends=["llvm-cpu"],
                                input_type="stablehlo",
                                extra_args=["--iree-llvmcpu-target-cpu=host"])
    context = rt.SystemContext(config=rt.Config("local-sync"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    main = context.modules.module.main
    out = np.asarray(main(x))
    want = np.zeros((rows, 64), np.float32)
    want[:STEPS] = x
    np.testing.assert_array_equal(out, want)
    start = time.perf_counter()
    for _ in range(20):
        main(x)
    return (time.perf_counter() - start) / 20


if __name__ == "__main__":
    x = np.random.default_rng(0).standard_normal((STEPS, 64)).astype(np.float32)
    for form in FORMS:
        times = "  ".join(f"N={rows}: {per_call(form, rows, x) * 1e3:.2f} ms"
                          for rows in (1024, 16384))
        print(f"{form:20s} {times}")
