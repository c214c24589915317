"""A dispatch over the IREE runtime's limit of buffer bindings: iree-compile 3.13 makes
a module of it whose every call fails, so whilst refuses it at compile time
(`compile_module`). The program is iree_limits/wide_scalar_dispatch.mlir."""
import re

import numpy as np
import pytest

import whilst
from helpers import REPO
from whilst.lowering import compile_module

WIDE = (REPO / "iree_limits" / "wide_scalar_dispatch.mlir").read_text()


@pytest.fixture(scope="module")
def runtime_failure():
    """`(bindings, limit)` from the IREE runtime's error when the module iree-compile
    makes of the program (the command line of its header, not whilst's) is called."""
    import iree.runtime as rt
    from iree.compiler import tools

    vmfb = tools.compile_str(WIDE, extra_args=[
        "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=generic",
        "--iree-global-opt-enable-warn-on-uninitialized-values=false"])
    context = rt.SystemContext(config=rt.Config("local-sync"))
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    with pytest.raises(Exception) as e:
        context.modules["module"]["main"](np.float32(0), np.int32(5))
    found = re.search(r"binding count (\d+) > (\d+)", str(e.value))
    assert found, str(e.value)
    return int(found[1]), int(found[2])


@pytest.mark.iree
def test_iree_makes_a_module_whose_every_call_fails(runtime_failure):
    bindings, limit = runtime_failure
    assert bindings > limit


def test_whilst_refuses_it_at_compile_time_naming_dispatch_bindings_and_limit(
        runtime_failure):
    bindings, limit = runtime_failure
    with pytest.raises(whilst.CompileError) as e:
        compile_module(WIDE)                      # no .vmfb comes back
    msg = str(e.value)
    assert f"limit of {limit} buffer bindings per dispatch on llvm-cpu" in msg, msg
    assert re.search(rf"_main_dispatch_\d+\w*: {bindings} bindings", msg), msg
    assert "cannot run" in msg and "smaller `unroll=`" in msg and "report it" in msg, msg


def test_a_module_for_several_targets_meets_the_lowest_limit():
    """CUDA's loader refuses an executable with an export of more than 16 bindings
    (IREE_HAL_CUDA_MAX_DISPATCH_BINDING_COUNT, runtime/src/iree/hal/drivers/cuda/
    native_executable.h); a module that must also run there is held to it."""
    with pytest.raises(whilst.CompileError, match=r"limit of 16 buffer bindings per "
                                                 r"dispatch on cuda \("):
        compile_module(WIDE, targets=("llvm-cpu", "cuda"))
