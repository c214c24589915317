"""Loops over a few numbers run whole inside one dispatch (llvm-cpu; cuda in one
thread, `_iree_gpu_loop_kernels`).

IREE drives each `stablehlo.while` from the host: every iteration costs command
submissions, dispatches and a readback of the loop test, about 2 us and more per
iteration on llvm-cpu (`research/iree-costs.md`), where XLA:CPU runs the whole loop
in compiled code. A loop whose state is a few numbers (a solver's step loop, a Newton
or fixed-point iteration, diffrax's or optimistix's `lax.while_loop`s) spends nearly
all its time there: diffrax's Lotka-Volterra solve took 30-70 us per solver step.

IREE 3.13 compiles a loop that its input places in a `flow.dispatch.region` into
that one dispatch, on two conditions: the loop carries vectors, not tensors (one-shot
bufferization refuses loops that carry tensors: "Yield operand #0 is not equivalent
to the corresponding iter bbArg"; stacks the loop only writes rows into are the
exception, `_iree_rows_in_dispatch`), and codegen does not distribute the dispatch over
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
this rewrite. A gradient While moves as a forward loop does: it carries a few
numbers and reads its rows from the stacks its forward While wrote.
"""
from __future__ import annotations

from whilst.ir._buffers import UNINITIALIZED_ATTR
from whilst.ir._loop_emitter import OVER_CHUNKS_ATTR
from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import opaque_copy
from whilst.lowering._iree_rows_in_dispatch import (
    index_constant, insert_rows, inserted_slice, rows_written_in_place, written_rows)

# llvm-cpu codegen of a dispatch in one workgroup: what lets a loop in a dispatch
# region compile (module docstring). It holds for every dispatch of the module, so
# modules with such loops run their other dispatches on one thread of local-task too.
DISABLE_DISTRIBUTION = "--iree-llvmcpu-disable-distribution"

# Loop state at most this many bytes: a solver's, or a checkpointed gradient's slots
# (`checkpoints=90` copies of 16 floats, 5.6 KiB), not a residual stack (whose rows a
# loop in a dispatch would keep in the kernel's stack memory, 32 KiB on llvm-cpu).
MAX_CARRIED_BYTES = 8192

# Ops that cannot run inside a kernel (host and device communication, library
# calls) or whose lowering IREE does not support there.
_HOST_OPS = frozenset({
    "stablehlo.custom_call", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send",
    "stablehlo.recv", "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.all_to_all",
    "stablehlo.reduce_scatter", "stablehlo.collective_permute",
    "stablehlo.collective_broadcast", "stablehlo.rng", "stablehlo.rng_bit_generator",
    "stablehlo.sort", "stablehlo.fft", "stablehlo.triangular_solve", "stablehlo.cholesky"})


def loops_in_dispatch(module, on_host=frozenset()) -> int:
    """Inline the module's functions, then move each outermost `stablehlo.while` that
    `_fits` and is `_worth_it` into a dispatch region of its own (module docstring),
    in place; within a loop that stays on the host, its outermost loops that qualify
    move so, except in gradient and linear Whiles other than a budget's gradient
    While over chunks (`_over_chunks`: its chunk's loops move). A forward loop
    counted by its trip count that writes rows (`_recomputes`: a budget chunk's
    steps run again) moves within MAX_RECOMPUTED_KEPT_BYTES. A moved loop reads the
    results of loops left on the host through barriers of its own
    (`_host_results_fenced_apart`), and a host loop those of moved loops through
    copies (`_host_loop_inits_copied`).
    The loops whose numbers (in walk order) are in `on_host` stay on the host; each
    region records its loop's number (`LOOP_ATTR`, `loops_at_lines`). Returns how
    many loops moved (0: the module is unchanged but inlined)."""
    from iree.compiler.passmanager import PassManager

    PassManager.parse("builtin.module(inline, symbol-dce)").run(module.operation)
    loops = [(number, op, _enclosing_loops(op)) for number, op in enumerate(
        ops_where(module, lambda op: op.name == "stablehlo.while"))]
    moving = []
    for number, loop, outer in sorted(loops, key=lambda each: len(each[2])):  # outermost first
        if (number not in on_host and not any(o == m for o in outer for _, m in moving)
                and not any(_reverse(o) and not _over_chunks(o) for o in outer)
                and _fits(loop) and _worth_it(loop)
                and not (_recomputes(loop)
                         and _kept_bytes(loop) > MAX_RECOMPUTED_KEPT_BYTES)):
            moving.append((number, loop))
    for _, loop in moving:
        _host_results_fenced_apart(loop, [m for _, m in moving])
    for number, loop in moving:
        _into_dispatch(loop, number)
    _host_loop_inits_copied(module)
    return len(moving)


