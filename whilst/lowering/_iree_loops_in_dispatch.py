"""Loops over a few numbers run whole inside one dispatch (llvm-cpu).

IREE drives each `stablehlo.while` from the host: every iteration costs command
submissions, dispatches and a readback of the loop test, about 2 us and more per
iteration on llvm-cpu (`research/iree-costs.md`), where XLA:CPU runs the whole loop
in compiled code. A loop whose state is a few numbers (a solver's step loop, a Newton
or fixed-point iteration, diffrax's or optimistix's `lax.while_loop`s) spends nearly
all its time there: diffrax's Lotka-Volterra solve took 30-70 us per solver step.

IREE 3.13 compiles a loop that its input places in a `flow.dispatch.region` into
that one dispatch, on two conditions: the loop carries vectors, not tensors (one-shot
bufferization refuses loops that carry tensors: "Yield operand #0 is not equivalent
to the corresponding iter bbArg"), and codegen does not distribute the dispatch over
workgroups (`DISABLE_DISTRIBUTION`; with distribution, llvm-cpu refuses the writes
after the loop: "write affecting operations on global resources are restricted to
workgroup distributed contexts"). So `loops_in_dispatch` rewrites each such loop::

    ys = while_loop(cond, body, xs)
    ==
    ys = dispatch_region(lambda: to_tensors(
        while_loop(lambda v: cond(to_tensors(v)), lambda v: to_vectors(body(to_tensors(v))),
                   to_vectors(xs))))

the body's StableHLO unchanged on tensors that live inside the dispatch. The loop
runs as scalar code in one kernel: no submission, dispatch or readback per
iteration, at a few ns per element of each op's result. A body over wide tensors
runs slower so than as IREE's vectorized dispatches stepped from the host (whilst's
own forward loops already unroll to amortize the host's cost), hence the work bound
(`_worth_it`). Nested loops go in the same dispatch, as loops over vectors too. The
loops that do not qualify stay in the module, stepped from the host as without
this rewrite.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where

# llvm-cpu codegen of a dispatch in one workgroup: what lets a loop in a dispatch
# region compile (module docstring). It holds for every dispatch of the module, so
# modules with such loops run their other dispatches on one thread of local-task too.
DISABLE_DISTRIBUTION = "--iree-llvmcpu-disable-distribution"

# Loop state at most this many bytes: a solver's, not a residual stack (whose rows
# a loop in a dispatch would keep in the kernel's stack memory, 32 KiB on llvm-cpu).
MAX_CARRIED_BYTES = 4096

# Ops that cannot run inside a kernel (host and device communication, library
# calls) or whose lowering IREE does not support there.
_HOST_OPS = frozenset({
    "stablehlo.custom_call", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send",
    "stablehlo.recv", "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.all_to_all",
    "stablehlo.reduce_scatter", "stablehlo.collective_permute",
    "stablehlo.collective_broadcast", "stablehlo.rng", "stablehlo.rng_bit_generator",
    "stablehlo.sort", "stablehlo.fft", "stablehlo.triangular_solve", "stablehlo.cholesky"})


def loops_in_dispatch(module) -> int:
    """Inline the module's functions, then move each outermost `stablehlo.while` that
    `_fits` and is `_worth_it` into a dispatch region of its own (module docstring),
    in place; within a loop that stays on the host, its outermost loops that qualify
    move so, except in gradient and linear Whiles (`_fits`). Returns how many loops
    moved (0: the module is unchanged but inlined)."""
    from iree.compiler.passmanager import PassManager

    PassManager.parse("builtin.module(inline, symbol-dce)").run(module.operation)
    loops = [(op, _enclosing_loops(op))
             for op in ops_where(module, lambda op: op.name == "stablehlo.while")]
    moving = []
    for loop, outer in sorted(loops, key=lambda pair: len(pair[1])):   # outermost first
        if (not any(o == m for o in outer for m in moving) and not any(map(_reverse, outer))
                and _fits(loop) and _worth_it(loop)):
            moving.append(loop)
    for loop in moving:
        _into_dispatch(loop)
    return len(moving)


def _enclosing_loops(op) -> list:
    """The `stablehlo.while`s `op` lies in, innermost first."""
    loops, parent = [], op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "stablehlo.while":
            loops.append(parent)
        parent = parent.parent
    return loops


def _fits(loop) -> bool:
    """Whether `loop` can run in a dispatch: its state at most MAX_CARRIED_BYTES, every
    value in it of static shape and of an element type vectors hold, no host op; and
    not a gradient or linear While of whilst's (whose unrolled bodies reading their
    rows keep llvm-cpu codegen busy for minutes even with `_shared_values_materialized`:
    `iree_limits/remat_in_dispatch.py`)."""
    from iree.compiler import ir

    if _reverse(loop):
        return False
    inside = ops_where(loop, lambda op: op != loop)
    if any(op.name in _HOST_OPS or op.name.split(".")[0] not in ("stablehlo", "chlo", "tensor")
           for op in inside):
        return False
    values = [r.type for op in inside for r in op.results] + [r.type for r in loop.results]
    if not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape
               and _vector_element(t.element_type) for t in values):
        return False
    carried = [ir.RankedTensorType(r.type) for r in loop.results]
    return (all(_elements(t) > 0 for t in carried)
            and sum(_elements(t) * _bytes(t.element_type) for t in carried) <= MAX_CARRIED_BYTES)


def _reverse(loop) -> bool:
    """Whether `loop` is a gradient or linear While of whilst's."""
    from iree.compiler import ir

    return "whilst.role" in loop.attributes and ir.StringAttr(
        loop.attributes["whilst.role"]).value != "forward"


