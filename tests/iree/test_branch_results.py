"""Branch results computed from constants go through an optimization barrier
(whilst/lowering/_iree_branch_results.py): iree_limits/constant_branch_result.mlir, a
loop that carries on a `stablehlo.case` result one branch returns as a constant, fails
on local-task as iree-compile makes it, and runs fenced; a `lax.cond` in a whilst loop,
and its gradient (whose transposed branch returns zeros), run on every driver."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import REPO, vulkan_or_skip
from whilst.lowering import compile_flags, prepare
from whilst.lowering._iree import _iree_compile
from whilst.lowering._iree_branch_results import constant_branch_results_fenced
from whilst.lowering._iree_ir import ir
from whilst.lowering._ir_walk import ops_where

pytestmark = pytest.mark.iree

PROGRAM = (REPO / "iree_limits" / "constant_branch_result.mlir").read_text()
CPU = compile_flags(("llvm-cpu",))
N = 5


def python_sum(x, n):
    return sum(i * x for i in range(n) if i < x)


def python_sum_dx(x, n):
    return sum(i for i in range(n) if i < x)


def on_local_task(text: str):
    """`text` compiled by iree-compile alone, as a function of x run on local-task."""
    import iree.runtime as rt

    context = rt.SystemContext(config=rt.Config("local-task"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, _iree_compile(text, CPU)))
    return lambda x: float(np.asarray(context.modules.module.main(np.float32(x), np.int32(N))))


def fenced(text: str) -> str:
    """`text` as whilst's preparation fences its branch results."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        constant_branch_results_fenced(module)
        return module.operation.get_asm(enable_debug_info=False)


def test_the_reproducer_fails_on_local_task_and_runs_fenced():
    """The failure is a race that the task executor loses every time on an idle
    machine; of 10 calls, at least one."""
    run = on_local_task(PROGRAM)
    errors = []
    for x in (0.0, 2.5) * 5:
        try:
            run(x)
        except Exception as e:
            errors.append(str(e))
    assert errors and "transient buffer has not been committed" in errors[0], errors
    run = on_local_task(fenced(PROGRAM))
    for x in (0.0, 2.5, 9.0) * 5:
        assert run(x) == python_sum(x, N)


def cond_sum(x, n):
    """acc = sum(i * x for i in range(n) if i < x), through `lax.cond`, whose other
    branch adds the constant 0 (n <= 8)."""
    def body(i, acc):
        term = jax.lax.cond(i < x, lambda: i.astype(jnp.float32) * x, lambda: jnp.float32(0.0))
        return i + 1, acc + term
    return whilst.while_loop(lambda i, acc: i < n, body, [0, jnp.float32(0.0)],
                             maximum_iterations=8)[1]


def cond_sum_grad(x, n):
    return jax.grad(cond_sum)(x, n)


def test_only_the_constant_branch_results_are_fenced():
    def program(x, n):
        def body(i, carry):
            acc, y = carry
            # result 0: a constant in one branch; result 1: computed in both
            term, z = jax.lax.cond(i < x, lambda: (x * 2.0, y * x), lambda: (jnp.float32(0.0), -y))
            return i + 1, (acc + term, z)
        return whilst.while_loop(lambda i, c: i < n, body, [0, (jnp.float32(0.0), x)],
                                 maximum_iterations=8)[1]

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(prepare([whilst.export(program, np.float32(1.0), N)]))
        (case,) = ops_where(module, lambda op: op.name == "stablehlo.case")
        users = [[use.owner.name for use in result.uses] for result in case.results]
    assert users[0] == ["stablehlo.optimization_barrier"], users
    assert "stablehlo.optimization_barrier" not in users[1], users


@pytest.fixture(scope="module")
def cond_modules():
    """`cond_sum` and its gradient compiled for llvm-cpu and vulkan-spirv (every loop
    stepped from the host), and for llvm-cpu with whilst's defaults."""
    targets = ["llvm-cpu", "vulkan-spirv"]
    functions = (cond_sum, cond_sum_grad)
    both = whilst.compile([whilst.export(fn, np.float32(1.0), N, name=fn.__name__,
                                         targets=targets) for fn in functions], target=targets)
    default = whilst.compile([whilst.export(fn, np.float32(1.0), N, name=fn.__name__)
                              for fn in functions])
    return both, default


def assert_cond_sums(module):
    """x = 0 runs the constant branch only, 9 never, 2.5 both."""
    for x in (0.0, 2.5, 9.0):
        assert float(module.cond_sum(np.float32(x), N)) == python_sum(x, N)
        assert float(module.cond_sum_grad(np.float32(x), N)) == python_sum_dx(x, N)


def test_a_loop_carrying_a_conds_constant_branch_runs_on_the_cpu_drivers(cond_modules):
    both, default = cond_modules
    for module in (both.load("local-sync"), both.load("local-task"),
                   default.load("local-task")):
        assert_cond_sums(module)


def test_a_loop_carrying_a_conds_constant_branch_runs_on_vulkan(cond_modules):
    vulkan_or_skip()
    assert_cond_sums(cond_modules[0].load("vulkan"))