# The attribute of a dispatch region that holds a loop: the loop's number.
LOOP_ATTR = "whilst.loop"


def loops_at_lines(text: str, lines) -> set:
    """The numbers (`LOOP_ATTR`) of the loops in dispatch regions of module `text`
    (a form `loops_in_dispatch` made) that hold an op at one of `lines` of `text`:
    where iree-compile's diagnostics of a failed compile point."""
    from whilst.lowering._iree_ir import ir

    found, lines = set(), set(lines)
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        for region in ops_where(module, lambda op: LOOP_ATTR in op.attributes):
            if any(op.location.start_line in lines for op in ops_where(region, lambda op: True)):
                found.add(ir.IntegerAttr(region.attributes[LOOP_ATTR]).value)
    return found


def _host_loop_inits_copied(module) -> None:
    """Each `stablehlo.while` left on the host that starts a carry from a result of a
    loop's dispatch region (or from its `_as` conversion), or reads one in its body,
    starts from or reads its own copy instead (`_iree_loops.opaque_copy`): IREE 3.13
    made modules that failed on every call ("ref is null ... hal.buffer.subspan":
    the gradient of a loop under a budget of a few rows, whose forward and
    recomputing loops move and whose gradient While stays on the host; the default
    policy's gradient, whose gradient While over chunks reads the step count the
    forward While over chunks, moved, returns;
    `iree_limits/dispatch_result_as_loop_init.py`). The copies are made in walk
    order: their order changes the module text, and of the orders a set gave,
    one made the ODE-fit sample's gradient fail on every call ("indirect buffer
    reference slot 0 is out range")."""
    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        for index, value in enumerate(loop.operands):
            if _region_result(value):
                loop.operands[index] = opaque_copy(value, loop, index)
        body_ops = ops_where(loop, lambda op: op != loop)
        inside, copies = set(body_ops), {}
        for op in body_ops:
            for index, value in enumerate(op.operands):
                if _region_result(value) and value.owner not in inside:
                    if value not in copies:
                        serial = len(loop.operands) + len(copies)
                        copies[value] = opaque_copy(value, loop, serial)
                    op.operands[index] = copies[value]


def _region_result(value) -> bool:
    """Whether `value` is a result of a loop's dispatch region, or its `_as` conversion."""
    from whilst.lowering._iree_ir import ir

    owner = value.owner
    if isinstance(owner, ir.Block):
        return False
    if owner.name in ("stablehlo.convert", "stablehlo.bitcast_convert"):
        owner = owner.operands[0].owner
        if isinstance(owner, ir.Block):
            return False
    return owner.name == "flow.dispatch.region" and LOOP_ATTR in owner.attributes


def _enclosing_loops(op) -> list:
    """The `stablehlo.while`s `op` lies in, innermost first."""
    loops, parent = [], op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "stablehlo.while":
            loops.append(parent)
        parent = parent.parent
    return loops


def _fits(loop) -> bool:
    """Whether `loop` can run in a dispatch: its state at most MAX_CARRIED_BYTES (less
    the stacks it only writes rows into, `_iree_rows_in_dispatch`), every value in it
    of static shape and of an element type vectors hold, no host op."""
    from whilst.lowering._iree_ir import ir

    inside = ops_where(loop, lambda op: op != loop)
    if any(op.name in _HOST_OPS or op.name.split(".")[0] not in ("stablehlo", "chlo", "tensor")
           for op in inside):
        return False
    values = [r.type for op in inside for r in op.results] + [r.type for r in loop.results]
    if not all(isinstance(t, ir.RankedTensorType) and t.has_static_shape
               and _vector_element(t.element_type) for t in values):
        return False
    in_place = rows_written_in_place(loop)
    carried = [ir.RankedTensorType(r.type) for k, r in enumerate(loop.results)
               if k not in in_place]
    return (all(_elements(t) > 0 for t in carried)
            and sum(_elements(t) * _bytes(t.element_type) for t in carried) <= MAX_CARRIED_BYTES)


