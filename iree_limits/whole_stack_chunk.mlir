// IREE 3.13 (llvm-cpu): iree-compile crashes (segfault or std::bad_alloc, varying
// between runs) on a loop whose every iteration writes its whole carried stack: here
// a 1-row stack updated by a 1-row dynamic_update_slice, whilst's residual stack of
// jax.grad through a loop with maximum_iterations=1 before whilst/ir/_stacks.py
// `pushed_rows` gave every stack more rows than one chunk of pushes. With a 2-row
// stack (same program otherwise) it compiles and runs.
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu whole_stack_chunk.mlir -o /dev/null
module {
  func.func public @main(%arg0: tensor<f32>) -> (tensor<f32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<1.100000e+00> : tensor<f32>
    %c = stablehlo.constant dense<true> : tensor<i1>
    %c_1 = stablehlo.constant dense<1> : tensor<i32>
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %0 = tensor.empty() : tensor<1xf32>
    %1:4 = stablehlo.while(%iterArg = %c_2, %iterArg_3 = %c_2, %iterArg_4 = %arg0, %iterArg_5 = %0) : tensor<i32>, tensor<i32>, tensor<f32>, tensor<1xf32> attributes {whilst.name = "while", whilst.role = "forward", whilst.unroll = 1 : i32}
    cond {
      %5 = stablehlo.compare LT, %iterArg, %c_1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.and %5, %c : tensor<i1>
      stablehlo.return %6 : tensor<i1>
    } do {
      %5 = stablehlo.add %iterArg_3, %c_1 : tensor<i32>
      %6 = stablehlo.multiply %iterArg_4, %cst_0 : tensor<f32>
      %7 = stablehlo.sine %iterArg_4 : tensor<f32>
      %8 = stablehlo.cosine %iterArg_4 : tensor<f32>
      %9 = stablehlo.add %6, %7 : tensor<f32>
      %10 = stablehlo.add %iterArg, %c_2 : tensor<i32>
      %11 = stablehlo.reshape %8 : (tensor<f32>) -> tensor<1xf32>
      %12 = stablehlo.dynamic_update_slice %iterArg_5, %11, %10 : (tensor<1xf32>, tensor<1xf32>, tensor<i32>) -> tensor<1xf32>
      %13 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      stablehlo.return %13, %5, %9, %12 : tensor<i32>, tensor<i32>, tensor<f32>, tensor<1xf32>
    }
    %2 = stablehlo.subtract %1#0, %c_1 : tensor<i32>
    %3 = stablehlo.add %2, %c_2 : tensor<i32>
    %4:2 = stablehlo.while(%iterArg = %c_2, %iterArg_3 = %cst) : tensor<i32>, tensor<f32> attributes {whilst.name = "while", whilst.role = "gradient", whilst.unroll = 1 : i32}
    cond {
      %5 = stablehlo.compare LT, %iterArg, %1#0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %6 = stablehlo.and %5, %c : tensor<i1>
      stablehlo.return %6 : tensor<i1>
    } do {
      %5 = stablehlo.add %iterArg, %c_2 : tensor<i32>
      %6 = stablehlo.subtract %3, %5 : tensor<i32>
      %7 = stablehlo.dynamic_slice %1#3, %6, sizes = [1] : (tensor<1xf32>, tensor<i32>) -> tensor<1xf32>
      %8 = stablehlo.slice %7 [0:1] : (tensor<1xf32>) -> tensor<1xf32>
      %9 = stablehlo.reshape %8 : (tensor<1xf32>) -> tensor<f32>
      %10 = stablehlo.multiply %iterArg_3, %9 : tensor<f32>
      %11 = stablehlo.multiply %iterArg_3, %cst_0 : tensor<f32>
      %12 = stablehlo.add %10, %11 : tensor<f32>
      %13 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      stablehlo.return %13, %12 : tensor<i32>, tensor<f32>
    }
    return %4#1 : tensor<f32>
  }
}
