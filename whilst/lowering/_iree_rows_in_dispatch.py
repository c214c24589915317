"""Stacks that a loop in a dispatch only writes rows into, written in place.

A loop that stores its residual rows (whilst's forward While, a `lax.scan` keeping
its outputs) carries stacks far past what a kernel holds as vectors: diffrax's
Lotka-Volterra forward While carries 460 KB of them. Such a stack is carried as a
tensor instead, each write of rows becoming a `tensor.insert_slice`::

    stack = body_writes(stack)            # dynamic_update_slice / scatter of rows
    ==
    stack = tensor.insert_slice(rows, stack, offsets=clamped(start))

and IREE 3.13 bufferizes an `scf.while` in a dispatch region that carries a tensor
so updated in place, in the dispatch's output (an `scf.while` whose body writes a
carried tensor any other way, or an `scf.for` with a `linalg.generic` on it, is
refused: "Yield operand #0 is not equivalent to the corresponding iter bbArg",
`research/loop-in-dispatch`). A carry qualifies when the loop's test does not read
it and the body reads it only to write rows into it, the writes chained, the last
one returned at its place: its rows are written once each and never read in the
loop.
"""
from __future__ import annotations

# The operand of a scatter or `dynamic_update_slice` that holds the rows written.
_UPDATE = {"stablehlo.scatter": 2, "stablehlo.dynamic_update_slice": 1}


def rows_written_in_place(loop) -> dict:
    """`{k: writes}` for each carry `k` of the `stablehlo.while` `loop` that its test
    does not read and its body only writes rows into (module docstring), `writes` the
    chain of ops that do, in order (empty for a carry the body returns as it is)."""
    cond, body = (loop.regions[i].blocks[0] for i in (0, 1))
    ret = list(body.operations)[-1].operation
    found = {}
    for k, arg in enumerate(body.arguments):
        if list(cond.arguments[k].uses):
            continue
        value, writes = arg, []
        while True:
            uses = list(value.uses)
            if len(uses) != 1:
                break
            owner, number = uses[0].owner, uses[0].operand_number
            if owner == ret:
                if number == k:
                    found[k] = writes
                break
            if number != 0 or not _writes_rows(owner):
                break
            writes.append(owner)
            value = owner.results[0]
    return found


def written_rows(op):
    """The rows the write `op` stores (its update)."""
    return op.operands[_UPDATE[op.name]]


def _writes_rows(op) -> bool:
    """Whether `op` is a `dynamic_update_slice`, or a scatter that writes `m`
    consecutive rows (`x[i:i + m] = rows`, its indices `[[i + j] for j in range(m)]`:
    one row, or a broadcast start plus an iota, as `_device_indexing.scatter_rows`
    emits them), of a tensor of static shape."""
    from whilst.lowering._iree_ir import ir

    if op.name == "stablehlo.dynamic_update_slice":
        return ir.RankedTensorType(op.operands[0].type).has_static_shape and all(
            ir.IntegerType(ir.RankedTensorType(v.type).element_type).is_signless
            for v in op.operands[2:])
    if op.name != "stablehlo.scatter" or len(op.operands) != 3:
        return False
    operand = ir.RankedTensorType(op.operands[0].type)
    indices = ir.RankedTensorType(op.operands[1].type)
    updates = ir.RankedTensorType(op.operands[2].type)
    if (operand.rank == 0 or not operand.has_static_shape or indices.rank != 2
            or not ir.IntegerType(indices.element_type).is_signless
            or list(indices.shape)[1:] != [1]
            or list(updates.shape) != [indices.shape[0], *list(operand.shape)[1:]]):
        return False
    window = ", ".join(str(d) for d in range(1, operand.rank))
    rows = ir.Attribute.parse(
        "#stablehlo.scatter<" + (f"update_window_dims = [{window}], " if window else "")
        + "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
        "index_vector_dim = 1>")
    combiner = [o.operation for o in op.regions[0].blocks[0].operations]
    return (op.attributes["scatter_dimension_numbers"] == rows
            and len(combiner) == 1
            and combiner[0].operands[0] == op.regions[0].blocks[0].arguments[1]
            and (indices.shape[0] == 1 or _consecutive(op.operands[1])))


