// IREE 3.13 (llvm-cpu): a loop whose cond returns a carried predicate that the body
// recomputes without reading it (whilst's loop shape for conds that read the carry,
// before whilst/ir/_while_lowering.py AND-ed in the carried predicate) fails in
// ConvertToStreamPass:
//   'scf.while' op along control flow edge from Operation scf.condition to Region #1:
//   region branch point has 4 operands, but region successor needs 6 inputs
// unless IREE's loop-invariant code motion finds something to hoist out of the body
// (then it emits a guarded do-while, which converts). Here ops before the loop
// produce every tensor type the body does, so CSE leaves nothing to hoist; in whilst
// this happened to jax.vmap(jax.grad(...)) of a loop past its gradient_memory with 3
// tail checkpoints of a length-3 carry (tests/iree/test_iree_corpus.py budget_vmap_of_grad).
// Returning `stablehlo.and %p2, %p` instead of `%p2` compiles and runs correctly.
// iree-compile unread_loop_predicate.mlir --iree-input-type=stablehlo \
//   --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu
func.func @main(%n: tensor<4xi32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<4xi32>
  %f = stablehlo.constant dense<false> : tensor<i1>
  %a0 = stablehlo.compare GT, %n, %c0, SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
  %p0 = stablehlo.reduce(%a0 init: %f) applies stablehlo.or across dimensions = [0] : (tensor<4xi1>, tensor<i1>) -> tensor<i1>
  %xx = stablehlo.multiply %x, %x : tensor<4xf32>
  %nn = stablehlo.abs %n : tensor<4xi32>
  %r:3 = stablehlo.while(%rem = %nn, %p = %p0, %y = %xx) : tensor<4xi32>, tensor<i1>, tensor<4xf32>
  cond {
    stablehlo.return %p : tensor<i1>
  } do {
    %c0b = stablehlo.constant dense<0> : tensor<4xi32>
    %fb = stablehlo.constant dense<false> : tensor<i1>
    %k = stablehlo.constant dense<1.5> : tensor<4xf32>
    %active = stablehlo.compare GT, %rem, %c0b, SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    %y1 = stablehlo.multiply %y, %k : tensor<4xf32>
    %y2 = stablehlo.select %active, %y1, %y : tensor<4xi1>, tensor<4xf32>
    %one = stablehlo.convert %active : (tensor<4xi1>) -> tensor<4xi32>
    %rem2 = stablehlo.subtract %rem, %one : tensor<4xi32>
    %a = stablehlo.compare GT, %rem2, %c0b, SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    %p2 = stablehlo.reduce(%a init: %fb) applies stablehlo.or across dimensions = [0] : (tensor<4xi1>, tensor<i1>) -> tensor<i1>
    stablehlo.return %rem2, %p2, %y2 : tensor<4xi32>, tensor<i1>, tensor<4xf32>
  }
  return %r#2 : tensor<4xf32>
}
