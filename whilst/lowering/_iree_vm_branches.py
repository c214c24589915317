"""A branch's repeated ref operands made distinct values in a compiled module's VM
program, before iree-compile 3.13 allocates its registers.

A branch that passes one ref (a buffer) to several block arguments, where one
occurrence shares its register with its block argument, gets a MOVE for another
occurrence, which clears that shared register: the block then reads a null buffer
(`iree_limits/branch_repeated_ref.mlir`, 20 lines of VM;
`iree_limits/checkpointed_gradient_null_buffer.py`: diffrax's default gradient of
a short solve fails on every call, "indirect buffer reference slot 0 is out range
... hal.command_buffer.copy_buffer"; iree-org/iree#24753). Each occurrence after the
first becomes a value of its own, the same ref::

    vm.br ^bb(%b, %b)   ->   %c = vm.select.ref (vm.cmp.nz.ref %b), %b, null
                             vm.br ^bb(%b, %c)

which the register allocator gives a register of its own (a select of `%b` and
`%b` would fold back to `%b`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where

BRANCHES = ("vm.br", "vm.cond_br")
REF_TYPES = ("!vm.ref<", "!vm.buffer", "!vm.list<")   # the VM's ref-counted types


def branch_refs_distinct(vm_text: str) -> str:
    """`vm_text` (iree-compile's `--compile-to=vm` output) with every repeated ref
    operand of each branch replaced by a value of its own holding the same ref."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(vm_text)
        changed = False
        for branch in ops_where(module, lambda op: op.name in BRANCHES):
            seen = set()
            for index, value in enumerate(list(branch.operands)):
                if not str(value.type).startswith(REF_TYPES):
                    continue
                if value in seen:
                    branch.operands[index] = _same_ref(value, branch)
                    changed = True
                seen.add(value)
        return module.operation.get_asm(enable_debug_info=True) if changed else vm_text


def _same_ref(value, before):
    """A new value holding `value`'s ref, made right before the op `before`."""
    from whilst.lowering._iree_ir import ir

    with ir.InsertionPoint(before):
        nonzero = ir.Operation.create("vm.cmp.nz.ref", operands=[value],
                                      results=[ir.IntegerType.get_signless(32)]).result
        null = ir.Operation.create("vm.const.ref.zero", results=[value.type]).result
        return ir.Operation.create("vm.select.ref", operands=[nonzero, value, null],
                                   results=[value.type]).result
