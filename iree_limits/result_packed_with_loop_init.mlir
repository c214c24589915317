// IREE 3.13 limitation: a function that returns a value computed before a loop,
// which IREE packs into one allocation with the loop's initial carries, compiles
// but fails on every call (local-sync and local-task):
//   INVALID_ARGUMENT; ref is null; while invoking native function
//   hal.buffer_view.create
// `--compile-to=stream` shows the returned loss exported as a subview of the
// resource that also holds the gradient While's initial carry, which the loop
// takes over. Here: jax.value_and_grad(loss, argnums=(0, 1)) of a 6-step whilst
// loop, prepared as whilst did before `results_after_loops`; grads alone, or the
// loss returned through a copy made after the gradient While (what whilst now
// emits), run: 1.08931, [-0.0366701 1.01679 -0.021433], [4.23749 0].
//   iree-compile result_packed_with_loop_init.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=local --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-llvmcpu-target-cpu=host -o m.vmfb
//   iree-run-module --module=m.vmfb --function=main --input="3xf32=-1 0 1" \
//     --input="2xf32=0.3 0.7" --input="i32=2"
module {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<2xf32>, %arg2: tensor<i32>) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<3xf32> {jax.result_info = "result[1][0]"}, tensor<2xf32> {jax.result_info = "result[1][1]"}) attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
    %c = stablehlo.constant dense<0> : tensor<9xi32>
    %c_0 = stablehlo.constant dense<1> : tensor<9xi32>
    %c_1 = stablehlo.constant dense<2> : tensor<9xi32>
    %c_2 = stablehlo.constant dense<3> : tensor<9xi32>
    %c_3 = stablehlo.constant dense<4> : tensor<9xi32>
    %c_4 = stablehlo.constant dense<5> : tensor<9xi32>
    %c_5 = stablehlo.constant dense<6> : tensor<9xi32>
    %c_6 = stablehlo.constant dense<7> : tensor<9xi32>
    %c_7 = stablehlo.constant dense<true> : tensor<i1>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_8 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %c_9 = stablehlo.constant dense<1> : tensor<i32>
    %cst_10 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c_11 = stablehlo.constant dense<0> : tensor<i32>
    %c_12 = stablehlo.constant dense<6> : tensor<i32>
    %0 = stablehlo.slice %arg1 [0:1] : (tensor<2xf32>) -> tensor<1xf32>
    %1 = stablehlo.reshape %0 : (tensor<1xf32>) -> tensor<f32>
    %2 = stablehlo.compare LT, %c_11, %c_12, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %3 = stablehlo.convert %c_11 : tensor<i32>
    %4 = stablehlo.compare LT, %3, %arg2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %5 = stablehlo.and %2, %4 : tensor<i1>
    %6 = tensor.empty() : tensor<6x9xf32>
    %7:5 = stablehlo.while(%iterArg = %c_11, %iterArg_13 = %5, %iterArg_14 = %c_11, %iterArg_15 = %arg0, %iterArg_16 = %6) : tensor<i32>, tensor<i1>, tensor<i32>, tensor<3xf32>, tensor<6x9xf32> attributes {whilst.name = "while", whilst.role = "forward", whilst.unroll = 1 : i32}
    cond {
      stablehlo.return %iterArg_13 : tensor<i1>
    } do {
      %18 = stablehlo.add %iterArg_14, %c_9 : tensor<i32>
      %19 = stablehlo.cosine %iterArg_15 : tensor<3xf32>
      %20 = stablehlo.sine %iterArg_15 : tensor<3xf32>
      %21 = stablehlo.multiply %iterArg_15, %19 : tensor<3xf32>
      %22 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<3xf32>
      %23 = stablehlo.add %21, %22 : tensor<3xf32>
      %24 = stablehlo.slice %20 [0:1] : (tensor<3xf32>) -> tensor<1xf32>
      %25 = stablehlo.slice %20 [1:2] : (tensor<3xf32>) -> tensor<1xf32>
      %26 = stablehlo.slice %20 [2:3] : (tensor<3xf32>) -> tensor<1xf32>
      %27 = stablehlo.slice %19 [0:1] : (tensor<3xf32>) -> tensor<1xf32>
      %28 = stablehlo.slice %19 [1:2] : (tensor<3xf32>) -> tensor<1xf32>
      %29 = stablehlo.slice %19 [2:3] : (tensor<3xf32>) -> tensor<1xf32>
      %30 = stablehlo.slice %iterArg_15 [0:1] : (tensor<3xf32>) -> tensor<1xf32>
      %31 = stablehlo.slice %iterArg_15 [1:2] : (tensor<3xf32>) -> tensor<1xf32>
      %32 = stablehlo.slice %iterArg_15 [2:3] : (tensor<3xf32>) -> tensor<1xf32>
      %33 = stablehlo.iota dim = 0 : tensor<9xi32>
      %34 = stablehlo.broadcast_in_dim %32, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %35 = stablehlo.compare EQ, %33, %c_6 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %36 = stablehlo.broadcast_in_dim %31, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %37 = stablehlo.select %35, %36, %34 : tensor<9xi1>, tensor<9xf32>
      %38 = stablehlo.compare EQ, %33, %c_5 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %39 = stablehlo.broadcast_in_dim %30, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %40 = stablehlo.select %38, %39, %37 : tensor<9xi1>, tensor<9xf32>
      %41 = stablehlo.compare EQ, %33, %c_4 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %42 = stablehlo.broadcast_in_dim %29, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %43 = stablehlo.select %41, %42, %40 : tensor<9xi1>, tensor<9xf32>
      %44 = stablehlo.compare EQ, %33, %c_3 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %45 = stablehlo.broadcast_in_dim %28, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %46 = stablehlo.select %44, %45, %43 : tensor<9xi1>, tensor<9xf32>
      %47 = stablehlo.compare EQ, %33, %c_2 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %48 = stablehlo.broadcast_in_dim %27, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %49 = stablehlo.select %47, %48, %46 : tensor<9xi1>, tensor<9xf32>
      %50 = stablehlo.compare EQ, %33, %c_1 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %51 = stablehlo.broadcast_in_dim %26, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %52 = stablehlo.select %50, %51, %49 : tensor<9xi1>, tensor<9xf32>
      %53 = stablehlo.compare EQ, %33, %c_0 : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %54 = stablehlo.broadcast_in_dim %25, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %55 = stablehlo.select %53, %54, %52 : tensor<9xi1>, tensor<9xf32>
      %56 = stablehlo.compare EQ, %33, %c : (tensor<9xi32>, tensor<9xi32>) -> tensor<9xi1>
      %57 = stablehlo.broadcast_in_dim %24, dims = [0] : (tensor<1xf32>) -> tensor<9xf32>
      %58 = stablehlo.select %56, %57, %55 : tensor<9xi1>, tensor<9xf32>
      %59 = stablehlo.add %iterArg, %c_11 : tensor<i32>
      %60 = stablehlo.reshape %58 : (tensor<9xf32>) -> tensor<1x9xf32>
      %61 = stablehlo.dynamic_update_slice %iterArg_16, %60, %59, %c_11 : (tensor<6x9xf32>, tensor<1x9xf32>, tensor<i32>, tensor<i32>) -> tensor<6x9xf32>
      %62 = stablehlo.add %iterArg, %c_9 : tensor<i32>
      %63 = stablehlo.compare LT, %62, %c_12, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %64 = stablehlo.convert %18 : tensor<i32>
      %65 = stablehlo.compare LT, %64, %arg2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %66 = stablehlo.and %63, %65 : tensor<i1>
      stablehlo.return %62, %66, %18, %23, %61 : tensor<i32>, tensor<i1>, tensor<i32>, tensor<3xf32>, tensor<6x9xf32>
    }
    %8 = stablehlo.multiply %7#3, %7#3 : tensor<3xf32>
    %9 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %10 = stablehlo.multiply %9, %7#3 : tensor<3xf32>
    %11 = stablehlo.reduce(%8 init: %cst_10) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %13 = stablehlo.multiply %12, %10 : tensor<3xf32>
    %14 = stablehlo.subtract %7#0, %c_9 : tensor<i32>
    %15 = stablehlo.add %14, %c_11 : tensor<i32>
    %16 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %17:3 = stablehlo.while(%iterArg = %c_11, %iterArg_13 = %13, %iterArg_14 = %16) : tensor<i32>, tensor<3xf32>, tensor<2xf32> attributes {whilst.name = "while", whilst.role = "gradient", whilst.unroll = 1 : i32}
    cond {
      %18 = stablehlo.compare LT, %iterArg, %7#0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %19 = stablehlo.and %18, %c_7 : tensor<i1>
      stablehlo.return %19 : tensor<i1>
    } do {
      %18 = stablehlo.add %iterArg, %c_11 : tensor<i32>
      %19 = stablehlo.subtract %15, %18 : tensor<i32>
      %20 = stablehlo.dynamic_slice %7#4, %19, %c_11, sizes = [1, 9] : (tensor<6x9xf32>, tensor<i32>, tensor<i32>) -> tensor<1x9xf32>
      %21 = stablehlo.slice %20 [0:1, 0:9] : (tensor<1x9xf32>) -> tensor<1x9xf32>
      %22 = stablehlo.reshape %21 : (tensor<1x9xf32>) -> tensor<9xf32>
      %23 = stablehlo.slice %22 [0:3] : (tensor<9xf32>) -> tensor<3xf32>
      %24 = stablehlo.slice %22 [3:6] : (tensor<9xf32>) -> tensor<3xf32>
      %25 = stablehlo.slice %22 [6:9] : (tensor<9xf32>) -> tensor<3xf32>
      %26 = stablehlo.reduce(%iterArg_13 init: %cst_10) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
      %27 = stablehlo.broadcast_in_dim %26, dims = [] : (tensor<f32>) -> tensor<1xf32>
      %28 = stablehlo.pad %27, %cst_10, low = [0], high = [1], interior = [0] : (tensor<1xf32>, tensor<f32>) -> tensor<2xf32>
      %29 = stablehlo.multiply %25, %iterArg_13 : tensor<3xf32>
      %30 = stablehlo.multiply %iterArg_13, %24 : tensor<3xf32>
      %31 = stablehlo.negate %29 : tensor<3xf32>
      %32 = stablehlo.multiply %31, %23 : tensor<3xf32>
      %33 = stablehlo.add %30, %32 : tensor<3xf32>
      %34 = stablehlo.add %iterArg_14, %28 : tensor<2xf32>
      %35 = stablehlo.add %iterArg, %c_9 : tensor<i32>
      stablehlo.return %35, %33, %34 : tensor<i32>, tensor<3xf32>, tensor<2xf32>
    }
    return %11, %17#1, %17#2 : tensor<f32>, tensor<3xf32>, tensor<2xf32>
  }
}

