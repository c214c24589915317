// IREE 3.13 (llvm-cpu, with and without aggressive fusion): the module compiles, but
// every call fails at run time with "OUT_OF_RANGE; binding count 33 > 32; while
// invoking native function hal.command_buffer.dispatch": dispatch formation makes a
// dispatch of more than 32 bindings, and iree-compile does not refuse it. whilst now
// refuses it at compile time: `compile_module` reads each dispatch's bindings and
// raises CompileError past the runtime's limit (whilst/lowering/_iree_bindings.py;
// tests/iree/test_iree_bindings.py runs this file both ways). Here
// `while i < n: i += 1; x += 1.0` is emitted as 16 unpredicated steps per loop
// iteration, then the last (up to 15) steps run predicated after the loop. IREE
// fuses that chain of predicated counter steps into one dispatch with a result per
// step (each its own binding, of one transient buffer), which the x chain's dispatch
// reads. With unroll 12 it runs; with 16, 24, 32 and 64 it fails (64: 42 bindings).
// The same chain inside a loop body stays under the limit. whilst now puts an
// optimization barrier after every few predicated steps after the loop
// (EPILOGUE_GROUP_CARRIES in whilst/ir/_while_lowering.py); this file is the form
// without it.
//   iree-compile --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu \
//     --iree-global-opt-enable-warn-on-uninitialized-values=false \
//     wide_scalar_dispatch.mlir -o w.vmfb
//   iree-run-module --module=w.vmfb --function=main --input=f32=0 --input=i32=5
module {
  func.func public @main(%arg0: tensor<f32>, %arg1: tensor<i32>) -> (tensor<i32> {jax.result_info = "result[0]"}, tensor<f32> {jax.result_info = "result[1]"}) attributes {iree.reflection = {whilst = "{\22arg_names\22:[\22x\22,\22n\22],\22input_avals\22:[{\22dtype\22:\22float32\22,\22shape\22:[]},{\22dtype\22:\22int32\22,\22shape\22:[]}],\22inputs\22:{\22tuple\22:[{\22leaf\22:null},{\22leaf\22:null}]},\22name\22:\22main\22,\22output_avals\22:[{\22dtype\22:\22int32\22,\22shape\22:[]},{\22dtype\22:\22float32\22,\22shape\22:[]}],\22outputs\22:{\22list\22:[{\22leaf\22:null},{\22leaf\22:null}]}}", whilst_targets = "[{\22arch\22:\22host\22,\22drivers\22:[\22local-sync\22,\22local-task\22],\22name\22:\22llvm-cpu\22}]"}, stream.affinity = #hal.device.affinity<@__device_0>} {
    %c = stablehlo.constant dense<0> : tensor<15xi32>
    %c_0 = stablehlo.constant dense<1> : tensor<15xi32>
    %c_1 = stablehlo.constant dense<2> : tensor<15xi32>
    %c_2 = stablehlo.constant dense<3> : tensor<15xi32>
    %c_3 = stablehlo.constant dense<4> : tensor<15xi32>
    %c_4 = stablehlo.constant dense<5> : tensor<15xi32>
    %c_5 = stablehlo.constant dense<6> : tensor<15xi32>
    %c_6 = stablehlo.constant dense<7> : tensor<15xi32>
    %c_7 = stablehlo.constant dense<8> : tensor<15xi32>
    %c_8 = stablehlo.constant dense<9> : tensor<15xi32>
    %c_9 = stablehlo.constant dense<10> : tensor<15xi32>
    %c_10 = stablehlo.constant dense<11> : tensor<15xi32>
    %c_11 = stablehlo.constant dense<12> : tensor<15xi32>
    %c_12 = stablehlo.constant dense<13> : tensor<15xi32>
    %c_13 = stablehlo.constant dense<true> : tensor<i1>
    %c_14 = stablehlo.constant dense<15> : tensor<i32>
    %c_15 = stablehlo.constant dense<14> : tensor<i32>
    %c_16 = stablehlo.constant dense<13> : tensor<i32>
    %c_17 = stablehlo.constant dense<12> : tensor<i32>
    %c_18 = stablehlo.constant dense<11> : tensor<i32>
    %c_19 = stablehlo.constant dense<10> : tensor<i32>
    %c_20 = stablehlo.constant dense<9> : tensor<i32>
    %c_21 = stablehlo.constant dense<8> : tensor<i32>
    %c_22 = stablehlo.constant dense<7> : tensor<i32>
    %c_23 = stablehlo.constant dense<6> : tensor<i32>
    %c_24 = stablehlo.constant dense<5> : tensor<i32>
    %c_25 = stablehlo.constant dense<4> : tensor<i32>
    %c_26 = stablehlo.constant dense<3> : tensor<i32>
    %c_27 = stablehlo.constant dense<2> : tensor<i32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %c_28 = stablehlo.constant dense<1> : tensor<i32>
    %c_29 = stablehlo.constant dense<16> : tensor<i32>
    %c_30 = stablehlo.constant dense<2147483647> : tensor<i32>
    %c_31 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.compare LT, %c_31, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %1 = stablehlo.convert %c_31 : tensor<i32>
    %2 = stablehlo.compare LT, %1, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %3 = stablehlo.and %0, %2 : tensor<i1>
    %4:5 = stablehlo.while(%iterArg = %c_31, %iterArg_32 = %3, %iterArg_33 = %c_31, %iterArg_34 = %c_31, %iterArg_35 = %arg0) : tensor<i32>, tensor<i1>, tensor<i32>, tensor<i32>, tensor<f32> attributes {whilst.name = "while", whilst.role = "forward", whilst.unroll = 16 : i32}
    cond {
      stablehlo.return %iterArg_32 : tensor<i1>
    } do {
      %148 = stablehlo.add %iterArg_34, %c_28 : tensor<i32>
      %149 = stablehlo.add %iterArg_35, %cst : tensor<f32>
      %150 = stablehlo.add %148, %c_28 : tensor<i32>
      %151 = stablehlo.add %149, %cst : tensor<f32>
      %152 = stablehlo.add %150, %c_28 : tensor<i32>
      %153 = stablehlo.add %151, %cst : tensor<f32>
      %154 = stablehlo.add %152, %c_28 : tensor<i32>
      %155 = stablehlo.add %153, %cst : tensor<f32>
      %156 = stablehlo.add %154, %c_28 : tensor<i32>
      %157 = stablehlo.add %155, %cst : tensor<f32>
      %158 = stablehlo.add %156, %c_28 : tensor<i32>
      %159 = stablehlo.add %157, %cst : tensor<f32>
      %160 = stablehlo.add %158, %c_28 : tensor<i32>
      %161 = stablehlo.add %159, %cst : tensor<f32>
      %162 = stablehlo.add %160, %c_28 : tensor<i32>
      %163 = stablehlo.add %161, %cst : tensor<f32>
      %164 = stablehlo.add %162, %c_28 : tensor<i32>
      %165 = stablehlo.add %163, %cst : tensor<f32>
      %166 = stablehlo.add %164, %c_28 : tensor<i32>
      %167 = stablehlo.add %165, %cst : tensor<f32>
      %168 = stablehlo.add %166, %c_28 : tensor<i32>
      %169 = stablehlo.add %167, %cst : tensor<f32>
      %170 = stablehlo.add %168, %c_28 : tensor<i32>
      %171 = stablehlo.add %169, %cst : tensor<f32>
      %172 = stablehlo.add %170, %c_28 : tensor<i32>
      %173 = stablehlo.add %171, %cst : tensor<f32>
      %174 = stablehlo.add %172, %c_28 : tensor<i32>
      %175 = stablehlo.add %173, %cst : tensor<f32>
      %176 = stablehlo.add %174, %c_28 : tensor<i32>
      %177 = stablehlo.add %175, %cst : tensor<f32>
      %178 = stablehlo.add %176, %c_28 : tensor<i32>
      %179 = stablehlo.add %177, %cst : tensor<f32>
      %180 = stablehlo.broadcast_in_dim %148, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %181 = stablehlo.broadcast_in_dim %150, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %182 = stablehlo.broadcast_in_dim %152, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %183 = stablehlo.broadcast_in_dim %154, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %184 = stablehlo.broadcast_in_dim %156, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %185 = stablehlo.broadcast_in_dim %158, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %186 = stablehlo.broadcast_in_dim %160, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %187 = stablehlo.broadcast_in_dim %162, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %188 = stablehlo.broadcast_in_dim %164, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %189 = stablehlo.broadcast_in_dim %166, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %190 = stablehlo.broadcast_in_dim %168, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %191 = stablehlo.broadcast_in_dim %170, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %192 = stablehlo.broadcast_in_dim %172, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %193 = stablehlo.broadcast_in_dim %174, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %194 = stablehlo.broadcast_in_dim %176, dims = [] : (tensor<i32>) -> tensor<1xi32>
      %195 = stablehlo.iota dim = 0 : tensor<15xi32>
      %196 = stablehlo.broadcast_in_dim %194, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %197 = stablehlo.compare EQ, %195, %c_12 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %198 = stablehlo.broadcast_in_dim %193, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %199 = stablehlo.select %197, %198, %196 : tensor<15xi1>, tensor<15xi32>
      %200 = stablehlo.compare EQ, %195, %c_11 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %201 = stablehlo.broadcast_in_dim %192, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %202 = stablehlo.select %200, %201, %199 : tensor<15xi1>, tensor<15xi32>
      %203 = stablehlo.compare EQ, %195, %c_10 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %204 = stablehlo.broadcast_in_dim %191, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %205 = stablehlo.select %203, %204, %202 : tensor<15xi1>, tensor<15xi32>
      %206 = stablehlo.compare EQ, %195, %c_9 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %207 = stablehlo.broadcast_in_dim %190, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %208 = stablehlo.select %206, %207, %205 : tensor<15xi1>, tensor<15xi32>
      %209 = stablehlo.compare EQ, %195, %c_8 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %210 = stablehlo.broadcast_in_dim %189, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %211 = stablehlo.select %209, %210, %208 : tensor<15xi1>, tensor<15xi32>
      %212 = stablehlo.compare EQ, %195, %c_7 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %213 = stablehlo.broadcast_in_dim %188, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %214 = stablehlo.select %212, %213, %211 : tensor<15xi1>, tensor<15xi32>
      %215 = stablehlo.compare EQ, %195, %c_6 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %216 = stablehlo.broadcast_in_dim %187, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %217 = stablehlo.select %215, %216, %214 : tensor<15xi1>, tensor<15xi32>
      %218 = stablehlo.compare EQ, %195, %c_5 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %219 = stablehlo.broadcast_in_dim %186, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %220 = stablehlo.select %218, %219, %217 : tensor<15xi1>, tensor<15xi32>
      %221 = stablehlo.compare EQ, %195, %c_4 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %222 = stablehlo.broadcast_in_dim %185, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %223 = stablehlo.select %221, %222, %220 : tensor<15xi1>, tensor<15xi32>
      %224 = stablehlo.compare EQ, %195, %c_3 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %225 = stablehlo.broadcast_in_dim %184, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %226 = stablehlo.select %224, %225, %223 : tensor<15xi1>, tensor<15xi32>
      %227 = stablehlo.compare EQ, %195, %c_2 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %228 = stablehlo.broadcast_in_dim %183, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %229 = stablehlo.select %227, %228, %226 : tensor<15xi1>, tensor<15xi32>
      %230 = stablehlo.compare EQ, %195, %c_1 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %231 = stablehlo.broadcast_in_dim %182, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %232 = stablehlo.select %230, %231, %229 : tensor<15xi1>, tensor<15xi32>
      %233 = stablehlo.compare EQ, %195, %c_0 : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %234 = stablehlo.broadcast_in_dim %181, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %235 = stablehlo.select %233, %234, %232 : tensor<15xi1>, tensor<15xi32>
      %236 = stablehlo.compare EQ, %195, %c : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %237 = stablehlo.broadcast_in_dim %180, dims = [0] : (tensor<1xi32>) -> tensor<15xi32>
      %238 = stablehlo.select %236, %237, %235 : tensor<15xi1>, tensor<15xi32>
      %239 = stablehlo.convert %238 : tensor<15xi32>
      %240 = stablehlo.broadcast_in_dim %arg1, dims = [] : (tensor<i32>) -> tensor<15xi32>
      %241 = stablehlo.compare LT, %239, %240, SIGNED : (tensor<15xi32>, tensor<15xi32>) -> tensor<15xi1>
      %242 = stablehlo.subtract %c_30, %c_14 : tensor<i32>
      %243 = stablehlo.compare LT, %iterArg, %242, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %244 = stablehlo.reduce(%241 init: %c_13) applies stablehlo.and across dimensions = [0] : (tensor<15xi1>, tensor<i1>) -> tensor<i1>
      %245 = stablehlo.and %243, %244 : tensor<i1>
      %246 = stablehlo.add %iterArg, %c_29 : tensor<i32>
      %247 = stablehlo.compare LT, %246, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %248 = stablehlo.convert %178 : tensor<i32>
      %249 = stablehlo.compare LT, %248, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %250 = stablehlo.and %247, %249 : tensor<i1>
      %251 = stablehlo.select %245, %178, %iterArg_34 : tensor<i1>, tensor<i32>
      %252 = stablehlo.select %245, %179, %iterArg_35 : tensor<i1>, tensor<f32>
      %253 = stablehlo.convert %245 : (tensor<i1>) -> tensor<i32>
      %254 = stablehlo.multiply %253, %c_29 : tensor<i32>
      %255 = stablehlo.and %250, %iterArg_32 : tensor<i1>
      %256 = stablehlo.and %255, %245 : tensor<i1>
      %257 = stablehlo.add %iterArg_33, %254 : tensor<i32>
      stablehlo.return %246, %256, %257, %251, %252 : tensor<i32>, tensor<i1>, tensor<i32>, tensor<i32>, tensor<f32>
    }
    %5 = stablehlo.compare LT, %4#2, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %6 = stablehlo.convert %4#3 : tensor<i32>
    %7 = stablehlo.compare LT, %6, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %8 = stablehlo.and %5, %7 : tensor<i1>
    %9 = stablehlo.add %4#3, %c_28 : tensor<i32>
    %10 = stablehlo.add %4#4, %cst : tensor<f32>
    %11 = stablehlo.select %8, %9, %4#3 : tensor<i1>, tensor<i32>
    %12 = stablehlo.select %8, %10, %4#4 : tensor<i1>, tensor<f32>
    %13 = stablehlo.add %4#2, %c_28 : tensor<i32>
    %14 = stablehlo.compare LT, %13, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %15 = stablehlo.convert %11 : tensor<i32>
    %16 = stablehlo.compare LT, %15, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %17 = stablehlo.and %14, %16 : tensor<i1>
    %18 = stablehlo.add %11, %c_28 : tensor<i32>
    %19 = stablehlo.add %12, %cst : tensor<f32>
    %20 = stablehlo.select %17, %18, %11 : tensor<i1>, tensor<i32>
    %21 = stablehlo.select %17, %19, %12 : tensor<i1>, tensor<f32>
    %22 = stablehlo.add %4#2, %c_27 : tensor<i32>
    %23 = stablehlo.compare LT, %22, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %24 = stablehlo.convert %20 : tensor<i32>
    %25 = stablehlo.compare LT, %24, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %26 = stablehlo.and %23, %25 : tensor<i1>
    %27 = stablehlo.add %20, %c_28 : tensor<i32>
    %28 = stablehlo.add %21, %cst : tensor<f32>
    %29 = stablehlo.select %26, %27, %20 : tensor<i1>, tensor<i32>
    %30 = stablehlo.select %26, %28, %21 : tensor<i1>, tensor<f32>
    %31 = stablehlo.add %4#2, %c_26 : tensor<i32>
    %32 = stablehlo.compare LT, %31, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %33 = stablehlo.convert %29 : tensor<i32>
    %34 = stablehlo.compare LT, %33, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %35 = stablehlo.and %32, %34 : tensor<i1>
    %36 = stablehlo.add %29, %c_28 : tensor<i32>
    %37 = stablehlo.add %30, %cst : tensor<f32>
    %38 = stablehlo.select %35, %36, %29 : tensor<i1>, tensor<i32>
    %39 = stablehlo.select %35, %37, %30 : tensor<i1>, tensor<f32>
    %40 = stablehlo.add %4#2, %c_25 : tensor<i32>
    %41 = stablehlo.compare LT, %40, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %42 = stablehlo.convert %38 : tensor<i32>
    %43 = stablehlo.compare LT, %42, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %44 = stablehlo.and %41, %43 : tensor<i1>
    %45 = stablehlo.add %38, %c_28 : tensor<i32>
    %46 = stablehlo.add %39, %cst : tensor<f32>
    %47 = stablehlo.select %44, %45, %38 : tensor<i1>, tensor<i32>
    %48 = stablehlo.select %44, %46, %39 : tensor<i1>, tensor<f32>
    %49 = stablehlo.add %4#2, %c_24 : tensor<i32>
    %50 = stablehlo.compare LT, %49, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %51 = stablehlo.convert %47 : tensor<i32>
    %52 = stablehlo.compare LT, %51, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %53 = stablehlo.and %50, %52 : tensor<i1>
    %54 = stablehlo.add %47, %c_28 : tensor<i32>
    %55 = stablehlo.add %48, %cst : tensor<f32>
    %56 = stablehlo.select %53, %54, %47 : tensor<i1>, tensor<i32>
    %57 = stablehlo.select %53, %55, %48 : tensor<i1>, tensor<f32>
    %58 = stablehlo.add %4#2, %c_23 : tensor<i32>
    %59 = stablehlo.compare LT, %58, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %60 = stablehlo.convert %56 : tensor<i32>
    %61 = stablehlo.compare LT, %60, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %62 = stablehlo.and %59, %61 : tensor<i1>
    %63 = stablehlo.add %56, %c_28 : tensor<i32>
    %64 = stablehlo.add %57, %cst : tensor<f32>
    %65 = stablehlo.select %62, %63, %56 : tensor<i1>, tensor<i32>
    %66 = stablehlo.select %62, %64, %57 : tensor<i1>, tensor<f32>
    %67 = stablehlo.add %4#2, %c_22 : tensor<i32>
    %68 = stablehlo.compare LT, %67, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %69 = stablehlo.convert %65 : tensor<i32>
    %70 = stablehlo.compare LT, %69, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %71 = stablehlo.and %68, %70 : tensor<i1>
    %72 = stablehlo.add %65, %c_28 : tensor<i32>
    %73 = stablehlo.add %66, %cst : tensor<f32>
    %74 = stablehlo.select %71, %72, %65 : tensor<i1>, tensor<i32>
    %75 = stablehlo.select %71, %73, %66 : tensor<i1>, tensor<f32>
    %76 = stablehlo.add %4#2, %c_21 : tensor<i32>
    %77 = stablehlo.compare LT, %76, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %78 = stablehlo.convert %74 : tensor<i32>
    %79 = stablehlo.compare LT, %78, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %80 = stablehlo.and %77, %79 : tensor<i1>
    %81 = stablehlo.add %74, %c_28 : tensor<i32>
    %82 = stablehlo.add %75, %cst : tensor<f32>
    %83 = stablehlo.select %80, %81, %74 : tensor<i1>, tensor<i32>
    %84 = stablehlo.select %80, %82, %75 : tensor<i1>, tensor<f32>
    %85 = stablehlo.add %4#2, %c_20 : tensor<i32>
    %86 = stablehlo.compare LT, %85, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %87 = stablehlo.convert %83 : tensor<i32>
    %88 = stablehlo.compare LT, %87, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %89 = stablehlo.and %86, %88 : tensor<i1>
    %90 = stablehlo.add %83, %c_28 : tensor<i32>
    %91 = stablehlo.add %84, %cst : tensor<f32>
    %92 = stablehlo.select %89, %90, %83 : tensor<i1>, tensor<i32>
    %93 = stablehlo.select %89, %91, %84 : tensor<i1>, tensor<f32>
    %94 = stablehlo.add %4#2, %c_19 : tensor<i32>
    %95 = stablehlo.compare LT, %94, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %96 = stablehlo.convert %92 : tensor<i32>
    %97 = stablehlo.compare LT, %96, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %98 = stablehlo.and %95, %97 : tensor<i1>
    %99 = stablehlo.add %92, %c_28 : tensor<i32>
    %100 = stablehlo.add %93, %cst : tensor<f32>
    %101 = stablehlo.select %98, %99, %92 : tensor<i1>, tensor<i32>
    %102 = stablehlo.select %98, %100, %93 : tensor<i1>, tensor<f32>
    %103 = stablehlo.add %4#2, %c_18 : tensor<i32>
    %104 = stablehlo.compare LT, %103, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %105 = stablehlo.convert %101 : tensor<i32>
    %106 = stablehlo.compare LT, %105, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %107 = stablehlo.and %104, %106 : tensor<i1>
    %108 = stablehlo.add %101, %c_28 : tensor<i32>
    %109 = stablehlo.add %102, %cst : tensor<f32>
    %110 = stablehlo.select %107, %108, %101 : tensor<i1>, tensor<i32>
    %111 = stablehlo.select %107, %109, %102 : tensor<i1>, tensor<f32>
    %112 = stablehlo.add %4#2, %c_17 : tensor<i32>
    %113 = stablehlo.compare LT, %112, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %114 = stablehlo.convert %110 : tensor<i32>
    %115 = stablehlo.compare LT, %114, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %116 = stablehlo.and %113, %115 : tensor<i1>
    %117 = stablehlo.add %110, %c_28 : tensor<i32>
    %118 = stablehlo.add %111, %cst : tensor<f32>
    %119 = stablehlo.select %116, %117, %110 : tensor<i1>, tensor<i32>
    %120 = stablehlo.select %116, %118, %111 : tensor<i1>, tensor<f32>
    %121 = stablehlo.add %4#2, %c_16 : tensor<i32>
    %122 = stablehlo.compare LT, %121, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %123 = stablehlo.convert %119 : tensor<i32>
    %124 = stablehlo.compare LT, %123, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %125 = stablehlo.and %122, %124 : tensor<i1>
    %126 = stablehlo.add %119, %c_28 : tensor<i32>
    %127 = stablehlo.add %120, %cst : tensor<f32>
    %128 = stablehlo.select %125, %126, %119 : tensor<i1>, tensor<i32>
    %129 = stablehlo.select %125, %127, %120 : tensor<i1>, tensor<f32>
    %130 = stablehlo.add %4#2, %c_15 : tensor<i32>
    %131 = stablehlo.compare LT, %130, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %132 = stablehlo.convert %128 : tensor<i32>
    %133 = stablehlo.compare LT, %132, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %134 = stablehlo.and %131, %133 : tensor<i1>
    %135 = stablehlo.add %128, %c_28 : tensor<i32>
    %136 = stablehlo.add %129, %cst : tensor<f32>
    %137 = stablehlo.select %134, %135, %128 : tensor<i1>, tensor<i32>
    %138 = stablehlo.select %134, %136, %129 : tensor<i1>, tensor<f32>
    %139 = stablehlo.add %4#2, %c_14 : tensor<i32>
    %140 = stablehlo.compare LT, %139, %c_30, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %141 = stablehlo.convert %137 : tensor<i32>
    %142 = stablehlo.compare LT, %141, %arg1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %143 = stablehlo.and %140, %142 : tensor<i1>
    %144 = stablehlo.add %137, %c_28 : tensor<i32>
    %145 = stablehlo.add %138, %cst : tensor<f32>
    %146 = stablehlo.select %143, %144, %137 : tensor<i1>, tensor<i32>
    %147 = stablehlo.select %143, %145, %138 : tensor<i1>, tensor<f32>
    return %146, %147 : tensor<i32>, tensor<f32>
  }
}