def _worth_it(loop) -> bool:
    """Whether the loop's body does little enough work per iteration that running it
    as scalar code in one dispatch beats stepping it from the host: at most 1024
    result elements plus 16 per op (`bench/loops_in_dispatch.py`: diffrax's
    Lotka-Volterra step loop, 1046 elements over 332 ops, ran 22x faster; whilst's
    own sin loop over 64 floats unrolled 16 times, 12548 over 261, 7x slower)."""
    from iree.compiler import ir

    ops = [op for op in ops_where(loop, lambda op: op != loop)
           if op.name not in ("stablehlo.constant", "stablehlo.return")]
    work = sum(_elements(ir.RankedTensorType(r.type)) for op in ops for r in op.results)
    return work <= 1024 + 16 * len(ops)


def _elements(tensor) -> int:
    count = 1
    for dim in tensor.shape:
        count *= dim
    return count


def _bytes(element) -> int:
    from iree.compiler import ir

    return max(1, ir.IntegerType(element).width // 8 if isinstance(element, ir.IntegerType)
               else ir.FloatType(element).width // 8)


def _vector_element(element) -> bool:
    from iree.compiler import ir

    return isinstance(element, (ir.IntegerType, ir.FloatType))


def _into_dispatch(loop) -> None:
    """Replace `loop` by a `flow.dispatch.region` holding it as an `scf.while` over
    vectors, which returns the loop results that are used; the barrier that fences
    the loop's results (`_iree_loop_results`) and those in its body
    (`_iree_fusion`, `_iree_unread_carries`: host-driven loops' workarounds) go."""
    from iree.compiler import ir

    for user in {use.owner for result in loop.results for use in result.uses}:
        if user.name == "stablehlo.optimization_barrier" and all(
                v.owner == loop for v in user.operands):
            _unwrap(user)
    used = [i for i, result in enumerate(loop.results) if list(result.uses)]
    types = [ir.RankedTensorType(loop.results[i].type) for i in used]
    with ir.InsertionPoint(loop), loop.location:
        region = ir.Operation.create(
            "flow.dispatch.region", results=[_signless(t) for t in types],
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0])}, regions=2)
        block = region.regions[0].blocks.append()
        outs = [_as(result, t) for result, t in zip(region.results, types)]
    for i, out in zip(used, outs):
        loop.results[i].replace_all_uses_with(out)
    ir.InsertionPoint(block).insert(loop.detach_from_parent())
    for barrier in ops_where(loop, lambda op: op.name == "stablehlo.optimization_barrier"):
        _unwrap(barrier)
    _constants_inside(loop, block)
    _scalar_bitcasts(loop)
    _shared_values_materialized(loop)
    for inner in ops_where(loop, lambda op: op.name == "stablehlo.while" and op != loop):
        _over_vectors(inner)
    location = loop.location
    results = _over_vectors(loop)
    with ir.InsertionPoint(block), location:
        ir.Operation.create("flow.return", operands=[
            _as(results[i], _signless(t)) for i, t in zip(used, types)])


