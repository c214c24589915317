"""Loops that start from one barrier's result start from barriers of their own
(`barrier_inits_apart`, whilst/lowering/_iree_barrier_inits.py): IREE 3.13 fails on
two host-driven loops with the same first test that start from one such value
(iree_limits/barrier_shared_by_loops.mlir)."""
import numpy as np
import pytest
from iree import runtime as rt

from helpers import REPO
from whilst.lowering import flag_sets

pytestmark = pytest.mark.iree


def _compiled(text, flags):
    from iree.compiler import tools
    return tools.compile_str(text, extra_args=list(flags))


def test_loops_sharing_a_barriers_result_compile_and_run_apart():
    """The reproducer fails iree-compile as written ("does not dominate this use"),
    with every loop on the host; with a barrier per loop it compiles and runs as
    numpy computes it: `x + n` for the first loop's `n` steps of `v + 1`, and
    `x (x + n)^n` for the second's `v * p`."""
    from iree.compiler.tools import CompilerToolError

    from whilst.lowering._iree_barrier_inits import barrier_inits_apart
    from whilst.lowering._iree_ir import ir

    text = (REPO / "iree_limits" / "barrier_shared_by_loops.mlir").read_text()
    flags = flag_sets(["llvm-cpu"], loops_in_dispatch=False)[0]
    with pytest.raises(CompilerToolError, match="does not dominate this use"):
        _compiled(text, flags)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        barrier_inits_apart(module)
        apart = module.operation.get_asm()
    assert apart.count("stablehlo.optimization_barrier") == 3
    x, n = np.array([0.5, 1.0, -2.0, 3.0], np.float32), np.float32(3.0)
    first, second = rt.load_vm_flatbuffer(_compiled(apart, flags), driver="local-sync").main(x, n)
    np.testing.assert_allclose(np.asarray(first), x + 3.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(second), x * (x + 3.0) ** 3, rtol=1e-6)
