"""Rewrites, during IREE preparation, that let IREE 3.13 fuse small-tensor code
into fewer dispatches, with fewer reads back to the host.

`stablehlo.select` with a scalar predicate and tensor operands (what
`jnp.where(flag, x, y)` emits for a scalar `flag`) becomes, in IREE 3.13, a
host-side choice of buffers: the predicate is read back from the device, which
in a loop body costs a synchronisation per step. `broadcast_select_predicates`
broadcasts each such predicate to the operands' shape, so the select is
elementwise and fuses with its operands' producers::

    select(flag, x, y)  ==  select(broadcast(flag, x.shape), x, y)

for operands of at most SMALL_ELEMENTS, and in a loop body of at most
LOOP_SELECT_ELEMENTS: there the readback ends the iteration's command buffer and
the host waits for it (diffrax's first stage under `jax.vmap`, `where(any(jump),
f0, k0)` over a `[1024, 2]` batch: a submission and a host wait per solver step).

A `stablehlo.case` or `stablehlo.if` whose branches compute nothing, each returning
values made before it, is such a choice too: its index is read back. equinox's
checks under `EQX_ON_ERROR=nan` are of this form (`lax.cond(failed, lambda: nan,
lambda: ys)` after a diffrax solve: a readback and a command buffer of their own on
every call). `value_branches_as_selects` rewrites those whose results are of the
sizes above as selects, made elementwise as above::

    case(k, {return a}, {return b}, {return c}) == select(k == 0, a, select(k == 1, b, c))
    if(p, {return a}, {return b})                == select(p, a, b)

IREE 3.13 does not fuse a `stablehlo.concatenate` with the ops that compute its
pieces: `jnp.stack([f(x), g(x)])` becomes one dispatch per piece plus a copy per
piece into the result. Loop bodies over a few numbers (an ODE right-hand side,
a small state vector) are mostly such stacks, and each dispatch and copy costs
about a microsecond of host work per loop step on local-sync.
`small_stacks_as_selects` rewrites each concatenate of at most
SMALL_ELEMENTS elements whose pieces are one slice thick along the joined
axis (what `jnp.stack` emits) into elementwise ops, which IREE fuses with the
pieces' producers::

    concatenate([a, b, c], axis)     # each one slice thick along axis
      == select(iota == 0, broadcast(a), select(iota == 1, broadcast(b), broadcast(c)))

A `stablehlo.gather` of one element (`x[k]` read at a computed position, e.g.
what the gradient of `history.at[k].set(v)` reads) becomes, in IREE 3.13, a
`tensor.extract` inside an elementwise op; fused with a reduction (a dot
product in the same loop step, as aggressive fusion does in the gradient of
samples/cg.py), llvm-cpu codegen of that dispatch fails ("'arith.select' op
failed to verify", `iree_limits/reproduce.py point_gather_after_dot`), and
after a reduction it crashes (`iree_limits/point_gather_after_reduction.mlir`; a
batched gather of one element per lane is one under `jax.vmap` over a batch of one).
`fenced_point_gathers` passes each such element through an optimization
barrier, which keeps the gather out of its users' dispatches::

    gather(x, [i, j])  ==  optimization_barrier(gather(x, [i, j]))

Only aggressive fusion needs the fences, and with the default fusion a fence
on a gather from a `stablehlo.case`'s result makes modules that fail on every
call ("ref is null ... hal.buffer.subspan": the gradients of diffrax's Tsit5
solves with SaveAt ts, `iree_limits/fenced_gathers_default_fusion.py`, and a
budget gradient past its first chunk, `iree_limits/budget_chunk_stacks.py`):
`unfenced` removes the fences from the modules compiled without aggressive
fusion.

(Read with `stablehlo.dynamic_slice` instead, as before, the element cost a
readback of its position per loop step: IREE 3.13 computes a slice's offset on
the host. The CG sample's loops read back 2 and 1 scalars per step so, against
1 and 0 now.)
"""
from __future__ import annotations

from whilst.lowering._ir_walk import BRANCH_OPS, ops_where
from whilst.lowering._iree_dims import SHAPE_OPERANDS

SMALL_ELEMENTS = 256  # larger selects pay more for an elementwise pass than for a readback
LOOP_SELECT_ELEMENTS = 16384  # a pass over as many costs about a loop iteration's readback


def fusible_small_tensor_code(module) -> None:
    """Apply the rewrites of this module to `module`, in place."""
    value_branches_as_selects(module)
    broadcast_select_predicates(module)
    small_stacks_as_selects(module)
    fenced_point_gathers(module)


