// IREE 3.13 (llvm-cpu): a scatter without batching dimensions whose index columns
// address dimensions its window spans (here a window of one row, not inserted, and
// the whole of each row from a start clamped to 0: the gradient of
// `jax.vmap(lambda k: lax.dynamic_slice(ys, (k, 0), (1, 2)))(ks)`, as diffrax's dense
// output is read at several times) is rejected by iree-compile:
//   'iree_linalg_ext.scatter' op expected indices to be equal to batch rank or batch rank + 1
// The same scatter with the row dimension inserted and no column for the whole-row
// window (`x[k] += v[:, 0]`) compiles and runs; whilst writes such scatters so
// (whilst/ir/iree_forms/_batched_scatter.py).
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu indexed_window_scatter.mlir -o /dev/null
func.func @main(%rows: tensor<64x2xf32>, %starts: tensor<4x2xi32>, %updates: tensor<4x1x2xf32>) -> tensor<64x2xf32> {
  %0 = "stablehlo.scatter"(%rows, %starts, %updates) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1, 2], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<64x2xf32>, tensor<4x2xi32>, tensor<4x1x2xf32>) -> tensor<64x2xf32>
  return %0 : tensor<64x2xf32>
}
