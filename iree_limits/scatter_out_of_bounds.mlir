// IREE 3.13 (llvm-cpu): a stablehlo.scatter whose update lies out of bounds is not
// skipped safely (StableHLO and XLA skip it; JAX's default mode for x.at[i].set/add/...
// is "drop", relying on that). Index 8, 9 or 12 is skipped, but -1 or 100000000
// crashes iree-run-module (exit 245, SIGSEGV), and in a Python process it corrupts the
// heap ("corrupted size vs. prev_size"). A window of rows (@rows, diffrax's stage
// buffer: 8 lanes x 7 stages x 2) at index 7 or 8 is written one row past the
// operand's buffer, under every fusion flag, silently: an allocator that checks the
// bytes past each block (or valgrind) shows it. whilst makes every dropping scatter
// it exports write in bounds (whilst/ir/iree_forms/_index_bounds.py), equinox's
// loop-buffer writes included (_library_primitives.py).
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu scatter_out_of_bounds.mlir -o s.vmfb
//   iree-run-module --module=s.vmfb --device=local-sync --function=main \
//     --input="8xf32=0 1 2 3 4 5 6 7" --input="1xi32=-1" --input="f32=42"
//   iree-run-module --module=s.vmfb --device=local-sync --function=rows \
//     --input="8x7x2xf32=0" --input="1xi32=7" --input="8x2xf32=1"
func.func @main(%x: tensor<8xf32>, %i: tensor<1xi32>, %v: tensor<f32>) -> tensor<8xf32> {
  %out = "stablehlo.scatter"(%x, %i, %v) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0]>, indices_are_sorted = true, unique_indices = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<8xf32>, tensor<1xi32>, tensor<f32>) -> tensor<8xf32>
  return %out : tensor<8xf32>
}

func.func @rows(%x: tensor<8x7x2xf32>, %i: tensor<1xi32>, %v: tensor<8x2xf32>) -> tensor<8x7x2xf32> {
  %out = "stablehlo.scatter"(%x, %i, %v) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]>, unique_indices = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<8x7x2xf32>, tensor<1xi32>, tensor<8x2xf32>) -> tensor<8x7x2xf32>
  return %out : tensor<8x7x2xf32>
}