def broadcast_select_predicates(module) -> None:
    """Give every `stablehlo.select` of tensors with a scalar predicate (of at most
    SMALL_ELEMENTS, or LOOP_SELECT_ELEMENTS in a loop body) an elementwise
    predicate, in place."""
    from whilst.lowering._iree_ir import ir

    for op in ops_where(module, _scalar_predicate_select):
        operand = ir.RankedTensorType(op.operands[1].type)
        mask_type = ir.RankedTensorType.get(operand.shape, ir.IntegerType.get_signless(1),
                                            operand.encoding)
        with ir.InsertionPoint(op), op.location:
            mask = ir.Operation.create(
                "stablehlo.broadcast_in_dim", results=[mask_type], operands=[op.operands[0]],
                attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}).result
        op.operands[0] = mask


def value_branches_as_selects(module) -> None:
    """Replace every `stablehlo.case` / `stablehlo.if` of `module` whose branches
    compute nothing and whose results are small (`_value_branches`) by selects on
    its index, in place."""
    from whilst.lowering._iree_ir import ir

    for op in ops_where(module, _value_branches):
        returned = [list(region.blocks[0].operations)[0].operands for region in op.regions]
        with ir.InsertionPoint(op), op.location:
            if op.name == "stablehlo.if":
                predicates = [op.operands[0]]
            else:
                predicates = [_equals(op.operands[0], branch)
                              for branch in range(len(op.regions) - 1)]
            for index, result in enumerate(op.results):
                selected = returned[-1][index]
                for predicate, values in reversed(list(zip(predicates, returned))):
                    selected = ir.Operation.create(
                        "stablehlo.select", results=[result.type],
                        operands=[predicate, values[index], selected]).result
                result.replace_all_uses_with(selected)
        op.erase()


def _equals(index, branch: int):
    """`index == branch`, for a `stablehlo.case`'s scalar int32 index, at the current
    insertion point."""
    from whilst.lowering._iree_ir import ir

    scalar = ir.RankedTensorType(index.type)
    constant = ir.Operation.create("stablehlo.constant", results=[scalar], attributes={
        "value": ir.DenseElementsAttr.get_splat(
            scalar, ir.IntegerAttr.get(scalar.element_type, branch))}).result
    boolean = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
    equal = ir.Attribute.parse("#stablehlo<comparison_direction EQ>")
    return ir.Operation.create("stablehlo.compare", results=[boolean],
                               operands=[index, constant],
                               attributes={"comparison_direction": equal}).result


def small_stacks_as_selects(module) -> None:
    """Rewrite every small stack-shaped `stablehlo.concatenate` of `module` in place."""
    for op in ops_where(module, _small_stack):
        selected = _as_selects(op)
        op.results[0].replace_all_uses_with(selected)
        op.erase()


def fenced_point_gathers(module) -> None:
    """Pass the result of every gather of one element (`_point_gather`) of `module`
    through a `stablehlo.optimization_barrier` tagged FENCE_ATTR, in place."""
    from whilst.lowering._iree_ir import ir

    for op in ops_where(module, _point_gather):
        value = op.results[0]
        users = [(use.owner, use.operand_number) for use in value.uses]
        fenced = _fence(value, ir.InsertionPoint.after(op), op.location)
        for user, position in users:
            user.operands[position] = fenced


def _fence(value, insertion_point, location):
    """`optimization_barrier(value)`, tagged FENCE_ATTR, made at `insertion_point`."""
    from whilst.lowering._iree_ir import ir

    with insertion_point, location:
        fence = ir.Operation.create("stablehlo.optimization_barrier",
                                    results=[value.type], operands=[value])
    fence.attributes[FENCE_ATTR] = ir.UnitAttr.get()
    return fence.result


def _enclosing_whiles(op) -> int:
    """How many `stablehlo.while` ops hold `op`."""
    count, parent = 0, op.parent
    while parent is not None:
        count += parent.operation.name == "stablehlo.while"
        parent = parent.operation.parent
    return count


FENCE_ATTR = "whilst.fence"


