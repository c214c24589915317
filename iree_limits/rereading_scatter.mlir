// IREE 3.13 (llvm-cpu, aggressive fusion): a scatter whose update row is computed from
// a gather of the scatter's own operand (`buf[k] = where(save, x, buf[k])`, what
// whilst's `write_slot` emits for a checkpoint slot) fuses into one dispatch that reads
// the buffer it writes in place, and llvm-cpu codegen fails:
//   'linalg.generic' op write affecting operations on global resources are restricted
//   to workgroup distributed contexts.
// With the default fusion it compiles. A budget gradient's module (the forward and the
// gradient While over chunks each write a slot so) failed this way, and whilst compiled
// it with the default fusion: 52 and 106 dispatches per iteration of the chunk loops
// against 10 and 55 (bench/NOTES.md, issue 41). With `unique_indices = false` it
// compiles (unique_scatter_into_a_row.mlir); whilst clears the flag of scatters at one
// index (`one_index_scatters_not_unique`, whilst/lowering/_iree_one_index_scatters.py).
// It fenced such updates before (an optimization barrier on `%upd`), which also
// compiles, but a barrier in a loop body is a host wait (barrier_in_loop_body.mlir).
// iree-compile rereading_scatter.mlir --iree-input-type=stablehlo \
//   --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//   --iree-dispatch-creation-enable-aggressive-fusion=true
func.func @main(%slots: tensor<64x64xf32>, %x: tensor<64xf32>, %k: tensor<i32>, %save: tensor<i1>) -> tensor<64x64xf32> {
  %idx = stablehlo.reshape %k : (tensor<i32>) -> tensor<1x1xi32>
  %row = "stablehlo.gather"(%slots, %idx) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = true, slice_sizes = array<i64: 1, 64>}> : (tensor<64x64xf32>, tensor<1x1xi32>) -> tensor<1x64xf32>
  %old = stablehlo.reshape %row : (tensor<1x64xf32>) -> tensor<64xf32>
  %mask = stablehlo.broadcast_in_dim %save, dims = [] : (tensor<i1>) -> tensor<64xi1>
  %new = stablehlo.select %mask, %x, %old : tensor<64xi1>, tensor<64xf32>
  %upd = stablehlo.broadcast_in_dim %new, dims = [1] : (tensor<64xf32>) -> tensor<1x64xf32>
  %out = "stablehlo.scatter"(%slots, %idx, %upd) <{indices_are_sorted = true, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<64x64xf32>, tensor<1x1xi32>, tensor<1x64xf32>) -> tensor<64x64xf32>
  return %out : tensor<64x64xf32>
}
