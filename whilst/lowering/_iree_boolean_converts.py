"""Boolean arrays converted to numbers by selects.

iree-compile 3.13 fails on a `linalg.vecmat` into which it fuses the conversion of a
boolean array that const-expr hoisting made a global ("'linalg.vecmat' op expected
type of bb argument #1 ('i1') to match element or self type of the corresponding
operand ('i8')", `iree_limits/boolean_matrix_in_vecmat.mlir`): `x @ jnp.eye(3)`, whose
identity is `convert(iota == iota)`, or a Householder reflector's unit vector
(`whilst/ir/iree_forms/_portable_linalg.py`). A select of the same booleans compiles, so
`boolean_converts_selected` rewrites each conversion of a boolean array::

    convert(b, float32)  ==  select(b, 1.0, 0.0)

(the same values for every element type a boolean converts to). Scalars stay as
they are: no matrix product reads one.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_narrow_types import is_boolean_tensor


def boolean_converts_selected(module) -> int:
    """Rewrite, in place, each `stablehlo.convert` of an `i1` tensor of rank 1 or more
    and static shape to an integer or float type as `select(b, 1, 0)`; returns how
    many."""
    from whilst.lowering._iree_ir import ir

    converts = ops_where(module, lambda op: op.name == "stablehlo.convert"
                         and is_boolean_tensor(op.operands[0].type)
                         and op.operands[0].type.rank > 0 and _numbers(op.results[0].type))
    for op in converts:
        result = ir.RankedTensorType(op.results[0].type)
        element = result.element_type
        with ir.InsertionPoint(op), op.location:
            one, zero = (ir.Operation.create("stablehlo.constant", results=[result], attributes={
                "value": ir.DenseElementsAttr.get_splat(result, (
                    ir.IntegerAttr.get(element, v) if isinstance(element, ir.IntegerType)
                    else ir.FloatAttr.get(element, float(v))))}).results[0] for v in (1, 0))
            select = ir.Operation.create("stablehlo.select", results=[result],
                                         operands=[op.operands[0], one, zero])
        op.results[0].replace_all_uses_with(select.results[0])
        op.erase()
    return len(converts)


def _numbers(type_) -> bool:
    """A static-shaped tensor of floats or of integers other than `i1`."""
    from whilst.lowering._iree_ir import ir

    return (isinstance(type_, ir.RankedTensorType) and type_.has_static_shape
            and not is_boolean_tensor(type_)
            and isinstance(type_.element_type, (ir.FloatType, ir.IntegerType)))