def _host_results_fenced_apart(loop, moving) -> None:
    """Each value `loop` reads (its operands, the stacks its body reads) that the
    one barrier fencing the results of a loop not in `moving` passes
    (`_iree_loop_results`), `loop` reads through a barrier of its own instead, in
    place. Read from the shared barrier by a loop in a dispatch, IREE 3.13 made
    modules that fail on every call ("ref is null; while invoking native function
    hal.buffer.subspan", the same failure as
    `iree_limits/loop_results_in_one_barrier.py`'s): `tests/ir/test_prng_keys.py`'s
    gradient, whose last chunk's stored gradient reads the stacks of the budget's
    forward While over chunks."""
    from whilst.lowering._iree_ir import ir

    ops = ops_where(loop, lambda op: True)
    inside, apart = set(ops), {}
    for op in ops:
        for index, value in enumerate(op.operands):
            shared = value.owner
            if (getattr(shared, "name", None) != "stablehlo.optimization_barrier"
                    or shared in inside or len(shared.results) < 2):
                continue
            source = shared.operands[ir.OpResult(value).result_number]
            if (getattr(source.owner, "name", None) != "stablehlo.while"
                    or any(source.owner == m for m in moving)):
                continue
            if value not in apart:
                with ir.InsertionPoint(loop), loop.location:
                    apart[value] = ir.Operation.create(
                        "stablehlo.optimization_barrier", results=[value.type],
                        operands=[source]).result
            op.operands[index] = apart[value]


def _reverse(loop) -> bool:
    """Whether `loop` is a gradient or linear While of whilst's."""
    from whilst.lowering._iree_ir import ir

    return "whilst.role" in loop.attributes and ir.StringAttr(
        loop.attributes["whilst.role"]).value != "forward"


# A loop that `_recomputes` (a budget chunk's steps run again) moves only where the
# values `_shared_values` keeps apart in it take at most this many bytes: past
# llvm-cpu's 32 KiB of kernel stack, a failed compile costs `compile_module` a
# second compile of the whole module. Measured on `tests/ir/test_prng_keys.py`'s
# key-carrying loop: its steps recomputed (a counted loop, 11 steps an iteration)
# keep 6092 bytes and needed 97 KiB; the forward's chunk loop over the same steps (7
# an iteration, not counted) keeps 4017 and needed 4.4 KiB; `bench/default_policy.py
# --width 3`'s recomputed sin steps keep 504.
MAX_RECOMPUTED_KEPT_BYTES = 4096


def _recomputes(loop) -> bool:
    """Whether `loop` is a forward loop counted by its trip count (its test is
    `i < bound` alone) that writes rows (`rows_written_in_place`): a budget chunk's
    steps run again, or a user's loop such as `i < n` pushing its rows."""
    from whilst.lowering._iree_ir import ir

    cond = loop.regions[0].blocks[0]
    tests = [op for op in cond.operations if op.name != "stablehlo.return"]
    return (not _reverse(loop) and len(tests) == 1 and tests[0].name == "stablehlo.compare"
            and tests[0].operands[0] == cond.arguments[0]
            and ir.Attribute(tests[0].attributes["comparison_direction"])
            == ir.Attribute.parse("#stablehlo<comparison_direction LT>")
            and any(rows_written_in_place(loop).values()))


def _kept_bytes(loop) -> int:
    """The bytes of the values `_shared_values` keeps apart in `loop`."""
    from whilst.lowering._iree_ir import ir

    return sum(_elements(t) * _bytes(t.element_type) for t in (
        ir.RankedTensorType(v.type) for v in _shared_values(loop)))


def _over_chunks(loop) -> bool:
    """Whether `loop` is a While over a budget's chunks (`whilst.over_chunks`)."""
    return OVER_CHUNKS_ATTR in loop.attributes


def _worth_it(loop) -> bool:
    """Whether the loop's body does little enough work per iteration that running it
    as scalar code in one dispatch beats stepping it from the host: at most 1024
    result elements of ops that compute (`_MOVES` only place values, which scalar
    code mostly folds away; a write of rows in place counts the elements it writes)
    plus 16 per op (`bench/loops_in_dispatch.py`: diffrax's Lotka-Volterra step loop,
    659 elements over 339 ops, ran 22x faster; whilst's own sin loop over 64 floats
    unrolled 16 times, 12354 over 260, 7x slower; `bench/clients.py`: the LV
    gradient's gradient While, 14791 over 1253, and its forward While took the whole
    gradient from 3.74 ms to 108 us)."""
    work, ops = loop_work(loop)
    return work <= 1024 + 16 * ops


