// IREE 3.13 limitation: a loop whose body branches (`stablehlo.case`, JAX's `lax.cond`)
// and carries on a branch result that one branch computes from constants alone fails
// on every call where that branch runs, on the asynchronous drivers:
//   FAILED_PRECONDITION; transient buffer has not been committed; ensure the alloca
//   signal semaphores are satisfied before accessing it; while invoking native
//   function hal.fence.await   (local-task)
//   FAILED_PRECONDITION; Vulkan transient buffer has already been queued for
//   deallocation   (vulkan, x = 0; "... has no staged Vulkan backing" for x = 2.5)
// local-sync runs it: acc = sum(i * x for i in range(n) if i < x), with n = 5: 0 for
// x = 0, 7.5 for x = 2.5, 90 for x = 9 (the constant branch never runs: every driver
// runs that). The case's result passed through a `stablehlo.optimization_barrier`
// before the add (what whilst emits, whilst/lowering/_iree_branch_results.py) runs on
// every driver.
//   iree-compile constant_branch_result.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-llvmcpu-target-cpu=host -o m.vmfb
//   iree-run-module --module=m.vmfb --device=local-task --input=f32=0 --input=i32=5
// (`--iree-hal-target-device=vulkan` and `--device=vulkan` for Vulkan.)
module {
  func.func public @main(%x: tensor<f32>, %n: tensor<i32>) -> tensor<f32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %r:2 = stablehlo.while(%i = %c0, %acc = %zero) : tensor<i32>, tensor<f32>
    cond {
      %go = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %go : tensor<i1>
    } do {
      %fi = stablehlo.convert %i : (tensor<i32>) -> tensor<f32>
      %p = stablehlo.compare LT, %fi, %x, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %k = stablehlo.convert %p : (tensor<i1>) -> tensor<i32>
      %term = "stablehlo.case"(%k) ({
        %none = stablehlo.constant dense<0.0> : tensor<f32>
        stablehlo.return %none : tensor<f32>
      }, {
        %ix = stablehlo.multiply %fi, %x : tensor<f32>
        stablehlo.return %ix : tensor<f32>
      }) : (tensor<i32>) -> tensor<f32>
      %acc1 = stablehlo.add %acc, %term : tensor<f32>
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %i1, %acc1 : tensor<i32>, tensor<f32>
    }
    return %r#1 : tensor<f32>
  }
}
