// IREE 3.13 (llvm-cpu): an optimization barrier in a loop body is host code that awaits
// its operand, so it ends the iteration's command buffer there. In the stream phase
// (`--compile-to=stream`) the loop block below holds two `stream.cmd.execute` and a
// `stream.timepoint.await` between them; with the barrier's value made once before the
// loop (`%z:2 = stablehlo.optimization_barrier %zero, %tag` in the entry block, and
// `%keep = stablehlo.compare GE, %z#0, %zero` in the body) it holds one execute and no
// wait. whilst's loop bodies read the carries they overwrite behind such a guard
// (`select(barrier(i) >= 0, new, old)`, iree_limits/unread_loop_carry.mlir); the guard
// is one opaque zero per function (whilst/lowering/_iree_carry_guards.py), and loops
// that run at least once return their results without a barrier
// (whilst/lowering/_iree_loop_results.py): the vmapped batch of 1024 diffrax solves
// went from 74 to 38 submissions a call (bench/NOTES.md).
// iree-compile barrier_in_loop_body.mlir --iree-input-type=stablehlo \
//   --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//   --iree-dispatch-creation-enable-aggressive-fusion=true --compile-to=stream
func.func @main(%x: tensor<1024xf32>, %n: tensor<i32>) -> tensor<1024xf32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %half = stablehlo.constant dense<0.5> : tensor<1024xf32>
  %r:3 = stablehlo.while(%i = %zero, %y = %x, %prev = %x) : tensor<i32>, tensor<1024xf32>, tensor<1024xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %a = stablehlo.multiply %y, %half : tensor<1024xf32>
    %b = stablehlo.sine %a : tensor<1024xf32>
    %hidden = stablehlo.optimization_barrier %i : tensor<i32>
    %keep = stablehlo.compare GE, %hidden, %zero, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %mask = stablehlo.broadcast_in_dim %keep, dims = [] : (tensor<i1>) -> tensor<1024xi1>
    %p = stablehlo.select %mask, %y, %prev : tensor<1024xi1>, tensor<1024xf32>
    %c = stablehlo.add %b, %a : tensor<1024xf32>
    %i1 = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %i1, %c, %p : tensor<i32>, tensor<1024xf32>, tensor<1024xf32>
  }
  return %r#1 : tensor<1024xf32>
}