def _consecutive(indices) -> bool:
    """Whether `indices` is `broadcast_in_dim(i) + iota(dim 0)`, in either order."""
    from whilst.lowering._iree_ir import ir

    add = indices.owner
    if getattr(add, "name", None) != "stablehlo.add":
        return False
    names = sorted(getattr(v.owner, "name", "") for v in add.operands)
    iota = next((v.owner for v in add.operands
                 if getattr(v.owner, "name", "") == "stablehlo.iota"), None)
    return (names == ["stablehlo.broadcast_in_dim", "stablehlo.iota"]
            and ir.IntegerAttr(iota.attributes["iota_dimension"]).value == 0)


def insert_rows(op, into, rows) -> object:
    """Replace the write `op` of rows (`_writes_rows`) by a `tensor.insert_slice` of
    `rows` (its rows, in `into`'s element type) into `into`, at its start clamped into
    bounds (the write's own semantics for a `dynamic_update_slice`; a scatter of rows
    is promised in bounds); returns the result."""
    from whilst.lowering._iree_ir import ir

    target = ir.RankedTensorType(op.operands[0].type)
    sizes = list(ir.RankedTensorType(rows.type).shape)
    with ir.InsertionPoint(op), op.location:
        if op.name == "stablehlo.scatter":
            first = ir.Operation.create(
                "tensor.extract", results=[ir.RankedTensorType(op.operands[1].type).element_type],
                operands=[op.operands[1], index_constant(0), index_constant(0)]).result
            starts = [first, *[None] * (target.rank - 1)]
        else:
            starts = [ir.Operation.create(
                "tensor.extract", results=[ir.RankedTensorType(v.type).element_type],
                operands=[v]).result for v in op.operands[2:]]
        offsets = [index_constant(0) if start is None else
                   _clamped_index(start, dim - size)
                   for start, dim, size in zip(starts, target.shape, sizes)]
        return inserted_slice(rows, into, offsets)


def inserted_slice(rows, into, offsets):
    """`tensor.insert_slice` of the tensor `rows` into `into` at the index values
    `offsets` (one per dimension); returns the result."""
    from whilst.lowering._iree_ir import ir

    rank = ir.RankedTensorType(into.type).rank
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    return ir.Operation.create(
        "tensor.insert_slice", results=[into.type], operands=[rows, into, *offsets],
        attributes={
            "static_offsets": ir.DenseI64ArrayAttr.get([dynamic] * rank),
            "static_sizes": ir.DenseI64ArrayAttr.get(list(ir.RankedTensorType(rows.type).shape)),
            "static_strides": ir.DenseI64ArrayAttr.get([1] * rank),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1, rank, 0, 0])}).result


def index_constant(value):
    """An `arith.constant` of type index."""
    from whilst.lowering._iree_ir import ir

    index = ir.IndexType.get()
    return ir.Operation.create("arith.constant", results=[index],
                               attributes={"value": ir.IntegerAttr.get(index, value)}).result


def _clamped_index(start, most):
    """`min(max(start, 0), most)` of the integer `start`, as an index."""
    from whilst.lowering._iree_ir import ir

    kind = start.type
    bound = [ir.Operation.create("arith.constant", results=[kind],
                                 attributes={"value": ir.IntegerAttr.get(kind, v)}).result
             for v in (0, most)]
    low = ir.Operation.create("arith.maxsi", results=[kind], operands=[start, bound[0]]).result
    high = ir.Operation.create("arith.minsi", results=[kind], operands=[low, bound[1]]).result
    return ir.Operation.create("arith.index_cast", results=[ir.IndexType.get()],
                               operands=[high]).result
