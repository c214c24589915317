// IREE 3.13 limitation: a loop that runs no iteration returns its initial carries,
// and IREE frees such a result after its last use as if the loop had made it, but
// it packed the initial carry `%j` into one allocation with the stack `%s`, which is
// read after the loop: with n = 0 that allocation is freed before the read.
// local-sync happens to run it (0.3 0.3 0.3 for n = 0, 0.291238 ... for n = 2);
// local-task and vulkan fail for n = 0:
//   FAILED_PRECONDITION; transient buffer has not been committed; ensure the alloca
//   signal semaphores are satisfied before accessing it   (local-task)
//   FAILED_PRECONDITION; transient buffer has no staged Vulkan backing   (vulkan)
// `--compile-to=stream` shows `stream.resource.dealloca origin` of the loop's carry of
// `%j`, whose initial value is the allocation that also holds `%s`. The loop's results
// passed through one `stablehlo.optimization_barrier` (what whilst emits,
// whilst/lowering/_iree_loop_results.py) run on every driver.
//   iree-compile zero_trip_loop_result.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-llvmcpu-target-cpu=host -o m.vmfb
//   iree-run-module --module=m.vmfb --device=local-task --input="3xf32=0.3 0.3 0.3" \
//     --input="i32=0"
// (`--iree-hal-target-device=vulkan` and `--device=vulkan` for Vulkan.)
module {
  func.func public @main(%x: tensor<3xf32>, %n: tensor<i32>) -> tensor<3xf32> attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %zeros = stablehlo.constant dense<0.0> : tensor<4x3xf32>
    %r:4 = stablehlo.while(%i = %c0, %j = %c0, %y = %x, %s = %zeros) : tensor<i32>, tensor<i32>, tensor<3xf32>, tensor<4x3xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %y1 = stablehlo.sine %y : tensor<3xf32>
      %row = stablehlo.reshape %y1 : (tensor<3xf32>) -> tensor<1x3xf32>
      %s1 = stablehlo.dynamic_update_slice %s, %row, %j, %c0 : (tensor<4x3xf32>, tensor<1x3xf32>, tensor<i32>, tensor<i32>) -> tensor<4x3xf32>
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %j1 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %i1, %j1, %y1, %s1 : tensor<i32>, tensor<i32>, tensor<3xf32>, tensor<4x3xf32>
    }
    %row = stablehlo.dynamic_slice %r#3, %r#1, %c0, sizes = [1, 3] : (tensor<4x3xf32>, tensor<i32>, tensor<i32>) -> tensor<1x3xf32>
    %v = stablehlo.reshape %row : (tensor<1x3xf32>) -> tensor<3xf32>
    %o = stablehlo.add %v, %r#2 : tensor<3xf32>
    return %o : tensor<3xf32>
  }
}
