// IREE 3.13 (llvm-cpu): a public function with `stream.affinity` (which whilst puts on
// every exported function, see whilst/lowering/_iree.py) that returns a value computed
// from constants alone (here iota * 2; e.g. jnp.linspace(0, 1, 5) returned beside a
// loss) fails to compile:
//   failed to legalize unresolved target materialization from ('!stream.resource<*>')
//   to ('!stream.resource<*>', 'index') that remained live after conversion
// It compiles without the affinity, with a literal constant result, or with the
// result behind an optimization barrier; whilst returns such results through a copy
// (whilst/lowering/_iree_loops.py, constant_results_copied).
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu computed_constant_result.mlir -o /dev/null
func.func @main(%x: tensor<3xf32>) -> tensor<4xi32> attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
  %i = stablehlo.iota dim = 0 : tensor<4xi32>
  %two = stablehlo.constant dense<2> : tensor<4xi32>
  %r = stablehlo.multiply %i, %two : tensor<4xi32>
  return %r : tensor<4xi32>
}