def _scalar_bitcasts(loop) -> None:
    """`bitcast_convert(broadcast_in_dim(x))` of a scalar `x` in `loop` becomes
    `broadcast_in_dim(bitcast_convert(x))`: llvm-cpu codegen of the first form in a
    dispatch fails ("'memref.expand_shape' op rank 0 memrefs can only be extended/
    collapsed with/from ones"; whilst's one-hot gathers end so, `iree_forms/_onehot.py`;
    `iree_limits/bitcast_of_broadcast_in_dispatch.py`)."""
    from iree.compiler import ir

    for cast in ops_where(loop, lambda op: op.name == "stablehlo.bitcast_convert"):
        spread = cast.operands[0].owner
        if not (isinstance(spread, ir.Operation) or hasattr(spread, "name")) or \
                spread.name != "stablehlo.broadcast_in_dim" or \
                ir.RankedTensorType(spread.operands[0].type).rank != 0:
            continue
        shape = ir.RankedTensorType(cast.results[0].type)
        with ir.InsertionPoint(cast), cast.location:
            scalar = ir.Operation.create(
                "stablehlo.bitcast_convert",
                results=[ir.RankedTensorType.get([], shape.element_type)],
                operands=[spread.operands[0]])
            wide = ir.Operation.create("stablehlo.broadcast_in_dim", results=[shape],
                                       operands=[scalar.result],
                                       attributes=dict(spread.attributes))
        cast.results[0].replace_all_uses_with(wide.result)
        cast.erase()


def _shared_values_materialized(loop) -> None:
    """Values computed in `loop` from more than SHARED_FUSION_LIMIT ops that several
    ops read are read by them through a vector that IREE 3.13's llvm-cpu codegen does
    not fuse through (`util.optimization_barrier` between `_to_vector` and
    `_to_tensor`). Its RematerializeParallelOpsPass and its tile-and-fuse pass fuse
    every elementwise producer into each of its users, and in a dispatch nothing
    stops them: a body whose steps share values (an unrolled body, a vmapped one's
    chains of selects) grows exponentially, and iree-compile ran for minutes
    (`iree_limits/remat_in_dispatch.py`). Each value so kept costs the kernel a stack
    buffer (32 KiB in all on llvm-cpu), hence only those past the limit."""
    from iree.compiler import ir

    fused = {}   # value -> how many ops codegen fuses into each of its users
    for op in ops_where(loop, lambda op: op != loop):
        size = 1 + sum(fused.get(v, 0) for v in op.operands)
        for result in op.results:
            if op.name in _NOT_FUSED or not isinstance(result.type, ir.RankedTensorType):
                continue
            uses = [(use.owner, use.operand_number) for use in result.uses]
            if len(uses) < 2 or size <= SHARED_FUSION_LIMIT:
                fused[result] = size
                continue
            with ir.InsertionPoint.after(op), op.location:
                vector = _to_vector(result)
                kept = ir.Operation.create("util.optimization_barrier", results=[vector.type],
                                           operands=[vector]).result
                shared = _to_tensor(kept, result.type)
            for owner, number in uses:
                owner.operands[number] = shared


# How many ops a value may stand for, fused into each of its several users, before
# `_shared_values_materialized` keeps it apart (bench/NOTES.md: at 32 a gradient's
# forward While still ran away; with every shared value kept apart, a loop of the
# IREE corpus needed more than the 32 KiB of stack).
SHARED_FUSION_LIMIT = 8

# Ops whose results codegen does not fuse into their users.
_NOT_FUSED = frozenset({"stablehlo.constant", "stablehlo.while", "stablehlo.return"})


def _unwrap(barrier) -> None:
    for result, operand in zip(barrier.results, barrier.operands):
        result.replace_all_uses_with(operand)
    barrier.erase()


def _constants_inside(loop, block) -> None:
    """Constants defined outside `loop` and used in it, cloned at the top of `block`
    (a captured value is one more buffer binding of the dispatch)."""
    from iree.compiler import ir

    inside = set(ops_where(loop, lambda op: True))
    clones = {}
    with ir.InsertionPoint.at_block_begin(block):
        for op in inside:
            for i, value in enumerate(op.operands):
                owner = value.owner
                if (isinstance(owner, ir.Operation) and owner.name == "stablehlo.constant"
                        and owner not in inside):
                    if owner not in clones:
                        clones[owner] = owner.clone()
                    op.operands[i] = clones[owner].results[0]