def unfenced(text: str) -> str:
    """Module `text` without the barriers `fenced_point_gathers` placed: each
    fenced value is used directly."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        fences = ops_where(module, lambda op: FENCE_ATTR in op.attributes)
        if not fences:
            return text
        for fence in fences:
            fence.results[0].replace_all_uses_with(fence.operands[0])
            fence.erase()
        return module.operation.get_asm(enable_debug_info=False)


def _point_gather(op) -> bool:
    """Whether `op` is a `stablehlo.gather` of one element of a static operand: its
    result and each slice one element (the form of `x[i, j]`, and of `x[b, i]` under
    `jax.vmap` over a batch of one, which IREE 3.13 folds to the former)."""
    from whilst.lowering._iree_ir import ir

    if op.name != "stablehlo.gather":
        return False
    result = ir.RankedTensorType(op.results[0].type)
    operand = ir.RankedTensorType(op.operands[0].type)
    return (operand.rank > 0 and operand.has_static_shape and result.has_static_shape
            and all(d == 1 for d in result.shape)
            and all(s == 1 for s in ir.DenseI64ArrayAttr(op.attributes["slice_sizes"])))


def _scalar_predicate_select(op) -> bool:
    from whilst.lowering._iree_ir import ir

    if op.name != "stablehlo.select":
        return False
    operand = ir.RankedTensorType(op.operands[1].type)
    return (ir.RankedTensorType(op.operands[0].type).rank == 0 and 0 < operand.rank
            and (_small(operand) or _enclosing_whiles(op) > 0
                 and _small(operand, LOOP_SELECT_ELEMENTS)))


def _value_branches(op) -> bool:
    """Whether `op` is a `stablehlo.case` or `stablehlo.if` whose branches hold
    nothing but their return, with results of static shapes of at most
    SMALL_ELEMENTS each (LOOP_SELECT_ELEMENTS in a loop body)."""
    from whilst.lowering._iree_ir import ir

    if op.name not in BRANCH_OPS:
        return False
    if any(len(list(region.blocks[0].operations)) != 1 for region in op.regions):
        return False
    limit = LOOP_SELECT_ELEMENTS if _enclosing_whiles(op) else SMALL_ELEMENTS
    return all(isinstance(r.type, ir.RankedTensorType) and _small(r.type, limit)
               for r in op.results)


def _small_stack(op) -> bool:
    from whilst.lowering._iree_ir import ir

    if op.name != "stablehlo.concatenate":
        return False
    result = ir.RankedTensorType(op.results[0].type)
    if result.rank == 0 or not _small(result):
        return False
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    return len(op.operands) > 1 and all(
        ir.RankedTensorType(v.type).shape[axis] == 1 for v in op.operands) and not _is_shape(
            op.results[0])


def _is_shape(value) -> bool:
    """Whether `value` is only used as the shape of dynamically shaped ops: IREE
    3.13 computes a shape built by `concatenate` on the host, but one built by
    selects on the device, and then fails ("'stream.async.dispatch' op : streamable
    op expected to be in an execution region"; met by the checkpoint slots `[K, b]`
    of an unbounded loop's gradient over a symbolic batch, tests/iree/test_iree_symbolic.py;
    a shape built by selects before a plain loop compiles, so no smaller reproducer)."""
    uses = list(value.uses)
    return bool(uses) and all(use.operand_number in SHAPE_OPERANDS.get(use.owner.name, ())
                              for use in uses)


def _small(tensor_type, most=SMALL_ELEMENTS) -> bool:
    """Whether a ranked tensor type has a static shape of at most `most` elements."""
    if not tensor_type.has_static_shape:
        return False
    size = 1
    for n in tensor_type.shape:
        size *= n
    return size <= most


def _as_selects(op):
    """The selects that equal the concatenate `op`, inserted before it."""
    from whilst.lowering._iree_ir import ir

    result = ir.RankedTensorType(op.results[0].type)
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    i32 = ir.IntegerType.get_signless(32)
    positions_type = ir.RankedTensorType.get(result.shape, i32)
    mask_type = ir.RankedTensorType.get(result.shape, ir.IntegerType.get_signless(1))
    equal = ir.Attribute.parse("#stablehlo<comparison_direction EQ>")
    all_dims = ir.DenseI64ArrayAttr.get(list(range(result.rank)))
    with ir.InsertionPoint(op), op.location:
        positions = ir.Operation.create(
            "stablehlo.iota", results=[positions_type],
            attributes={"iota_dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                             axis)}).result

        def spread(value):
            return ir.Operation.create(
                "stablehlo.broadcast_in_dim", results=[result], operands=[value],
                attributes={"broadcast_dimensions": all_dims}).result

        selected = spread(op.operands[-1])
        for index in reversed(range(len(op.operands) - 1)):
            here = ir.Operation.create(
                "stablehlo.constant", results=[positions_type],
                attributes={"value": ir.DenseElementsAttr.get_splat(
                    positions_type, ir.IntegerAttr.get(i32, index))}).result
            mask = ir.Operation.create(
                "stablehlo.compare", results=[mask_type], operands=[positions, here],
                attributes={"comparison_direction": equal}).result
            selected = ir.Operation.create(
                "stablehlo.select", results=[result],
                operands=[mask, spread(op.operands[index]), selected]).result
    return selected
