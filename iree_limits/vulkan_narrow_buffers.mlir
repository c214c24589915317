// IREE 3.13 limitation: for a Vulkan target without 8- and 16-bit storage buffers
// (the default, vp_android_baseline_2022), iree-compile packs i1 (stored as i8), i8,
// i16 and f16 tensors into 32-bit words and its shaders read and write whole words,
// also past the end of a binding whose length is not a multiple of 4 bytes. A device
// that checks bounds (lavapipe) drops those accesses; others touch the neighbours.
// On lavapipe `@main` returns 00 00 00 for `x > 0` (expected 01 00 01), and `@scale`
// reads its i8[3] input as zeros (expected 4.5 8 1.25). The same functions with
// 32-bit arguments and results (what whilst emits for Vulkan,
// whilst/lowering/_iree_narrow_types.py) are right.
//   iree-compile vulkan_narrow_buffers.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=vulkan -o m.vmfb
//   iree-run-module --module=m.vmfb --device=vulkan --function=main \
//     --input="3xf32=1.5 -2 0.25"
//   iree-run-module --module=m.vmfb --device=vulkan --function=scale \
//     --input="3xi8=3 -4 5" --input="3xf32=1.5 -2 0.25"
module {
  func.func public @main(%x: tensor<3xf32>) -> tensor<3xi1> {
    %zero = stablehlo.constant dense<0.0> : tensor<3xf32>
    %p = stablehlo.compare GT, %x, %zero, FLOAT : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
    return %p : tensor<3xi1>
  }
  func.func public @scale(%n: tensor<3xi8>, %x: tensor<3xf32>) -> tensor<3xf32> {
    %f = stablehlo.convert %n : (tensor<3xi8>) -> tensor<3xf32>
    %y = stablehlo.multiply %f, %x : tensor<3xf32>
    return %y : tensor<3xf32>
  }
}