def _over_vectors(loop) -> list:
    """Replace the `stablehlo.while` `loop` by an `scf.while` over vectors at its place,
    its regions' ops moved into the new one's; returns its results, as tensors, which
    replace the loop's."""
    from iree.compiler import ir

    types = [r.type for r in loop.results]
    with ir.InsertionPoint(loop), loop.location:
        inits = [_to_vector(v) for v in loop.operands]
        vectors = [v.type for v in inits]
        new = ir.Operation.create("scf.while", results=vectors, operands=inits, regions=2)
        for region, old_region, is_cond in zip(new.regions, loop.regions, (True, False)):
            block, old = region.blocks.append(*vectors), old_region.blocks[0]
            with ir.InsertionPoint(block):
                for old_arg, arg, t in zip(old.arguments, block.arguments, types):
                    old_arg.replace_all_uses_with(_to_tensor(arg, t))
            *ops, ret = [op.operation for op in old.operations]
            for op in ops:
                ir.InsertionPoint(block).insert(op.detach_from_parent())
            with ir.InsertionPoint(block):
                if is_cond:
                    test = ir.Operation.create(
                        "tensor.extract", results=[ir.IntegerType.get_signless(1)],
                        operands=[ret.operands[0]])
                    ir.Operation.create("scf.condition",
                                        operands=[test.result, *block.arguments])
                else:
                    ir.Operation.create("scf.yield",
                                        operands=[_to_vector(v) for v in ret.operands])
            ret.erase()
        results = [_to_tensor(r, t) for r, t in zip(new.results, types)]
    for old, result in zip(loop.results, results):
        old.replace_all_uses_with(result)
    loop.erase()
    return results


def _signless(tensor):
    """`tensor`'s type with unsigned integers as signless (IREE converts the types of
    the ops it lowers, not those of a dispatch region's results)."""
    from iree.compiler import ir

    element = tensor.element_type
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).is_unsigned:
        width = ir.IntegerType(element).width
        return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(width))
    return tensor


def _as(value, tensor):
    """`value` as tensor type `tensor` (`_convert`), or itself where it has that type."""
    from iree.compiler import ir

    return value if value.type == tensor else _convert(value, tensor,
                                                       ir.RankedTensorType(value.type))


def _storage(tensor):
    """The tensor type a vector of `tensor`'s elements is read from: booleans as i8
    (vectors of i1 cannot be read from tensors), unsigned integers as signless."""
    from iree.compiler import ir

    element = tensor.element_type
    if isinstance(element, ir.IntegerType) and (
            ir.IntegerType(element).width == 1 or ir.IntegerType(element).is_unsigned):
        width = max(8, ir.IntegerType(element).width)
        return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(width))
    return tensor


def _to_vector(value):
    from iree.compiler import ir

    tensor = ir.RankedTensorType(value.type)
    storage = _storage(tensor)
    if storage != tensor:
        value = _convert(value, storage, tensor)
    rank = len(tensor.shape)
    zero = ir.Operation.create("arith.constant", results=[storage.element_type], attributes={
        "value": ir.IntegerAttr.get(storage.element_type, 0)
        if isinstance(storage.element_type, ir.IntegerType)
        else ir.FloatAttr.get(storage.element_type, 0.0)}).result
    return ir.Operation.create(
        "vector.transfer_read",
        results=[ir.VectorType.get(tensor.shape, storage.element_type)],
        operands=[value, *[_index_zero()] * rank, zero],
        attributes={**_transfer_attributes(rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, rank, 1, 0])}).result


def _to_tensor(vector, tensor_type):
    from iree.compiler import ir

    tensor = ir.RankedTensorType(tensor_type)
    storage = _storage(tensor)
    rank = len(tensor.shape)
    empty = ir.Operation.create("tensor.empty", results=[storage]).result
    value = ir.Operation.create(
        "vector.transfer_write", results=[storage],
        operands=[vector, empty, *[_index_zero()] * rank],
        attributes={**_transfer_attributes(rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, rank, 0])}).result
    return value if storage == tensor else _convert(value, tensor, storage)


def _convert(value, to, source):
    """`value` of tensor type `source` as `to`: a boolean converted to or from an
    integer, an unsigned integer's bits taken as signless."""
    from iree.compiler import ir

    boolean = any(ir.IntegerType(t.element_type).width == 1 for t in (to, source))
    return ir.Operation.create("stablehlo.convert" if boolean else "stablehlo.bitcast_convert",
                               results=[to], operands=[value]).result


def _index_zero():
    from iree.compiler import ir

    index = ir.IndexType.get()
    return ir.Operation.create("arith.constant", results=[index],
                               attributes={"value": ir.IntegerAttr.get(index, 0)}).result


def _transfer_attributes(rank) -> dict:
    from iree.compiler import ir

    dims = [ir.AffineExpr.get_dim(d) for d in range(rank)]
    return {"permutation_map": ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, dims)),
            "in_bounds": ir.ArrayAttr.get([ir.BoolAttr.get(True)] * rank)}
