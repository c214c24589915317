"""Loop results behind an optimization barrier, so that IREE 3.13 never frees a
buffer that a loop which ran no iteration returned.

IREE 3.13 deallocates each buffer a loop returns after its last use, as if the
loop had made it. A loop that runs no iteration returns its initial values, and
IREE packs those into one allocation with other values made at the same time (a
residual stack, say) that stay in use after the loop: that allocation is freed
under them. `local-task` then fails ("transient buffer has not been committed"),
as does `vulkan` ("transient buffer has no staged Vulkan backing"); `local-sync`
passes by luck. Gradients of counted loops that end before a full unrolled
iteration meet it (`iree_limits/zero_trip_loop_result.mlir`).

IREE leaves a buffer that an op it cannot see through reads to its reference
count, so `loop_results_fenced` passes the results of each `stablehlo.while`
through one `stablehlo.optimization_barrier` right after the loop, unused ones too
(a barrier of unused results alone would be erased, and IREE frees those as well:
the inner loop of corpus `nested_forward` on local-task). The barrier copies
nothing; the buffers are released when their last reference goes. Results of
dynamic shape are left out: IREE 3.13 cannot resolve the dimensions of a barrier's
results ("'tensor.dim' op unexpected during shape cleanup"). So are the results of a
loop whose first test passes whatever the inputs (`c < N` of a carry starting from a
constant below the constant `N`: a counted loop of known bounds, such as the one
iteration of `_loop_forms.OneIteration`): it returns values its body made, and a
barrier inside a loop body ends IREE's command buffer there, a submission and a host
wait per iteration of the loop around it (`iree_limits/barrier_in_loop_body.mlir`).

The results of carries that start from a copy of `distinct_loop_inits` that the
program reads go through a barrier each of their own: in that one barrier with the
others, they made, with aggressive fusion, modules that fail on every call ("ref is
null ... hal.buffer.subspan": diffrax's event-stopped Tsit5 solve through its own
loops, `iree_limits/loop_results_in_one_barrier.py`). Such a result that nothing
reads goes through the one barrier with the others: behind a barrier of its own,
the barrier was erased, and IREE freed, at the end of a loop that ran no iteration,
the allocation the copy was packed in with values still in use (`jax.jacrev` of
`jax.jacrev` of a loop without a bound on `local-task`,
`iree_limits/unread_copied_carry_freed.py`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import integer_constant, ops_where
from whilst.lowering._iree_loops import DISTINCT_INIT_ATTR


def loop_results_fenced(module) -> None:
    """Every `stablehlo.while` of `module` (nested ones included) that may run no
    iteration has its results of static shape replaced by those of optimization
    barriers placed after it: one for each result that is read and whose carry
    starts from a `distinct_loop_inits` copy, one for all the others."""
    from whilst.lowering._iree_ir import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"
                          and not _first_test_passes(op)):
        results = [r for r in loop.results if ir.RankedTensorType(r.type).has_static_shape]
        apart = [r for r in results if _fenced_apart(loop, r)]
        rest = [r for r in results if r not in apart]
        with ir.InsertionPoint.after(loop), loop.location:
            for group in [[r] for r in apart] + ([rest] if rest else []):
                barrier = ir.Operation.create("stablehlo.optimization_barrier",
                                              results=[r.type for r in group],
                                              operands=group)
                for old, new in zip(group, barrier.results):
                    old.replace_all_uses_except(new, barrier)


def _fenced_apart(loop, result) -> bool:
    """Whether `result` of `loop` goes through a barrier of its own: it is read, and
    its carry starts from a `distinct_loop_inits` copy."""
    return bool(list(result.uses)) and _starts_from_copy(loop, result.result_number)


def _starts_from_copy(loop, index) -> bool:
    """Whether carry `index` of `loop` starts from a `distinct_loop_inits` copy."""
    from whilst.lowering._iree_ir import ir

    owner = loop.operands[index].owner
    return not isinstance(owner, ir.Block) and DISTINCT_INIT_ATTR in owner.operation.attributes


def _first_test_passes(loop) -> bool:
    """Whether the cond of `loop` is `c < N` of a carry `c` whose initial value is a
    constant `0 <= c0 < N`, `N` a constant (signed or unsigned, the test passes)."""
    from whilst.lowering._iree_ir import ir

    cond = loop.regions[0].blocks[0]
    test = list(cond.operations)[-1].operation.operands[0].owner
    if (isinstance(test, ir.Block) or test.name != "stablehlo.compare"
            or str(test.attributes["comparison_direction"])
            != "#stablehlo<comparison_direction LT>"):
        return False
    counter, limit = test.operands
    if not isinstance(counter, ir.BlockArgument) or counter.owner != cond:
        return False
    start, limit = integer_constant(loop.operands[counter.arg_number]), integer_constant(limit)
    return start is not None and limit is not None and 0 <= start < limit
