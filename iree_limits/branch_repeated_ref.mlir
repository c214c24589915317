// IREE 3.13 VM register allocation (iree-org/iree#24753): a branch that passes one
// ref to several block arguments keeps it, for one of them, in its own register and
// MOVEs it into another, clearing that register. Here the loop's `%a` keeps `%buf`'s
// register r0 and `%c` takes `%R0->%r2` (`iree-dump-module --output=disassembly`):
// the first `vm.buffer.load.i32 %a` reads null.
//   iree-compile --compile-from=vm branch_repeated_ref.mlir -o m.vmfb
//   iree-run-module --module=m.vmfb --function=main --input=3
// fails, "INVALID_ARGUMENT; source_buffer is null"; with every repeated ref operand of a
// branch made a value of its own (whilst/lowering/_iree_vm_branches.py) it returns
// 30 (three steps adding the 5 stored in the buffer, read as %a and as %c).
module attributes {vm.toplevel} {
  vm.module public @module {
    vm.func @main(%n: i32) -> i32 {
      %c0 = vm.const.i32 0
      %c1 = vm.const.i32 1
      %c4 = vm.const.i32 4
      %c5 = vm.const.i32 5
      %z = vm.const.i64 0
      %c16 = vm.const.i64 16
      %buf = vm.buffer.alloc %c16, %c4 : !vm.buffer
      vm.buffer.store.i32 %c5, %buf[%z] : i32 -> !vm.buffer
      vm.br ^loop(%c0, %c0, %buf, %buf, %buf : i32, i32, !vm.buffer, !vm.buffer, !vm.buffer)
    ^loop(%i: i32, %s: i32, %a: !vm.buffer, %b: !vm.buffer, %c: !vm.buffer):
      %va = vm.buffer.load.i32 %a[%z] : !vm.buffer -> i32
      %vc = vm.buffer.load.i32 %c[%z] : !vm.buffer -> i32
      %s1 = vm.add.i32 %s, %va : i32
      %s2 = vm.add.i32 %s1, %vc : i32
      %i1 = vm.add.i32 %i, %c1 : i32
      %go = vm.cmp.lt.i32.s %i1, %n : i32
      vm.cond_br %go, ^loop(%i1, %s2, %b, %c, %a : i32, i32, !vm.buffer, !vm.buffer, !vm.buffer), ^exit(%s2 : i32)
    ^exit(%r: i32):
      vm.return %r : i32
    }
    vm.export @main
  }
}
