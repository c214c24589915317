"""Loop bodies that read every carry, for every `stablehlo.while` of a module
(whilst's own and those of libraries, e.g. `lax.while_loop` in diffrax or optimistix).

IREE 3.13 fails on a loop whose body does not read one of its carries (the previous
value of a state that the body overwrites, as diffrax carries; a flag the body
recomputes from scratch or sets to a constant): after it rotates the loop, a
canonicalization drops the carry and stream conversion fails ("region branch point
has 4 operands, but region successor needs 2 inputs"; a segfault in
ScfWhileOpConversion in larger modules; `iree_limits/unread_loop_carry.mlir`,
`iree_limits/unread_loop_predicate.mlir`).

The body reads such a carry through an optimization barrier that also holds a new
value the body computes. A carry whose new value is a constant (or computed outside
the loop) is dropped all the same, so its new value is computed in the body too:
combined with an identity element the barrier hides. No barrier in a loop holds a
constant: IREE 3.13 then binds one buffer to several loop results, and every call
fails (`iree_limits/barrier_on_constant_init.mlir`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import identity_element


def unread_carries_read(module) -> None:
    """In each `stablehlo.while` of `module`, let the body read each carry `old` it does
    not read: `new, _ = optimization_barrier(new, old)`. A `new` that is constant or
    computed outside the body becomes `combine(new, e)` (e.g. `new + -0.0`), `e` an
    identity element that passes a barrier with `old` and with the new value of a
    carry the body computes."""
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        body = loop.regions[1].blocks[0]
        ret = list(body.operations)[-1].operation
        computed = [i for i, v in enumerate(ret.operands) if _computed_in(v, body)]
        for index, old in enumerate(body.arguments):
            if list(old.uses) or not computed:
                continue
            new = ret.operands[index]
            if index in computed:
                ret.operands[index] = _barrier(ret, [new, old])[0]
                continue
            tensor = ir.RankedTensorType(new.type)
            identity, combine = identity_element(tensor.element_type)
            hidden = _opaque_scalar(loop, tensor.element_type, identity)
            anchor = computed[0]
            results = _barrier(ret, [ret.operands[anchor], old, hidden])
            ret.operands[anchor] = results[0]
            with ir.InsertionPoint(ret), ret.location:
                spread = ir.Operation.create(
                    "stablehlo.broadcast_in_dim", results=[tensor], operands=[results[2]],
                    attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])})
                ret.operands[index] = ir.Operation.create(
                    combine, results=[tensor], operands=[new, spread.result]).result


def _barrier(before, values) -> list:
    """`stablehlo.optimization_barrier(*values)`, inserted before `before`."""
    from iree.compiler import ir

    with ir.InsertionPoint(before), before.location:
        return list(ir.Operation.create("stablehlo.optimization_barrier",
                                        results=[v.type for v in values],
                                        operands=values).results)


def _opaque_scalar(loop, element, value):
    """A scalar `value` behind an optimization barrier, made before `loop`."""
    from iree.compiler import ir

    scalar = ir.RankedTensorType.get([], element)
    with ir.InsertionPoint(loop), loop.location:
        const = ir.Operation.create(
            "stablehlo.constant", results=[scalar],
            attributes={"value": ir.DenseElementsAttr.get_splat(scalar, value)})
    return _barrier(loop, [const.result])[0]


def _computed_in(value, body) -> bool:
    """Whether `value` is an argument of `body` or computed there by an op other than
    a constant (not a value from outside the loop)."""
    from iree.compiler import ir

    if isinstance(value, ir.BlockArgument):
        return value.owner == body
    op = value.owner.operation
    return op.block == body and op.name != "stablehlo.constant"