def loop_work(loop) -> tuple[int, int]:
    """`(work, ops)` of `loop` per iteration, as `_worth_it` weighs them: the result
    elements of its ops that compute (a write of rows in place, the elements it
    writes) and how many ops it has, constants and terminators aside."""
    from whilst.lowering._iree_ir import ir

    ops = [op for op in ops_where(loop, lambda op: op != loop)
           if op.name not in ("stablehlo.constant", "stablehlo.return")]
    writes = {write for inner in ops_where(loop, lambda op: op.name == "stablehlo.while")
              for chain in rows_written_in_place(inner).values() for write in chain}
    stacking = {op for *_, chain_ops in _stacked_lines(loop) for op in chain_ops}
    work = sum(sum(_elements(ir.RankedTensorType(v.type))
                   for v in ([written_rows(op)] if op in writes else op.results))
               for op in ops if op.name not in _MOVES and op not in stacking)
    return work, len(ops)


# Ops that place or relabel values without computing new ones.
_MOVES = frozenset({
    "stablehlo.broadcast_in_dim", "stablehlo.iota", "stablehlo.reshape",
    "stablehlo.bitcast_convert", "stablehlo.convert", "stablehlo.optimization_barrier",
    "stablehlo.concatenate", "stablehlo.slice", "stablehlo.dynamic_slice",
    "stablehlo.transpose"})


def _elements(tensor) -> int:
    count = 1
    for dim in tensor.shape:
        count *= dim
    return count


def _bytes(element) -> int:
    from whilst.lowering._iree_ir import ir

    return max(1, ir.IntegerType(element).width // 8 if isinstance(element, ir.IntegerType)
               else ir.FloatType(element).width // 8)


def _vector_element(element) -> bool:
    from whilst.lowering._iree_ir import ir

    return isinstance(element, (ir.IntegerType, ir.FloatType))


def _into_dispatch(loop, number) -> None:
    """Replace `loop` by a `flow.dispatch.region` holding it as an `scf.while` over
    vectors, which returns the loop results that are used and records the loop's
    `number` (LOOP_ATTR); the barrier that fences
    the loop's results (`_iree_loop_results`) and those in its body
    (`_iree_fusion`, `_iree_unread_carries`: host-driven loops' workarounds) go, and
    the selects that stack lines for fused dispatches become concatenations
    (`_concatenated`)."""
    from whilst.lowering._iree_ir import ir

    for user in {use.owner for result in loop.results for use in result.uses}:
        if user.name == "stablehlo.optimization_barrier" and all(
                v.owner == loop for v in user.operands):
            _unwrap(user)
    for barrier in ops_where(loop, lambda op: op.name == "stablehlo.optimization_barrier"):
        _unwrap(barrier)
    used = [i for i, result in enumerate(loop.results) if list(result.uses)]
    in_place = rows_written_in_place(loop)
    types = [ir.RankedTensorType(loop.results[i].type) for i in used]
    returned = [_storage(t) if i in in_place else _signless(t) for i, t in zip(used, types)]
    with ir.InsertionPoint(loop), loop.location:
        region = ir.Operation.create(
            "flow.dispatch.region", results=returned,
            attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0]),
                        LOOP_ATTR: ir.IntegerAttr.get(ir.IntegerType.get_signless(32), number)},
            regions=2)
        block = region.regions[0].blocks.append()
        outs = [_as(result, t) for result, t in zip(region.results, types)]
    for i, out in zip(used, outs):
        loop.results[i].replace_all_uses_with(out)
    ir.InsertionPoint(block).insert(loop.detach_from_parent())
    for head, axis, lines, _ in _stacked_lines(loop):
        _concatenated(head, axis, lines)
    _constants_inside(loop, block)
    _scalar_bitcasts(loop)
    _scalar_pads(loop)
    _shared_values_materialized(loop)
    for inner in ops_where(loop, lambda op: op.name == "stablehlo.while" and op != loop):
        _over_vectors(inner)
    location = loop.location
    results = _over_vectors(loop, set(used))
    with ir.InsertionPoint(block), location:
        ir.Operation.create("flow.return", operands=[
            _as(results[i], t) for i, t in zip(used, returned)])


def _stacked_lines(loop) -> list:
    """`(head, axis, lines, ops)` of each chain of selects in `loop` that stacks lines
    (`whilst.ir.iree_forms._stacked_lines`: `select(iota(axis) == k, broadcast(x_k),
    ...)` for k = 0 .. n - 2, ending in `broadcast(x_{n-1})`), as `_line_selects`
    reads it from its first select `head` (no such select lies inside another chain,
    whose next select tests k = 1)."""
    chains = [(op, _line_selects(op))
              for op in ops_where(loop, lambda op: op.name == "stablehlo.select")]
    return [(head, *chain) for head, chain in chains if chain is not None]


