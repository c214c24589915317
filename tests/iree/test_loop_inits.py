"""Loop carries that start from one value start from buffers of their own on IREE
(`distinct_loop_inits`, whilst/lowering/_iree_loops.py): IREE 3.13 gives two carries
that start from one value a single buffer (iree_limits/equal_barrier_copies.py), and
folds a copy `init | x` of an all-true boolean back to the init
(iree_limits/all_true_boolean_copies.py)."""
import numpy as np
import pytest

import whilst
from iree_limits.all_true_boolean_copies import numpy_three_masks, three_masks
from whilst.lowering import flag_sets, prepare, source_for
from whilst.lowering._ir_walk import ops_where

pytestmark = pytest.mark.iree


def flow_loop_inits(text, element_type):
    """The initial values of the carries of `element_type` of the first loop of the
    flow-phase module iree-compile makes of prepared `text`, every loop stepped from
    the host, with the default fusion (aggressive fusion fails on this module:
    "operand does not dominate this use", and `compile_module` falls back to it)."""
    from iree.compiler import tools

    from whilst.lowering._iree_ir import ir

    flags = flag_sets(["llvm-cpu"], loops_in_dispatch=False)[1]
    flow = tools.compile_str(source_for(text, flags), extra_args=[*flags, "--compile-to=flow"])
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(flow.decode())
        loop = ops_where(module, lambda op: op.name in ("scf.for", "scf.while"))[0]
        return [v.get_name() for v in loop.operands if str(v.type) == element_type]


@pytest.mark.parametrize("fill", [True, False])
def test_equal_boolean_carries_start_from_values_of_their_own(fill):
    text = prepare([whilst.export(lambda n: three_masks(n, fill), np.int32(3))])
    inits = flow_loop_inits(text, "tensor<8xi1>")
    assert len(inits) == 3 and len(set(inits)) == 3, inits


@pytest.mark.parametrize("fill", [True, False])
def test_equal_boolean_carries_match_python(fill):
    module = whilst.compile(lambda n: three_masks(n, fill), np.int32(0),
                            loops_in_dispatch=False).load()
    for n in (0, 3, 7):
        for got, want in zip(module(np.int32(n)), numpy_three_masks(n, fill)):
            np.testing.assert_array_equal(got, want)
