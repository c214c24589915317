"""Symbolic dimensions, during IREE preparation: forms of dynamic shapes that
IREE 3.13 compiles and runs correctly.

JAX computes a symbolic dimension `b` as `get_dimension_size` (an i32), and
shape operands (e.g. of `dynamic_broadcast_in_dim`) from it. IREE 3.13 turns
that into `index_cast(index_cast(dim : index -> i32) : i32 -> index)`, which it
cannot fold, so a tensor built from `b` and an argument of dimension `b` have
dimensions it cannot prove equal. A loop carrying both then fails to compile
("'scf.while' op ... region branch point has N operands, but region successor
needs M": IREE carries the dimension and `scf.condition` does not forward it).
`dims_from_arguments` widens every shape operand to i64 computed from
`tensor.dim` of the tensor the size was read from (`index -> i64 -> index`
folds), so every dimension is one SSA value.

IREE 3.13 also crashes (`iree-util-ipo`: "operation's operand is unlinked")
when two results of a function have the same argument's dimension.
`results_with_own_dims` returns each dynamically shaped result `r` as
`identity + r`, the identity broadcast to `r`'s shape read as i32 (the
operand IREE takes the result's dimensions from): the same values, with
dimensions IREE does not identify with the argument's.

`known_broadcast_dims` tells IREE which dimensions of each
`dynamic_broadcast_in_dim` expand, without which it rejects rank-raising ones.
(Without these, `tests/iree/test_iree_symbolic.py`'s loops fail in iree-compile.)
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where, public_functions
from whilst.lowering._iree_loops import identity_element

# Shape-like operands (by position) of StableHLO's dynamically shaped ops.
SHAPE_OPERANDS = {
    "stablehlo.dynamic_broadcast_in_dim": (1,),
    "stablehlo.dynamic_iota": (0,),
    "stablehlo.dynamic_reshape": (1,),
    "stablehlo.real_dynamic_slice": (1, 2, 3),
    "stablehlo.dynamic_pad": (2, 3, 4),
    "stablehlo.dynamic_gather": (2,),
}
# Integer ops whose i64 version computes the same shape values.
_WIDENABLE = {"stablehlo.reshape", "stablehlo.concatenate", "stablehlo.broadcast_in_dim",
              "stablehlo.slice", "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply",
              "stablehlo.divide", "stablehlo.remainder", "stablehlo.maximum",
              "stablehlo.minimum", "stablehlo.negate", "stablehlo.select"}


def has_dynamic_shapes(module) -> bool:
    """Whether any function of `module` takes or returns a dynamically shaped tensor."""
    from whilst.lowering._iree_ir import ir

    for func in ops_where(module, lambda op: op.name == "func.func"):
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        for t in [*ftype.inputs, *ftype.results]:
            if isinstance(t, ir.RankedTensorType) and not t.has_static_shape:
                return True
    return False


def dims_from_arguments(module) -> None:
    """Inline every call, then give each shape operand of a dynamically shaped op an
    i64 version computed from `tensor.dim` where the original read
    `get_dimension_size` (same values, foldable casts)."""
    from iree.compiler import passmanager

    passmanager.PassManager.parse("builtin.module(inline,symbol-dce)").run(module.operation)
    for op in ops_where(module, lambda op: op.name in SHAPE_OPERANDS):
        for index in SHAPE_OPERANDS[op.name]:
            if index < len(op.operands):
                op.operands[index] = _widened(op.operands[index], op)


def known_broadcast_dims(module) -> None:
    """Mark each operand dimension of every `dynamic_broadcast_in_dim` as expanding
    (a size 1 spread) or not. IREE 3.13 rejects the op ("explicitly marked
    illegal") when it cannot tell, e.g. for `f32[b] -> f32[1, b]`, the row push
    of a vmapped loop. JAX only broadcasts a dimension to its own size or from the
    constant 1, so a dimension is non-expanding when it is symbolic or equal to its
    result dimension, and expanding otherwise (1 to another size)."""
    from whilst.lowering._iree_ir import ir

    for op in ops_where(module, lambda op: op.name == "stablehlo.dynamic_broadcast_in_dim"):
        operand = ir.RankedTensorType(op.operands[0].type)
        result = ir.RankedTensorType(op.results[0].type)
        targets = ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"])
        expanding, nonexpanding = [], []
        for axis, target in enumerate(targets):
            same = not operand.is_static_dim(axis) or (
                result.is_static_dim(target) and result.shape[target] == operand.shape[axis])
            (nonexpanding if same else expanding).append(axis)
        op.attributes["known_expanding_dimensions"] = ir.DenseI64ArrayAttr.get(expanding)
        op.attributes["known_nonexpanding_dimensions"] = ir.DenseI64ArrayAttr.get(nonexpanding)


def reshapes_as_tensor_reshape(module) -> None:
    """Each `stablehlo.dynamic_reshape` becomes a `tensor.reshape` of the same operand
    to the same shape operand (both in row-major order): IREE 3.13 rejects the
    former ("failed to legalize operation") and compiles the latter."""
    from whilst.lowering._iree_ir import ir

    for op in ops_where(module, lambda op: op.name == "stablehlo.dynamic_reshape"):
        with ir.InsertionPoint(op), op.location:
            reshaped = _create("tensor.reshape", op.results[0].type, op.operands)
        op.results[0].replace_all_uses_with(reshaped)
        op.erase()


def results_with_own_dims(module) -> None:
    """Return each dynamically shaped result `r` of a public function as
    `identity + r` with dimensions of its own (see the module docstring)."""
    from whilst.lowering._iree_ir import ir

    for func in public_functions(module):
        ret = list(func.regions[0].blocks[0].operations)[-1].operation
        for index, value in enumerate(ret.operands):
            tensor = ir.RankedTensorType(value.type)
            if not tensor.has_static_shape:
                ret.operands[index] = _rebroadcast(value, tensor, ret)


def _i64_tensor(shape):
    from whilst.lowering._iree_ir import ir

    return ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(64))


def _create(name, result_type, operands, attributes=None):
    from whilst.lowering._iree_ir import ir

    return ir.Operation.create(name, results=[result_type], operands=list(operands),
                               attributes=attributes or {}).result


def _widened(value, before):
    """`value` (an integer tensor) as an i64 tensor, computed before `before`."""
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(value.type)
    wide = _i64_tensor(tensor.shape)
    op = value.owner if isinstance(value, ir.OpResult) else None
    name = op.name if op is not None else None
    with ir.InsertionPoint(before), before.location:
        if name == "stablehlo.get_dimension_size":
            axis = ir.IntegerAttr(op.attributes["dimension"]).value
            const = _create("arith.constant", ir.IndexType.get(), [],
                            {"value": ir.IntegerAttr.get(ir.IndexType.get(), axis)})
            dim = _create("tensor.dim", ir.IndexType.get(), [op.operands[0], const])
            size = _create("arith.index_cast", ir.IntegerType.get_signless(64), [dim])
            return _create("tensor.from_elements", wide, [size])
        if name == "stablehlo.constant":
            values = [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))
                      for v in ir.DenseIntElementsAttr(op.attributes["value"])]
            return _create("stablehlo.constant", wide, [],
                           {"value": ir.DenseElementsAttr.get(values, type=wide)})
        if name in _WIDENABLE:
            operands = [_widened(v, before) if _is_integer(v) and not _is_bool(v) else v
                        for v in op.operands]
            return _create(name, wide, operands, dict(_attributes(op)))
        if name == "stablehlo.convert" and _is_integer(op.operands[0]) and not _is_bool(
                op.operands[0]):
            return _widened(op.operands[0], before)
    with ir.InsertionPoint(before), before.location:
        return _create("stablehlo.convert", wide, [value])


def _attributes(op):
    return [(op.attributes[i].name, op.attributes[i].attr) for i in range(len(op.attributes))]


def _is_integer(value) -> bool:
    from whilst.lowering._iree_ir import ir

    return isinstance(ir.RankedTensorType(value.type).element_type, ir.IntegerType)


def _is_bool(value) -> bool:
    from whilst.lowering._iree_ir import ir

    return ir.IntegerType(ir.RankedTensorType(value.type).element_type).width == 1


def _rebroadcast(value, tensor, before):
    """`identity + value`, the identity (-0.0, 0 or False) spread to `value`'s shape
    by a `dynamic_broadcast_in_dim` from i32 sizes."""
    from whilst.lowering._iree_ir import ir

    i32 = ir.IntegerType.get_signless(32)
    scalar = ir.RankedTensorType.get([], tensor.element_type)
    identity, combine = identity_element(tensor.element_type)
    with ir.InsertionPoint(before), before.location:
        sizes = []
        for axis, size in enumerate(tensor.shape):
            one = ir.RankedTensorType.get([1], i32)
            if tensor.is_static_dim(axis):
                sizes.append(_create("stablehlo.constant", one, [], {
                    "value": ir.DenseElementsAttr.get([ir.IntegerAttr.get(i32, size)],
                                                      type=one)}))
                continue
            scalar_size = _create("stablehlo.get_dimension_size", ir.RankedTensorType.get([], i32),
                                  [value], {"dimension": ir.IntegerAttr.get(
                                      ir.IntegerType.get_signless(64), axis)})
            sizes.append(_create("stablehlo.reshape", one, [scalar_size]))
        shape = sizes[0] if len(sizes) == 1 else _create(
            "stablehlo.concatenate", ir.RankedTensorType.get([len(sizes)], i32), sizes,
            {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)})
        const = _create("stablehlo.constant", scalar, [],
                        {"value": ir.DenseElementsAttr.get_splat(scalar, identity)})
        spread = _create("stablehlo.dynamic_broadcast_in_dim", value.type, [const, shape],
                         {"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])})
        return _create(combine, value.type, [spread, value])