def _line_selects(select):
    """`(axis, lines, ops)` of the chain of selects stacking lines from `select` on
    (`_stacked_lines`): the lines' broadcasts in order, and the selects and compares
    a concatenation replaces; None where `select` does not start one."""
    from whilst.lowering._iree_ir import ir

    shape, axis, lines, ops, op = None, None, [], [], select
    while not isinstance(op, ir.Block) and op.name == "stablehlo.select":
        test, line = op.operands[0].owner, op.operands[1].owner
        if (isinstance(test, ir.Block) or test.name != "stablehlo.compare"
                or str(test.attributes["comparison_direction"]) != _EQ):
            return None
        iota, k = (v.owner for v in test.operands)
        if (isinstance(iota, ir.Block) or isinstance(k, ir.Block)
                or iota.name != "stablehlo.iota" or k.name != "stablehlo.constant"
                or isinstance(line, ir.Block) or line.name != "stablehlo.broadcast_in_dim"):
            return None
        dim = ir.IntegerAttr(iota.attributes["iota_dimension"]).value
        value = ir.DenseElementsAttr(k.attributes["value"])
        if (not value.is_splat or (axis is not None and dim != axis)
                or ir.IntegerAttr(value.get_splat_value()).value != len(lines)):
            return None
        shape, axis = ir.RankedTensorType(op.results[0].type), dim
        lines.append(line)
        ops += [op, test]
        op = op.operands[2].owner
    if (not lines or isinstance(op, ir.Block) or op.name != "stablehlo.broadcast_in_dim"
            or shape.shape[axis] != len(lines) + 1):
        return None
    return axis, [*lines, op], ops


_EQ = "#stablehlo<comparison_direction EQ>"


