// IREE 3.13 (llvm-cpu): iree-compile fails on a scatter of unsigned integers in a
// loop ("failed to legalize unresolved materialization from ('tensor<64x2xi32>') to
// ('tensor<64x2xui32>') that remained live after conversion"): here rows of uint32
// written one per step at the counter, as whilst writes the checkpoints of a loop
// carrying PRNG key data. The same loop on float32 or int32 rows compiles. whilst
// writes unsigned rows with dynamic_update_slice (whilst/ir/iree_forms/_device_indexing.py, the
// pushes of whilst/ir/_while_lowering.py), at one readback of the position per step.
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu unsigned_scatter.mlir -o /dev/null
func.func @main(%x: tensor<2xui32>, %n: tensor<i32>) -> (tensor<64x2xui32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %z = stablehlo.constant dense<0> : tensor<64x2xui32>
  %r:3 = stablehlo.while(%i = %c0, %y = %x, %st = %z) : tensor<i32>, tensor<2xui32>, tensor<64x2xui32>
  cond {
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %row = stablehlo.reshape %y : (tensor<2xui32>) -> tensor<1x2xui32>
    %idx = stablehlo.reshape %i : (tensor<i32>) -> tensor<1x1xi32>
    %st1 = "stablehlo.scatter"(%st, %idx, %row) ({
      ^bb0(%u0: tensor<ui32>, %u1: tensor<ui32>):
        stablehlo.return %u1 : tensor<ui32>
    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = true, unique_indices = true} : (tensor<64x2xui32>, tensor<1x1xi32>, tensor<1x2xui32>) -> tensor<64x2xui32>
    %y1 = stablehlo.add %y, %y : tensor<2xui32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %i1, %y1, %st1 : tensor<i32>, tensor<2xui32>, tensor<64x2xui32>
  }
  return %r#2 : tensor<64x2xui32>
}
