// IREE 3.13 scatters along an operand's leading dimensions only: a loop carry
// written along an inner dimension (here [1024, 7, 2] written at [:, s, :], a
// batch of Runge-Kutta stage buffers) is transposed to [7, 1024, 2] and back in
// every iteration, two dispatches that copy the whole carry. whilst carries such a
// carry with the written dimension first (whilst/ir/iree_forms/_rows_first_carries.py).
//
//   iree-compile --iree-input-type=stablehlo --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu --compile-to=stream \
//     iree_limits/inner_axis_scatter_in_loop.mlir | grep -c 'stream.cmd.dispatch.*transpose'
//
// prints 2 (one transpose each way, inside the loop); the limit is lifted when it prints 0.
func.func @main(%ks: tensor<1024x7x2xf32>, %k: tensor<1024x2xf32>) -> tensor<1024x7x2xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %c7 = stablehlo.constant dense<7> : tensor<i32>
  %r:2 = stablehlo.while(%s = %c0, %buf = %ks) : tensor<i32>, tensor<1024x7x2xf32>
    cond {
      %lt = stablehlo.compare LT, %s, %c7, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %f = stablehlo.convert %s : (tensor<i32>) -> tensor<f32>
      %fb = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<1024x2xf32>
      %row = stablehlo.multiply %k, %fb : tensor<1024x2xf32>
      %i = stablehlo.reshape %s : (tensor<i32>) -> tensor<1xi32>
      %new = "stablehlo.scatter"(%buf, %i, %row) <{indices_are_sorted = true,
          scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1],
            inserted_window_dims = [1], scatter_dims_to_operand_dims = [1]>,
          unique_indices = true}> ({
        ^bb0(%a: tensor<f32>, %b: tensor<f32>):
          stablehlo.return %b : tensor<f32>
      }) : (tensor<1024x7x2xf32>, tensor<1xi32>, tensor<1024x2xf32>) -> tensor<1024x7x2xf32>
      %next = stablehlo.add %s, %c1 : tensor<i32>
      stablehlo.return %next, %new : tensor<i32>, tensor<1024x7x2xf32>
    }
  return %r#1 : tensor<1024x7x2xf32>
}