def _concatenated(head, axis, lines) -> None:
    """Replace the chain of selects from `head` that stacks the broadcasts `lines`
    along `axis` (`_stacked_lines`) by the concatenation it computes: in a
    dispatch's scalar code each select of the chain reads every line of the stack,
    n^2 elements for n lines."""
    from whilst.lowering._iree_ir import ir

    shape = ir.RankedTensorType(head.results[0].type)
    line_type = ir.RankedTensorType.get(
        [1 if d == axis else n for d, n in enumerate(shape.shape)], shape.element_type)
    with ir.InsertionPoint(head), head.location:
        parts = [ir.Operation.create(
            "stablehlo.broadcast_in_dim", results=[line_type], operands=[line.operands[0]],
            attributes={"broadcast_dimensions": line.attributes["broadcast_dimensions"]}).result
            for line in lines]
        stacked = ir.Operation.create(
            "stablehlo.concatenate", results=[shape], operands=parts,
            attributes={"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), axis)})
    head.results[0].replace_all_uses_with(stacked.result)


def _unwritten(value) -> bool:
    """Whether `value` is a residual stack's zero fill that the IREE preparation kept
    (`_iree._leave_uninitialized`): contents never read before they are written."""
    from whilst.lowering._iree_ir import ir

    return not isinstance(value.owner, ir.Block) and UNINITIALIZED_ATTR in value.owner.attributes


def _scalar_bitcasts(loop) -> None:
    """`bitcast_convert(broadcast_in_dim(x))` of a scalar `x` in `loop` becomes
    `broadcast_in_dim(bitcast_convert(x))`: llvm-cpu codegen of the first form in a
    dispatch fails ("'memref.expand_shape' op rank 0 memrefs can only be extended/
    collapsed with/from ones"; whilst's one-hot gathers end so, `iree_forms/_onehot.py`;
    `iree_limits/bitcast_of_broadcast_in_dispatch.py`)."""
    from whilst.lowering._iree_ir import ir

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


def _scalar_pads(loop) -> None:
    """`pad(broadcast_in_dim(x))` of a scalar `x` in `loop` pads the broadcast read
    through a vector that codegen does not fuse through (as in
    `_shared_values_materialized`): llvm-cpu codegen of the first form in a dispatch
    fails as `_scalar_bitcasts`' does (the adjoint of indexing one element, in a
    gradient While; `iree_limits/pad_of_broadcast_in_dispatch.py`)."""
    from whilst.lowering._iree_ir import ir

    for pad in ops_where(loop, lambda op: op.name == "stablehlo.pad"):
        spread = pad.operands[0].owner
        if (getattr(spread, "name", None) != "stablehlo.broadcast_in_dim"
                or ir.RankedTensorType(spread.operands[0].type).rank != 0):
            continue
        with ir.InsertionPoint(pad), pad.location:
            pad.operands[0] = _kept_apart(pad.operands[0])


def _kept_apart(value):
    """`value` read through a vector behind a `util.optimization_barrier`, which
    codegen neither fuses nor folds through. A scalar is kept as one element and
    reshaped back: kept as a 0-d vector and reshaped to one element (a gather's
    index), llvm-cpu codegen fails (`iree_limits/scalar_index_kept_apart_in_dispatch.py`).
    Booleans and unsigned integers, read from a storage type of their own, stay
    scalars (a boolean as one element of i8 storage fails to legalize)."""
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(value.type)
    if tensor.rank == 0 and _storage(tensor) == tensor:
        return _reshaped(_kept_apart(_reshaped(value, [1])), [])
    vector = _to_vector(value)
    kept = ir.Operation.create("util.optimization_barrier", results=[vector.type],
                               operands=[vector]).result
    return _to_tensor(kept, value.type)


def _reshaped(value, shape):
    from whilst.lowering._iree_ir import ir

    element = ir.RankedTensorType(value.type).element_type
    return ir.Operation.create("stablehlo.reshape",
                               results=[ir.RankedTensorType.get(shape, element)],
                               operands=[value]).result


def _shared_values_materialized(loop) -> None:
    """Values computed in `loop` from more than SHARED_FUSION_LIMIT ops that several
    ops read are read by them through a vector that IREE 3.13's llvm-cpu codegen does
    not fuse through (`util.optimization_barrier` between `_to_vector` and
    `_to_tensor`). Its RematerializeParallelOpsPass and its tile-and-fuse pass fuse
    every elementwise producer into each of its users, and in a dispatch nothing
    stops them: a body whose steps share values (an unrolled body, a vmapped one's
    chains of selects) grows exponentially, and iree-compile ran for minutes
    (`iree_limits/remat_in_dispatch.py`). Each value so kept costs the kernel a stack
    buffer (32 KiB in all on llvm-cpu), hence only those past the limit
    (REVERSE_SHARED_FUSION_LIMIT in gradient and linear Whiles)."""
    from whilst.lowering._iree_ir import ir

    for result in _shared_values(loop):
        uses = [(use.owner, use.operand_number) for use in result.uses]
        with ir.InsertionPoint.after(result.owner), result.owner.location:
            shared = _kept_apart(result)
        for owner, number in uses:
            owner.operands[number] = shared


def _shared_values(loop) -> list:
    """The results of ops in `loop` that `_shared_values_materialized` keeps apart."""
    from whilst.lowering._iree_ir import ir

    limit = REVERSE_SHARED_FUSION_LIMIT if _reverse(loop) else SHARED_FUSION_LIMIT
    fused = {}   # value -> how many ops codegen fuses into each of its users
    shared = []
    for op in ops_where(loop, lambda op: op != loop):
        size = 1 + sum(fused.get(v, 0) for v in op.operands)
        for result in op.results:
            if (op.name in _NOT_FUSED or not isinstance(result.type, ir.RankedTensorType)
                    or _elements(ir.RankedTensorType(result.type)) == 0):
                continue
            if len(list(result.uses)) < 2 or size <= limit:
                fused[result] = size
            else:
                shared.append(result)
    return shared


# How many ops a value may stand for, fused into each of its several users, before
# `_shared_values_materialized` keeps it apart (bench/NOTES.md: at 32 a gradient's
# forward While still ran away; with every shared value kept apart, a loop of the
# IREE corpus needed more than the 32 KiB of stack).
SHARED_FUSION_LIMIT = 8
# The same in gradient and linear Whiles: every shared value kept apart (at 8 an Euler
# gradient While still ran away, `iree_limits/remat_in_dispatch.py`).
REVERSE_SHARED_FUSION_LIMIT = 0

# Ops whose results codegen does not fuse into their users.
_NOT_FUSED = frozenset({"stablehlo.constant", "stablehlo.while", "stablehlo.return"})


def _unwrap(barrier) -> None:
    for result, operand in zip(barrier.results, barrier.operands):
        result.replace_all_uses_with(operand)
    barrier.erase()


def _constants_inside(loop, block) -> None:
    """Constants defined outside `loop` and used in it, cloned at the top of `block`
    (a captured value is one more buffer binding of the dispatch)."""
    from whilst.lowering._iree_ir import ir

    ops = ops_where(loop, lambda op: True)
    inside, clones = set(ops), {}
    with ir.InsertionPoint.at_block_begin(block):
        for op in ops:
            for i, value in enumerate(op.operands):
                owner = value.owner
                if (isinstance(owner, ir.Operation) and owner.name == "stablehlo.constant"
                        and owner not in inside):
                    if owner not in clones:
                        clones[owner] = owner.clone()
                    op.operands[i] = clones[owner].results[0]


def _over_vectors(loop, read=None) -> list:
    """Replace the `stablehlo.while` `loop` by an `scf.while` over vectors at its place,
    its regions' ops moved into the new one's; returns its results, as tensors, which
    replace the loop's. Stacks it only writes rows into stay tensors, written in
    place (`_iree_rows_in_dispatch`), or go where nothing reads the loop's result (a
    kernel would keep them in its stack memory); their results are None. `read`: for
    the loop a region returns, the results it returns; those are not replaced, and
    the stacks are returned as they are stored (`_storage`)."""
    from whilst.lowering._iree_ir import ir

    types = [r.type for r in loop.results]
    in_place = rows_written_in_place(loop)
    unread = {k for k in in_place if (k not in read if read is not None
                                      else not list(loop.results[k].uses))}
    kept = [k for k in range(len(types)) if k not in unread]
    with ir.InsertionPoint(loop), loop.location:
        inits = [_stack_init(loop.operands[k], _storage(ir.RankedTensorType(types[k])))
                 if k in in_place else _to_vector(loop.operands[k]) for k in kept]
        vectors = [v.type for v in inits]
        new = ir.Operation.create("scf.while", results=vectors, operands=inits, regions=2)
        for region, old_region, is_cond in zip(new.regions, loop.regions, (True, False)):
            block, old = region.blocks.append(*vectors), old_region.blocks[0]
            args = dict(zip(kept, block.arguments))
            with ir.InsertionPoint(block):
                for k in kept:
                    if k not in in_place:
                        old.arguments[k].replace_all_uses_with(_to_tensor(args[k], types[k]))
            if not is_cond:
                _rows_inserted(in_place, old, args)
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
                    ir.Operation.create("scf.yield", operands=[
                        ret.operands[k] if k in in_place else _to_vector(ret.operands[k])
                        for k in kept])
            ret.erase()
        outs = dict(zip(kept, new.results))
        results = [None if k in unread else _to_tensor(outs[k], t) if k not in in_place
                   else outs[k] if read is not None else _as(outs[k], ir.RankedTensorType(t))
                   for k, t in enumerate(types)]
    if read is None:
        for old, result in zip(loop.results, results):
            if result is not None:
                old.replace_all_uses_with(result)
    loop.erase()
    return results


def _stack_init(value, storage):
    """The first value of a stack carried as a tensor of type `storage`, made in the
    dispatch region: a `tensor.empty` of its own where `value` is one or a residual
    stack's kept zero fill (`_unwritten`; one-shot bufferization then writes the
    stack in place in the dispatch's result, where it would copy a captured one), a
    fill of a scalar constant written row by row (`_filled_by_rows`), else `value`
    converted. IREE folds a fill made in the body of a loop stepped from the host
    into a constant that llvm-cpu keeps in the kernel's stack memory, past its 32 KiB
    for a budget's chunk of rows (`iree_limits/fill_into_dispatch_loop.py`)."""
    from whilst.lowering._iree_ir import ir

    if getattr(value.owner, "name", None) == "tensor.empty" or _unwritten(value):
        return ir.Operation.create("tensor.empty", results=[storage]).result
    splat = _splat(value)
    if splat is not None and ir.RankedTensorType(value.type).element_type == storage.element_type:
        return _filled_by_rows(splat, storage)
    return _as(value, storage)


def _splat(value):
    """The element attribute of `value` where it is a broadcast of a scalar constant,
    else None."""
    from whilst.lowering._iree_ir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "stablehlo.broadcast_in_dim":
        return None
    const = owner.operands[0].owner
    if isinstance(const, ir.Block) or const.name != "stablehlo.constant":
        return None
    return ir.DenseElementsAttr(const.attributes["value"]).get_splat_value()


def _filled_by_rows(element, storage):
    """A tensor of type `storage` filled with `element`, one row per iteration of an
    `scf.for`, each a `tensor.insert_slice` of a constant row: bufferized in place,
    as the loop's own writes of rows (a `linalg.fill` of the whole tensor becomes
    one vector, which llvm-cpu refuses past 16 KiB)."""
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(storage)
    row = ir.RankedTensorType.get([1, *tensor.shape[1:]], tensor.element_type)
    empty = ir.Operation.create("tensor.empty", results=[storage]).result
    const = ir.Operation.create("arith.constant", results=[row], attributes={
        "value": ir.DenseElementsAttr.get_splat(row, element)}).result
    lower, upper, step = index_constant(0), index_constant(tensor.shape[0]), index_constant(1)
    loop = ir.Operation.create("scf.for", results=[storage],
                               operands=[lower, upper, step, empty], regions=1)
    block = loop.regions[0].blocks.append(ir.IndexType.get(), storage)
    with ir.InsertionPoint(block):
        written = inserted_slice(const, block.arguments[1], [
            block.arguments[0], *[index_constant(0) for _ in tensor.shape[1:]]])
        ir.Operation.create("scf.yield", operands=[written])
    return loop.results[0]


def _rows_inserted(in_place, old, args) -> None:
    """In the body `old` of a loop becoming an `scf.while` whose body's arguments are
    `args` (by carry), each write of rows into a carry of `in_place`
    (`rows_written_in_place`) becomes a `tensor.insert_slice` into that argument, as
    it is stored; the writes into a carry not in `args` go."""
    from whilst.lowering._iree_ir import ir

    for k, writes in in_place.items():
        carry = args.get(k)
        for write in writes:
            if carry is not None:
                rows = written_rows(write)
                with ir.InsertionPoint(write), write.location:
                    stored = _as(rows, ir.RankedTensorType.get(
                        ir.RankedTensorType(rows.type).shape,
                        ir.RankedTensorType(carry.type).element_type))
                carry = insert_rows(write, carry, stored)
            write.results[0].replace_all_uses_with(
                write.operands[0] if carry is None else carry)
            write.erase()
        if carry is not None:
            old.arguments[k].replace_all_uses_with(args[k])


def _signless(tensor):
    """`tensor`'s type with unsigned integers as signless (IREE converts the types of
    the ops it lowers, not those of a dispatch region's results)."""
    from whilst.lowering._iree_ir import ir

    element = tensor.element_type
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).is_unsigned:
        width = ir.IntegerType(element).width
        return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(width))
    return tensor


