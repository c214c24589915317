// IREE 3.13 writes each operand of a concatenation into its slice of the result, so
// the elementwise code computing each operand is a dispatch of its own: here the two
// components of a vector field over a batch of 1024 states (`jax.vmap` of
// `jnp.stack([y0 * y1, y0 + y1])`), scaled after the stack. whilst writes such
// stacks as selects of broadcasts (whilst/ir/iree_forms/_stacked_lines.py), which
// IREE fuses into one dispatch.
//
//   iree-compile --iree-input-type=stablehlo --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu --compile-to=stream \
//     iree_limits/stacked_lines.mlir | grep -c 'stream.cmd.dispatch'
//
// prints 5 (each component, a copy of each into its slice, the scaling); as selects
// of broadcasts, 1. The limit is lifted when this prints 1.
func.func @main(%y: tensor<1024x2xf32>) -> tensor<1024x2xf32> {
  %a = stablehlo.slice %y [0:1024, 0:1] : (tensor<1024x2xf32>) -> tensor<1024x1xf32>
  %b = stablehlo.slice %y [0:1024, 1:2] : (tensor<1024x2xf32>) -> tensor<1024x1xf32>
  %f0 = stablehlo.multiply %a, %b : tensor<1024x1xf32>
  %f1 = stablehlo.add %a, %b : tensor<1024x1xf32>
  %f = stablehlo.concatenate %f0, %f1, dim = 1 : (tensor<1024x1xf32>, tensor<1024x1xf32>) -> tensor<1024x2xf32>
  %two = stablehlo.constant dense<2.0> : tensor<1024x2xf32>
  %r = stablehlo.multiply %f, %two : tensor<1024x2xf32>
  return %r : tensor<1024x2xf32>
}
