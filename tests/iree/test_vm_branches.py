"""A branch's repeated ref operands become values of their own in the VM program
(whilst/lowering/_iree_vm_branches.py): iree_limits/branch_repeated_ref.mlir, a VM
loop whose entry passes one buffer to three block arguments, reads a null buffer
compiled as it is (IREE 3.13's register allocation) and the values a Python loop
computes once edited. The end-to-end case (diffrax's default gradient of a short
solve, every call failing without the edit) is in tests/clients/test_diffrax.py."""
import pathlib

import pytest

from whilst.lowering._iree import _iree_compile
from whilst.lowering._iree_vm_branches import BRANCHES, REF_TYPES, branch_refs_distinct
from whilst.lowering._iree_ir import ir
from whilst.lowering._ir_walk import ops_where

pytestmark = pytest.mark.iree

PROGRAM = (pathlib.Path(__file__).parents[2] / "iree_limits" / "branch_repeated_ref.mlir")


def repeated_ref_operands(vm_text: str) -> int:
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(vm_text)
        return sum(len(refs) - len(set(refs)) for refs in (
            [v for v in branch.operands if str(v.type).startswith(REF_TYPES)]
            for branch in ops_where(module, lambda op: op.name in BRANCHES)))


def run(vm_text: str, n: int):
    import iree.runtime as rt

    context = rt.SystemContext(config=rt.Config("local-sync"))
    module = rt.VmModule.copy_buffer(context.instance,
                                     _iree_compile(vm_text, ["--compile-from=vm"]))
    context.add_vm_module(module)
    return context.modules[module.name].main(n)


def test_repeated_ref_operands_become_values_of_their_own_and_the_loop_runs():
    program = PROGRAM.read_text()
    edited = branch_refs_distinct(program)
    assert repeated_ref_operands(program) == 2 and repeated_ref_operands(edited) == 0
    with pytest.raises(ValueError, match="source_buffer is null"):
        run(program, 3)
    for n in (1, 3, 4):   # each step adds the 5 stored in the buffer, read twice
        assert run(edited, n) == 10 * n