def _as(value, tensor):
    """`value` as tensor type `tensor` (`_convert`), or itself where it has that type."""
    from whilst.lowering._iree_ir import ir

    return value if value.type == tensor else _convert(value, tensor,
                                                       ir.RankedTensorType(value.type))


def _storage(tensor):
    """The tensor type a vector of `tensor`'s elements is read from: booleans as i8
    (vectors of i1 cannot be read from tensors), unsigned integers as signless."""
    from whilst.lowering._iree_ir import ir

    element = tensor.element_type
    if isinstance(element, ir.IntegerType) and (
            ir.IntegerType(element).width == 1 or ir.IntegerType(element).is_unsigned):
        width = max(8, ir.IntegerType(element).width)
        return ir.RankedTensorType.get(tensor.shape, ir.IntegerType.get_signless(width))
    return tensor


def _to_vector(value):
    from whilst.lowering._iree_ir import ir

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
        operands=[value, *[index_constant(0)] * rank, zero],
        attributes={**_transfer_attributes(rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, rank, 1, 0])}).result


def _to_tensor(vector, tensor_type):
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(tensor_type)
    storage = _storage(tensor)
    rank = len(tensor.shape)
    empty = ir.Operation.create("tensor.empty", results=[storage]).result
    value = ir.Operation.create(
        "vector.transfer_write", results=[storage],
        operands=[vector, empty, *[index_constant(0)] * rank],
        attributes={**_transfer_attributes(rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, rank, 0])}).result
    return value if storage == tensor else _convert(value, tensor, storage)


def _convert(value, to, source):
    """`value` of tensor type `source` as `to`: a boolean converted to or from an
    integer, an unsigned integer's bits taken as signless."""
    from whilst.lowering._iree_ir import ir

    boolean = any(ir.IntegerType(t.element_type).width == 1 for t in (to, source))
    return ir.Operation.create("stablehlo.convert" if boolean else "stablehlo.bitcast_convert",
                               results=[to], operands=[value]).result


def _transfer_attributes(rank) -> dict:
    from whilst.lowering._iree_ir import ir

    dims = [ir.AffineExpr.get_dim(d) for d in range(rank)]
    return {"permutation_map": ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, dims)),
            "in_bounds": ir.ArrayAttr.get([ir.BoolAttr.get(True)] * rank)}
