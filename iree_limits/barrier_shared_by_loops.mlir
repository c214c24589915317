// IREE 3.13 (every target; here llvm-cpu): a value behind an optimization barrier
// (whose size IREE's stream phase does not know where it is made) that two loops start
// from, loops whose first tests are the same (IREE tests each loop's first iteration
// in an `scf.if` before it, and folds the two tests into one), and kept apart by the
// barrier between them: iree-util-propagate-subranges materializes the value's size
// inside the first loop's `scf.if` and uses it for the second loop too:
//   error: operand #6 does not dominate this use
// whilst passes the results of loops that may run no iteration through barriers
// (`_iree_loop_results.py`), and the third derivative of a loop without a bound
// (`bench/higher_order.py --loops float --orders 3`) starts two gradient loops from
// one such result on vulkan-spirv, where its loops stay on the host. Each loop after
// the first that starts from a barrier's result starts from a barrier of its own,
// and the module compiles (whilst/lowering/_iree_loop_results.py).
//   iree-compile --iree-hal-target-device=local --iree-llvmcpu-target-cpu=host \
//     --iree-hal-local-target-device-backends=llvm-cpu barrier_shared_by_loops.mlir -o /dev/null
func.func @main(%x: tensor<4xf32>, %n: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %b = stablehlo.optimization_barrier %x : tensor<4xf32>
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c1 = stablehlo.constant dense<1.0> : tensor<f32>
  %one = stablehlo.constant dense<1.0> : tensor<4xf32>
  %w1:2 = stablehlo.while(%i = %c0, %v = %b) : tensor<f32>, tensor<4xf32>
    cond {
      %t = stablehlo.compare LT, %i, %n, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %t : tensor<i1>
    } do {
      %j = stablehlo.add %i, %c1 : tensor<f32>
      %u = stablehlo.add %v, %one : tensor<4xf32>
      stablehlo.return %j, %u : tensor<f32>, tensor<4xf32>
    }
  %q = stablehlo.optimization_barrier %w1#1 : tensor<4xf32>
  %w2:3 = stablehlo.while(%i = %c0, %v = %b, %p = %q) : tensor<f32>, tensor<4xf32>, tensor<4xf32>
    cond {
      %t = stablehlo.compare LT, %i, %n, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %t : tensor<i1>
    } do {
      %j = stablehlo.add %i, %c1 : tensor<f32>
      %u = stablehlo.multiply %v, %p : tensor<4xf32>
      stablehlo.return %j, %u, %p : tensor<f32>, tensor<4xf32>, tensor<4xf32>
    }
  return %w1#1, %w2#1 : tensor<4xf32>, tensor<4xf32>
}
