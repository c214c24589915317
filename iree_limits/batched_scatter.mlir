// IREE 3.13 (llvm-cpu): a scatter with batching dimensions (jax.vmap of a write at a
// per-lane position, here `lax.dynamic_update_index_in_dim(buf, x, k, 0)` as exported
// by jax.export, no whilst) is rejected by iree-compile:
//   'iree_linalg_ext.scatter' op expected indices to be equal to batch rank or batch rank + 1
// whilst gives every exported scatter explicit batch index columns instead
// (whilst/ir/iree_forms/_batched_scatter.py), which compiles and runs.
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu batched_scatter.mlir -o /dev/null
module @jit_write attributes {jax.uses_shape_polymorphism = false, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x3x5xf32>, %arg1: tensor<4xi32>, %arg2: tensor<4x5xf32>) -> (tensor<4x3x5xf32> {jax.result_info = "result"}) {
    %0 = call @dynamic_update_index_in_dim(%arg0, %arg2, %arg1) : (tensor<4x3x5xf32>, tensor<4x5xf32>, tensor<4xi32>) -> tensor<4x3x5xf32>
    return %0 : tensor<4x3x5xf32>
  }
  func.func private @dynamic_update_index_in_dim(%arg0: tensor<4x3x5xf32>, %arg1: tensor<4x5xf32>, %arg2: tensor<4xi32>) -> tensor<4x3x5xf32> {
    %c = stablehlo.constant dense<2147483647> : tensor<i32>
    %c_0 = stablehlo.constant dense<[2, 0]> : tensor<2xi32>
    %c_1 = stablehlo.constant dense<3> : tensor<i32>
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [0, 2] : (tensor<4x5xf32>) -> tensor<4x1x5xf32>
    %1 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<4xi32>
    %2 = stablehlo.compare LT, %arg2, %1, SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    %3 = stablehlo.broadcast_in_dim %c_1, dims = [] : (tensor<i32>) -> tensor<4xi32>
    %4 = stablehlo.add %arg2, %3 : tensor<4xi32>
    %5 = stablehlo.select %2, %4, %arg2 : tensor<4xi1>, tensor<4xi32>
    %6 = stablehlo.broadcast_in_dim %5, dims = [0] : (tensor<4xi32>) -> tensor<4x1xi32>
    %7 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<4x1xi32>
    %8 = stablehlo.concatenate %6, %7, dim = 1 : (tensor<4x1xi32>, tensor<4x1xi32>) -> tensor<4x2xi32>
    %9 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<2xi32>
    %10 = stablehlo.minimum %c_0, %9 : tensor<2xi32>
    %11 = stablehlo.broadcast_in_dim %10, dims = [1] : (tensor<2xi32>) -> tensor<4x2xi32>
    %12 = stablehlo.broadcast_in_dim %c_2, dims = [] : (tensor<i32>) -> tensor<4x2xi32>
    %13 = stablehlo.clamp %12, %8, %11 : tensor<4x2xi32>
    %14 = "stablehlo.scatter"(%arg0, %13, %0) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1, 2], input_batching_dims = [0], scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1, 2], index_vector_dim = 1>, unique_indices = true}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      stablehlo.return %arg4 : tensor<f32>
    }) : (tensor<4x3x5xf32>, tensor<4x2xi32>, tensor<4x1x5xf32>) -> tensor<4x3x5xf32>
    return %14 : tensor<4x3x5xf32>
  }
}
