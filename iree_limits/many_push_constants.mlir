// IREE 3.13 limitation: iree-compile passes a dispatch's scalar operands as 32-bit
// push constants, however many there are, and the Vulkan driver refuses the module
// at load when they pass the device's maxPushConstantsSize (128 bytes on lavapipe
// and many GPUs, the least Vulkan guarantees). Here a loop body reads 40 elements at
// offsets the host computes from its counter: one dispatch of 40 constants (`constants
// = 40` at --compile-to=executable-sources), and every load fails:
//   INVALID_ARGUMENT; pipeline_layouts[0] push_constant_ranges[0] end offset 160
//   exceeds device limit 128; while invoking native function hal.executable.create
// (`--iree-vulkan-dispatch-abi=bda` pushes them too: end offset 192.) whilst refuses
// such a module at compile time (whilst/lowering/_iree_push_constants.py).
//   iree-compile many_push_constants.mlir --iree-input-type=stablehlo \
//     --iree-hal-target-device=vulkan -o m.vmfb
//   python -c "import numpy; numpy.save('x.npy', numpy.arange(64, dtype='float32'))"
//   iree-run-module --module=m.vmfb --device=vulkan --input=@x.npy --input=i32=2
func.func public @main(%x: tensor<64xf32>, %n: tensor<i32>) -> tensor<f32> attributes {stream.affinity = #hal.device.affinity<@__device_0>} {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %y = %z) : tensor<i32>, tensor<f32>
  cond {
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %k0 = stablehlo.constant dense<0> : tensor<i32>
    %o0 = stablehlo.add %i, %k0 : tensor<i32>
    %s0 = stablehlo.dynamic_slice %x, %o0, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v0 = stablehlo.reshape %s0 : (tensor<1xf32>) -> tensor<f32>
    %a0 = stablehlo.add %y, %v0 : tensor<f32>
    %k1 = stablehlo.constant dense<1> : tensor<i32>
    %o1 = stablehlo.add %i, %k1 : tensor<i32>
    %s1 = stablehlo.dynamic_slice %x, %o1, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v1 = stablehlo.reshape %s1 : (tensor<1xf32>) -> tensor<f32>
    %a1 = stablehlo.add %a0, %v1 : tensor<f32>
    %k2 = stablehlo.constant dense<2> : tensor<i32>
    %o2 = stablehlo.add %i, %k2 : tensor<i32>
    %s2 = stablehlo.dynamic_slice %x, %o2, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v2 = stablehlo.reshape %s2 : (tensor<1xf32>) -> tensor<f32>
    %a2 = stablehlo.add %a1, %v2 : tensor<f32>
    %k3 = stablehlo.constant dense<3> : tensor<i32>
    %o3 = stablehlo.add %i, %k3 : tensor<i32>
    %s3 = stablehlo.dynamic_slice %x, %o3, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v3 = stablehlo.reshape %s3 : (tensor<1xf32>) -> tensor<f32>
    %a3 = stablehlo.add %a2, %v3 : tensor<f32>
    %k4 = stablehlo.constant dense<4> : tensor<i32>
    %o4 = stablehlo.add %i, %k4 : tensor<i32>
    %s4 = stablehlo.dynamic_slice %x, %o4, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v4 = stablehlo.reshape %s4 : (tensor<1xf32>) -> tensor<f32>
    %a4 = stablehlo.add %a3, %v4 : tensor<f32>
    %k5 = stablehlo.constant dense<5> : tensor<i32>
    %o5 = stablehlo.add %i, %k5 : tensor<i32>
    %s5 = stablehlo.dynamic_slice %x, %o5, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v5 = stablehlo.reshape %s5 : (tensor<1xf32>) -> tensor<f32>
    %a5 = stablehlo.add %a4, %v5 : tensor<f32>
    %k6 = stablehlo.constant dense<6> : tensor<i32>
    %o6 = stablehlo.add %i, %k6 : tensor<i32>
    %s6 = stablehlo.dynamic_slice %x, %o6, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v6 = stablehlo.reshape %s6 : (tensor<1xf32>) -> tensor<f32>
    %a6 = stablehlo.add %a5, %v6 : tensor<f32>
    %k7 = stablehlo.constant dense<7> : tensor<i32>
    %o7 = stablehlo.add %i, %k7 : tensor<i32>
    %s7 = stablehlo.dynamic_slice %x, %o7, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v7 = stablehlo.reshape %s7 : (tensor<1xf32>) -> tensor<f32>
    %a7 = stablehlo.add %a6, %v7 : tensor<f32>
    %k8 = stablehlo.constant dense<8> : tensor<i32>
    %o8 = stablehlo.add %i, %k8 : tensor<i32>
    %s8 = stablehlo.dynamic_slice %x, %o8, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v8 = stablehlo.reshape %s8 : (tensor<1xf32>) -> tensor<f32>
    %a8 = stablehlo.add %a7, %v8 : tensor<f32>
    %k9 = stablehlo.constant dense<9> : tensor<i32>
    %o9 = stablehlo.add %i, %k9 : tensor<i32>
    %s9 = stablehlo.dynamic_slice %x, %o9, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v9 = stablehlo.reshape %s9 : (tensor<1xf32>) -> tensor<f32>
    %a9 = stablehlo.add %a8, %v9 : tensor<f32>
    %k10 = stablehlo.constant dense<10> : tensor<i32>
    %o10 = stablehlo.add %i, %k10 : tensor<i32>
    %s10 = stablehlo.dynamic_slice %x, %o10, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v10 = stablehlo.reshape %s10 : (tensor<1xf32>) -> tensor<f32>
    %a10 = stablehlo.add %a9, %v10 : tensor<f32>
    %k11 = stablehlo.constant dense<11> : tensor<i32>
    %o11 = stablehlo.add %i, %k11 : tensor<i32>
    %s11 = stablehlo.dynamic_slice %x, %o11, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v11 = stablehlo.reshape %s11 : (tensor<1xf32>) -> tensor<f32>
    %a11 = stablehlo.add %a10, %v11 : tensor<f32>
    %k12 = stablehlo.constant dense<12> : tensor<i32>
    %o12 = stablehlo.add %i, %k12 : tensor<i32>
    %s12 = stablehlo.dynamic_slice %x, %o12, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v12 = stablehlo.reshape %s12 : (tensor<1xf32>) -> tensor<f32>
    %a12 = stablehlo.add %a11, %v12 : tensor<f32>
    %k13 = stablehlo.constant dense<13> : tensor<i32>
    %o13 = stablehlo.add %i, %k13 : tensor<i32>
    %s13 = stablehlo.dynamic_slice %x, %o13, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v13 = stablehlo.reshape %s13 : (tensor<1xf32>) -> tensor<f32>
    %a13 = stablehlo.add %a12, %v13 : tensor<f32>
    %k14 = stablehlo.constant dense<14> : tensor<i32>
    %o14 = stablehlo.add %i, %k14 : tensor<i32>
    %s14 = stablehlo.dynamic_slice %x, %o14, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v14 = stablehlo.reshape %s14 : (tensor<1xf32>) -> tensor<f32>
    %a14 = stablehlo.add %a13, %v14 : tensor<f32>
    %k15 = stablehlo.constant dense<15> : tensor<i32>
    %o15 = stablehlo.add %i, %k15 : tensor<i32>
    %s15 = stablehlo.dynamic_slice %x, %o15, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v15 = stablehlo.reshape %s15 : (tensor<1xf32>) -> tensor<f32>
    %a15 = stablehlo.add %a14, %v15 : tensor<f32>
    %k16 = stablehlo.constant dense<16> : tensor<i32>
    %o16 = stablehlo.add %i, %k16 : tensor<i32>
    %s16 = stablehlo.dynamic_slice %x, %o16, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v16 = stablehlo.reshape %s16 : (tensor<1xf32>) -> tensor<f32>
    %a16 = stablehlo.add %a15, %v16 : tensor<f32>
    %k17 = stablehlo.constant dense<17> : tensor<i32>
    %o17 = stablehlo.add %i, %k17 : tensor<i32>
    %s17 = stablehlo.dynamic_slice %x, %o17, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v17 = stablehlo.reshape %s17 : (tensor<1xf32>) -> tensor<f32>
    %a17 = stablehlo.add %a16, %v17 : tensor<f32>
    %k18 = stablehlo.constant dense<18> : tensor<i32>
    %o18 = stablehlo.add %i, %k18 : tensor<i32>
    %s18 = stablehlo.dynamic_slice %x, %o18, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v18 = stablehlo.reshape %s18 : (tensor<1xf32>) -> tensor<f32>
    %a18 = stablehlo.add %a17, %v18 : tensor<f32>
    %k19 = stablehlo.constant dense<19> : tensor<i32>
    %o19 = stablehlo.add %i, %k19 : tensor<i32>
    %s19 = stablehlo.dynamic_slice %x, %o19, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v19 = stablehlo.reshape %s19 : (tensor<1xf32>) -> tensor<f32>
    %a19 = stablehlo.add %a18, %v19 : tensor<f32>
    %k20 = stablehlo.constant dense<20> : tensor<i32>
    %o20 = stablehlo.add %i, %k20 : tensor<i32>
    %s20 = stablehlo.dynamic_slice %x, %o20, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v20 = stablehlo.reshape %s20 : (tensor<1xf32>) -> tensor<f32>
    %a20 = stablehlo.add %a19, %v20 : tensor<f32>
    %k21 = stablehlo.constant dense<21> : tensor<i32>
    %o21 = stablehlo.add %i, %k21 : tensor<i32>
    %s21 = stablehlo.dynamic_slice %x, %o21, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v21 = stablehlo.reshape %s21 : (tensor<1xf32>) -> tensor<f32>
    %a21 = stablehlo.add %a20, %v21 : tensor<f32>
    %k22 = stablehlo.constant dense<22> : tensor<i32>
    %o22 = stablehlo.add %i, %k22 : tensor<i32>
    %s22 = stablehlo.dynamic_slice %x, %o22, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v22 = stablehlo.reshape %s22 : (tensor<1xf32>) -> tensor<f32>
    %a22 = stablehlo.add %a21, %v22 : tensor<f32>
    %k23 = stablehlo.constant dense<23> : tensor<i32>
    %o23 = stablehlo.add %i, %k23 : tensor<i32>
    %s23 = stablehlo.dynamic_slice %x, %o23, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v23 = stablehlo.reshape %s23 : (tensor<1xf32>) -> tensor<f32>
    %a23 = stablehlo.add %a22, %v23 : tensor<f32>
    %k24 = stablehlo.constant dense<24> : tensor<i32>
    %o24 = stablehlo.add %i, %k24 : tensor<i32>
    %s24 = stablehlo.dynamic_slice %x, %o24, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v24 = stablehlo.reshape %s24 : (tensor<1xf32>) -> tensor<f32>
    %a24 = stablehlo.add %a23, %v24 : tensor<f32>
    %k25 = stablehlo.constant dense<25> : tensor<i32>
    %o25 = stablehlo.add %i, %k25 : tensor<i32>
    %s25 = stablehlo.dynamic_slice %x, %o25, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v25 = stablehlo.reshape %s25 : (tensor<1xf32>) -> tensor<f32>
    %a25 = stablehlo.add %a24, %v25 : tensor<f32>
    %k26 = stablehlo.constant dense<26> : tensor<i32>
    %o26 = stablehlo.add %i, %k26 : tensor<i32>
    %s26 = stablehlo.dynamic_slice %x, %o26, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v26 = stablehlo.reshape %s26 : (tensor<1xf32>) -> tensor<f32>
    %a26 = stablehlo.add %a25, %v26 : tensor<f32>
    %k27 = stablehlo.constant dense<27> : tensor<i32>
    %o27 = stablehlo.add %i, %k27 : tensor<i32>
    %s27 = stablehlo.dynamic_slice %x, %o27, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v27 = stablehlo.reshape %s27 : (tensor<1xf32>) -> tensor<f32>
    %a27 = stablehlo.add %a26, %v27 : tensor<f32>
    %k28 = stablehlo.constant dense<28> : tensor<i32>
    %o28 = stablehlo.add %i, %k28 : tensor<i32>
    %s28 = stablehlo.dynamic_slice %x, %o28, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v28 = stablehlo.reshape %s28 : (tensor<1xf32>) -> tensor<f32>
    %a28 = stablehlo.add %a27, %v28 : tensor<f32>
    %k29 = stablehlo.constant dense<29> : tensor<i32>
    %o29 = stablehlo.add %i, %k29 : tensor<i32>
    %s29 = stablehlo.dynamic_slice %x, %o29, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v29 = stablehlo.reshape %s29 : (tensor<1xf32>) -> tensor<f32>
    %a29 = stablehlo.add %a28, %v29 : tensor<f32>
    %k30 = stablehlo.constant dense<30> : tensor<i32>
    %o30 = stablehlo.add %i, %k30 : tensor<i32>
    %s30 = stablehlo.dynamic_slice %x, %o30, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v30 = stablehlo.reshape %s30 : (tensor<1xf32>) -> tensor<f32>
    %a30 = stablehlo.add %a29, %v30 : tensor<f32>
    %k31 = stablehlo.constant dense<31> : tensor<i32>
    %o31 = stablehlo.add %i, %k31 : tensor<i32>
    %s31 = stablehlo.dynamic_slice %x, %o31, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v31 = stablehlo.reshape %s31 : (tensor<1xf32>) -> tensor<f32>
    %a31 = stablehlo.add %a30, %v31 : tensor<f32>
    %k32 = stablehlo.constant dense<32> : tensor<i32>
    %o32 = stablehlo.add %i, %k32 : tensor<i32>
    %s32 = stablehlo.dynamic_slice %x, %o32, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v32 = stablehlo.reshape %s32 : (tensor<1xf32>) -> tensor<f32>
    %a32 = stablehlo.add %a31, %v32 : tensor<f32>
    %k33 = stablehlo.constant dense<33> : tensor<i32>
    %o33 = stablehlo.add %i, %k33 : tensor<i32>
    %s33 = stablehlo.dynamic_slice %x, %o33, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v33 = stablehlo.reshape %s33 : (tensor<1xf32>) -> tensor<f32>
    %a33 = stablehlo.add %a32, %v33 : tensor<f32>
    %k34 = stablehlo.constant dense<34> : tensor<i32>
    %o34 = stablehlo.add %i, %k34 : tensor<i32>
    %s34 = stablehlo.dynamic_slice %x, %o34, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v34 = stablehlo.reshape %s34 : (tensor<1xf32>) -> tensor<f32>
    %a34 = stablehlo.add %a33, %v34 : tensor<f32>
    %k35 = stablehlo.constant dense<35> : tensor<i32>
    %o35 = stablehlo.add %i, %k35 : tensor<i32>
    %s35 = stablehlo.dynamic_slice %x, %o35, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v35 = stablehlo.reshape %s35 : (tensor<1xf32>) -> tensor<f32>
    %a35 = stablehlo.add %a34, %v35 : tensor<f32>
    %k36 = stablehlo.constant dense<36> : tensor<i32>
    %o36 = stablehlo.add %i, %k36 : tensor<i32>
    %s36 = stablehlo.dynamic_slice %x, %o36, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v36 = stablehlo.reshape %s36 : (tensor<1xf32>) -> tensor<f32>
    %a36 = stablehlo.add %a35, %v36 : tensor<f32>
    %k37 = stablehlo.constant dense<37> : tensor<i32>
    %o37 = stablehlo.add %i, %k37 : tensor<i32>
    %s37 = stablehlo.dynamic_slice %x, %o37, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v37 = stablehlo.reshape %s37 : (tensor<1xf32>) -> tensor<f32>
    %a37 = stablehlo.add %a36, %v37 : tensor<f32>
    %k38 = stablehlo.constant dense<38> : tensor<i32>
    %o38 = stablehlo.add %i, %k38 : tensor<i32>
    %s38 = stablehlo.dynamic_slice %x, %o38, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v38 = stablehlo.reshape %s38 : (tensor<1xf32>) -> tensor<f32>
    %a38 = stablehlo.add %a37, %v38 : tensor<f32>
    %k39 = stablehlo.constant dense<39> : tensor<i32>
    %o39 = stablehlo.add %i, %k39 : tensor<i32>
    %s39 = stablehlo.dynamic_slice %x, %o39, sizes = [1] : (tensor<64xf32>, tensor<i32>) -> tensor<1xf32>
    %v39 = stablehlo.reshape %s39 : (tensor<1xf32>) -> tensor<f32>
    %a39 = stablehlo.add %a38, %v39 : tensor<f32>
    %i1 = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %i1, %a39 : tensor<i32>, tensor<f32>
  }
  return %r#1 : tensor<f32>
}
