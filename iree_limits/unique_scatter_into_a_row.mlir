// IREE 3.13 (llvm-cpu, every fusion): a scatter flagged `unique_indices = true` whose
// operand is a row of a larger buffer, which it cannot update in place, fails codegen:
//   'linalg.generic' op write affecting operations on global resources are restricted
//   to workgroup distributed contexts.
// The dispatch copies the row into a stack buffer and back outside the distributed
// loop. `jax.jit(lambda a, i: a[1].at[i].set(0.0))` exports this scatter, and the
// third derivative of a loop without a bound (bench/higher_order.py, the float-counted
// cos loop), whose gradient zeroes one element of a cotangent row it still reads,
// failed so with the default fusion. The same scatter with `unique_indices = false`
// compiles, as does rereading_scatter.mlir's; whilst clears the flag on scatters at
// one index that do not update their operand in place, where it says nothing
// (`one_index_scatters_not_unique`, whilst/lowering/_iree_one_index_scatters.py).
// iree-compile unique_scatter_into_a_row.mlir --iree-input-type=stablehlo \
//   --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu
func.func @main(%a: tensor<2x32xf32>, %i: tensor<1x1xi32>) -> tensor<32xf32> {
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %row2 = stablehlo.slice %a [1:2, 0:32] : (tensor<2x32xf32>) -> tensor<1x32xf32>
  %row = stablehlo.reshape %row2 : (tensor<1x32xf32>) -> tensor<32xf32>
  %update = stablehlo.broadcast_in_dim %zero, dims = [] : (tensor<f32>) -> tensor<1xf32>
  %out = "stablehlo.scatter"(%row, %i, %update) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}> ({
  ^bb0(%old: tensor<f32>, %new: tensor<f32>):
    stablehlo.return %new : tensor<f32>
  }) : (tensor<32xf32>, tensor<1x1xi32>, tensor<1xf32>) -> tensor<32xf32>
  return %out : tensor<32xf32>
}
