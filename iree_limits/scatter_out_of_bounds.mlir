// IREE 3.13 (llvm-cpu): a stablehlo.scatter whose update lies out of bounds is not
// skipped safely (StableHLO and XLA skip it; JAX's default mode for x.at[i].set/add/...
// is "drop", relying on that). Index 8, 9 or 12 is skipped, but -1 or 100000000
// crashes iree-run-module (exit 245, SIGSEGV), and in a Python process it corrupts the
// heap ("corrupted size vs. prev_size"). whilst makes every dropping scatter it
// exports write in bounds (whilst/ir/iree_forms/_index_bounds.py).
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu scatter_out_of_bounds.mlir -o s.vmfb
//   iree-run-module --module=s.vmfb --device=local-sync --function=main \
//     --input="8xf32=0 1 2 3 4 5 6 7" --input="1xi32=-1" --input="f32=42"
func.func @main(%x: tensor<8xf32>, %i: tensor<1xi32>, %v: tensor<f32>) -> tensor<8xf32> {
  %out = "stablehlo.scatter"(%x, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0]>, indices_are_sorted = true, unique_indices = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<8xf32>, tensor<1xi32>, tensor<f32>) -> tensor<8xf32>
  return %out : tensor<8xf32>
}
