// IREE 3.13 (llvm-cpu): a dispatch holding a reduction and, after it, a zero-rank
// elementwise op that reads one element at a computed position (`tensor.extract`, what
// a gather of one element becomes) crashes codegen in `VectorType::get`
// (GenericVectorizationPass). `jax.vmap` over a batch of one of a default-policy
// gradient made it: IREE folds the batch's unit dimension, and a batched gather of one
// element per lane (`x[b, k]`) becomes such an extract.
// whilst passes each gather of one element through an optimization barrier, which keeps
// it out of its users' dispatches (`fenced_point_gathers`, whilst/lowering/_iree_fusion.py).
//
//   iree-compile --compile-mode=hal-executable --iree-hal-target-device=local \
//     --iree-hal-local-target-device-backends=llvm-cpu \
//     iree_limits/point_gather_after_reduction.mlir -o /dev/null
hal.executable public @point_gather_after_reduction {
  hal.executable.variant public @embedded_elf_x86_64 target(<"llvm-cpu", "embedded-elf-x86_64", {cpu = "", cpu_features = "", data_layout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128", native_vector_size = 16 : i64, target_triple = "x86_64-unknown-unknown-eabi-elf"}>) {
    hal.executable.export public @main ordinal(0) layout(#hal.pipeline.layout<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>) count(%arg0: !hal.device) -> (index, index, index) {
      %x, %y, %z = iree_tensor_ext.dispatch.workgroup_count_from_slice()
      hal.return %x, %y, %z : index, index, index
    }
    builtin.module {
      func.func @main() {
        %c0 = arith.constant 0 : index
        %c64 = arith.constant 64 : index
        %c2 = arith.constant 2 : index
        %big = arith.constant 2147483647 : i32
        %v = hal.interface.binding.subspan layout(<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>) binding(0) alignment(64) offset(%c0) flags(ReadOnly) : !iree_tensor_ext.dispatch.tensor<readonly:tensor<5xi32>>
        %a = hal.interface.binding.subspan layout(<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>) binding(1) alignment(64) offset(%c0) flags(ReadOnly) : !iree_tensor_ext.dispatch.tensor<readonly:tensor<3xi32>>
        %k = hal.interface.binding.subspan layout(<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>) binding(1) alignment(64) offset(%c64) flags(ReadOnly) : !iree_tensor_ext.dispatch.tensor<readonly:tensor<i32>>
        %out = hal.interface.binding.subspan layout(<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>) binding(2) alignment(64) offset(%c0) : !iree_tensor_ext.dispatch.tensor<writeonly:tensor<i32>>
        %vs = iree_tensor_ext.dispatch.tensor.load %v, offsets = [0], sizes = [5], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<5xi32>> -> tensor<5xi32>
        %as = iree_tensor_ext.dispatch.tensor.load %a, offsets = [0], sizes = [3], strides = [1] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<3xi32>> -> tensor<3xi32>
        %ks = iree_tensor_ext.dispatch.tensor.load %k, offsets = [], sizes = [], strides = [] : !iree_tensor_ext.dispatch.tensor<readonly:tensor<i32>> -> tensor<i32>
        %e = tensor.empty() : tensor<i32>
        %init = linalg.fill ins(%big : i32) outs(%e : tensor<i32>) -> tensor<i32>
        %min = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%vs : tensor<5xi32>) outs(%init : tensor<i32>) {
        ^bb0(%in: i32, %acc: i32):
          %m = arith.minsi %acc, %in : i32
          linalg.yield %m : i32
        } -> tensor<i32>
        %sum = linalg.generic {indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], iterator_types = []} ins(%min : tensor<i32>) outs(%e : tensor<i32>) {
        ^bb0(%in: i32, %o: i32):
          %kk = tensor.extract %ks[] : tensor<i32>
          %i = arith.index_cast %kk : i32 to index
          %lo = arith.maxsi %i, %c0 : index
          %j = arith.minui %lo, %c2 : index
          %x = tensor.extract %as[%j] : tensor<3xi32>
          %s = arith.addi %x, %in : i32
          linalg.yield %s : i32
        } -> tensor<i32>
        iree_tensor_ext.dispatch.tensor.store %sum, %out, offsets = [], sizes = [], strides = [] : tensor<i32> -> !iree_tensor_ext.dispatch.tensor<writeonly:tensor<i32>>
        return
      }
    }
  }
}
