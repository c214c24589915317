// IREE 3.13 (llvm-cpu): a loop carry that neither the cond nor the body reads (here
// `%prev`, the previous value of `%y`, as diffrax's and optimistix's loops carry)
// makes iree-compile fail after it rotates the loop and a canonicalization drops the
// carry:
//   'scf.while' op along control flow edge from Operation scf.condition to Region #1:
//   region branch point has 4 operands, but region successor needs 2 inputs
// (in larger modules, such as a diffrax solve, a segfault in ScfWhileOpConversion).
// Plain `jax.export` of `lax.while_loop` emits such carries. Reading the carry in the
// body compiles and runs correctly: e.g. `%k:2 = stablehlo.optimization_barrier %y, %prev`
// and `%k#0` returned in place of `%y`; whilst reads it by a select on a `True` the body
// computes (whilst/lowering/_iree_unread_carries.py). A carry whose new value is a
// constant (`stablehlo.return %y1, %c0`) fails the same way.
// So does a carry read only by a select on a constant predicate that picks the other
// operand (`stablehlo.select %true, %false, %flag`): IREE folds the select first
// (`folded_carries_loop` in tests/iree/test_unread_carries.py crashed iree-compile so).
// iree-compile unread_loop_carry.mlir --iree-input-type=stablehlo \
//   --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu
func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %hundred = stablehlo.constant dense<100.0> : tensor<f32>
  %r:2 = stablehlo.while(%y = %x, %prev = %x) : tensor<2xf32>, tensor<2xf32>
  cond {
    %s = stablehlo.reduce(%y init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
    %lt = stablehlo.compare LT, %s, %hundred, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %y1 = stablehlo.add %y, %y : tensor<2xf32>
    stablehlo.return %y1, %y : tensor<2xf32>, tensor<2xf32>
  }
  return %r#0, %r#1 : tensor<2xf32>, tensor<2xf32>
}
