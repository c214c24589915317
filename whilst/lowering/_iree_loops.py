"""Rewrites of `stablehlo.while` loops, during IREE preparation, into forms IREE 3.13
runs correctly with loop-carried buffers updated in place.

IREE 3.13 gives two carries of one loop a single buffer when they start from the
same value (after canonicalization and CSE, e.g. two `jnp.zeros` of one shape, or
the equal initial carries of a `lax.scan`), so writing one overwrites the other.
`distinct_loop_inits` starts every such duplicate carry from its own copy of the
value: `init + barrier(0)` (`init | barrier(false)` for booleans), one elementwise
dispatch before the loop that IREE cannot fold, so each carry owns its buffer.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where


def distinct_loop_inits(module) -> None:
    """Canonicalize and CSE `module` (as IREE will), then give each `stablehlo.while`
    operand that repeats an earlier tensor operand of the same loop its own copy."""
    from iree.compiler import ir, passmanager

    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        seen = set()
        for index, value in enumerate(loop.operands):
            if ir.RankedTensorType(value.type).rank == 0:
                continue
            if value in seen:
                loop.operands[index] = _opaque_copy(value, loop)
            seen.add(value)


def _opaque_copy(value, before):
    """`value` combined elementwise with an identity element hidden behind an
    optimization barrier, inserted before `before`: equal contents, a new buffer."""
    from iree.compiler import ir

    tensor = ir.RankedTensorType(value.type)
    element = tensor.element_type
    scalar = ir.RankedTensorType.get([], element)
    if isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1:
        identity, combine = ir.DenseElementsAttr.get_splat(
            scalar, ir.BoolAttr.get(False)), "stablehlo.or"
    elif isinstance(element, ir.IntegerType):
        identity, combine = ir.DenseElementsAttr.get_splat(
            scalar, ir.IntegerAttr.get(element, 0)), "stablehlo.add"
    else:
        identity, combine = ir.DenseElementsAttr.get_splat(
            scalar, ir.FloatAttr.get(element, -0.0)), "stablehlo.add"  # x + -0.0 == x
    with ir.InsertionPoint(before), before.location:
        const = ir.Operation.create("stablehlo.constant", results=[scalar],
                                    attributes={"value": identity})
        opaque = ir.Operation.create("stablehlo.optimization_barrier", results=[scalar],
                                     operands=[const.result])
        spread = ir.Operation.create(
            "stablehlo.broadcast_in_dim", results=[tensor], operands=[opaque.result],
            attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])})
        copy = ir.Operation.create(combine, results=[tensor],
                                   operands=[value, spread.result])
    return copy.result
