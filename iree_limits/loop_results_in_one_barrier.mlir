// IREE 3.13 limitation (llvm-cpu, aggressive and default fusion alike): the results
// of a loop passed through one optimization barrier together (the form
// `loop_results_fenced` had, whilst/lowering/_iree_loop_results.py), with a carry
// that holds the previous state (`b`, as diffrax's step loop carries), fail to
// compile:
//   error: failed to legalize unresolved source materialization from () to
//   ('tensor<2xf32>') that remained live after conversion
// Each result behind a barrier of its own (whilst's form now), or only some of
// `i`, `t`, `stop`, `y`, `a` in the barrier, and the module runs (94.6617, and
// 9.04382 9.80179). In diffrax's event-stopped Tsit5 solve through its own loops
// the one barrier made a module that compiles with aggressive fusion and fails on
// every call ("ref is null ... hal.buffer.subspan"): loop_results_in_one_barrier.py.
//   iree-compile loop_results_in_one_barrier.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-llvmcpu-target-cpu=host -o m.vmfb
//   iree-run-module --module=m.vmfb --function=main --input="2xf32=10 10" \
//     --input="2xf32=0.1 0.02"
module {
  func.func public @main(%y0: tensor<2xf32>, %p: tensor<2xf32>) -> (tensor<f32>, tensor<2xf32>) attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c10 = stablehlo.constant dense<10> : tensor<i32>
    %f0 = stablehlo.constant dense<0.0> : tensor<f32>
    %dt = stablehlo.constant dense<0.1> : tensor<f32>
    %nine = stablehlo.constant dense<9.0> : tensor<f32>
    %false = stablehlo.constant dense<false> : tensor<i1>
    %r:6 = stablehlo.while(%i = %c0, %t = %f0, %stop = %false, %y = %y0, %a = %y0, %b = %y0) : tensor<i32>, tensor<f32>, tensor<i1>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    cond {
      %lt = stablehlo.compare LT, %i, %c10, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %go = stablehlo.not %stop : tensor<i1>
      %c = stablehlo.and %lt, %go : tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %dy = stablehlo.multiply %y, %p : tensor<2xf32>
      %dtb = stablehlo.broadcast_in_dim %dt, dims = [] : (tensor<f32>) -> tensor<2xf32>
      %step = stablehlo.multiply %dy, %dtb : tensor<2xf32>
      %y1 = stablehlo.subtract %y, %step : tensor<2xf32>
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %y10 = stablehlo.slice %y1 [0:1] : (tensor<2xf32>) -> tensor<1xf32>
      %y1s = stablehlo.reshape %y10 : (tensor<1xf32>) -> tensor<f32>
      %t1 = stablehlo.add %t, %y1s : tensor<f32>
      %s1 = stablehlo.compare LT, %y1s, %nine, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %ab = stablehlo.add %a, %b : tensor<2xf32>
      %a1 = stablehlo.add %ab, %step : tensor<2xf32>
      stablehlo.return %i1, %t1, %s1, %y1, %a1, %y : tensor<i32>, tensor<f32>, tensor<i1>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    }
    %f:6 = stablehlo.optimization_barrier %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<i32>, tensor<f32>, tensor<i1>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
    return %f#1, %f#3 : tensor<f32>, tensor<2xf32>
  }
}
