"""Loop bodies that read every carry and compute every new value, for every
`stablehlo.while` of a module (whilst's own and those of libraries, e.g. the
`lax.while_loop`s of diffrax or optimistix).

IREE 3.13 fails on a loop whose body does not read one of its carries (the previous
value of a state that the body overwrites, as diffrax carries; a flag the body
recomputes from scratch): after it rotates the loop, a canonicalization drops the
carry and stream conversion fails ("region branch point has 4 operands, but region
successor needs 2 inputs"; a segfault in ScfWhileOpConversion in larger modules;
`iree_limits/unread_loop_carry.mlir`, `iree_limits/unread_loop_predicate.mlir`).
A carry whose new value is a constant (or computed outside the loop), read or not,
fails the same way (the gradient of a diffrax solve, whose tangents restart from
zeros).

So each such new value is computed in the body, from an identity element hidden by
an optimization barrier that also holds a value the body computes, and each unread
carry is read by a select on a hidden `True`. No barrier holds a carry or a constant
in the loop: IREE 3.13 packs a loop's constant initial values into one allocation,
and such a barrier makes it bind one buffer to several loop results, a module that
fails on every call (`iree_limits/barrier_on_constant_init.mlir`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import identity_element


def unread_carries_read(module) -> None:
    """In each `stablehlo.while` of `module`, with `e` an identity element of a carry's
    dtype and `true` hidden from folding (each carry its own, passed through a barrier
    with a new value the body computes)::

        new = combine(new, e)            # a new value constant, computed outside the
                                         # loop, or another carry's new value too
        new = select(true, new, old)     # a carry the body does not read
    """
    from iree.compiler import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        body = loop.regions[1].blocks[0]
        ret = list(body.operations)[-1].operation
        news = list(ret.operands)
        memo = {}
        computed = [i for i, v in enumerate(news) if _computed_in(v, body, memo)]
        unread = {i for i, old in enumerate(body.arguments) if not list(old.uses)}
        combined = {i for i, v in enumerate(news) if i not in computed or v in news[:i]}
        if not computed or not unread and not combined:
            continue
        elements = {i: ir.RankedTensorType(v.type).element_type for i, v in enumerate(news)}
        boolean = ir.IntegerType.get_signless(1)
        hidden = _hidden_scalars(loop, ret, computed[0], [
            *((i, elements[i], identity_element(elements[i])[0]) for i in sorted(combined)),
            *((i, boolean, ir.BoolAttr.get(True)) for i in sorted(unread))])
        for index in sorted(unread | combined):
            new, old = ret.operands[index], body.arguments[index]
            tensor = ir.RankedTensorType(new.type)
            with ir.InsertionPoint(ret), ret.location:
                if index in combined:
                    _, combine = identity_element(tensor.element_type)
                    new = ir.Operation.create(combine, results=[tensor], operands=[
                        new, _spread(hidden[index, identity_element(tensor.element_type)[0]], tensor)]).result
                if index in unread:
                    new = ir.Operation.create("stablehlo.select", results=[tensor], operands=[
                        _spread(hidden[index, ir.BoolAttr.get(True)], ir.RankedTensorType.get(
                            tensor.shape, ir.IntegerType.get_signless(1))), new, old]).result
            ret.operands[index] = new


def _hidden_scalars(loop, ret, anchor, wanted) -> dict:
    """For each `(index, element, value)` of `wanted`, the scalar `value` keyed
    `(index, value)`, passed through an optimization barrier in the body with the new
    value of carry `anchor` (and made before the loop behind a barrier of its own,
    as `_iree_loops._opaque_copy`)."""
    from iree.compiler import ir

    outside = []
    with ir.InsertionPoint(loop), loop.location:
        for _, element, value in wanted:
            scalar = ir.RankedTensorType.get([], element)
            outside.append(ir.Operation.create(
                "stablehlo.constant", results=[scalar],
                attributes={"value": ir.DenseElementsAttr.get_splat(scalar, value)}).result)
        outside = _barrier(outside)
    with ir.InsertionPoint(ret), ret.location:
        inside = _barrier([ret.operands[anchor], *outside])
    ret.operands[anchor] = inside[0]
    return {(index, value): v for (index, _, value), v in zip(wanted, inside[1:])}


def _barrier(values) -> list:
    """`stablehlo.optimization_barrier(*values)` at the current insertion point."""
    from iree.compiler import ir

    return list(ir.Operation.create("stablehlo.optimization_barrier",
                                    results=[v.type for v in values],
                                    operands=values).results)


def _spread(scalar, tensor):
    """`scalar` broadcast to the shape of `tensor` (a RankedTensorType)."""
    from iree.compiler import ir

    return ir.Operation.create(
        "stablehlo.broadcast_in_dim", results=[tensor], operands=[scalar],
        attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}).result


def _computed_in(value, body, memo=None) -> bool:
    """Whether `value` depends on an argument of `body` (is computed in the loop: IREE
    folds or hoists out of the loop what does not, constants broadcast in the body
    included)."""
    from iree.compiler import ir

    memo = {} if memo is None else memo
    if isinstance(value, ir.BlockArgument):
        return value.owner == body
    if value in memo:
        return memo[value]
    op = value.owner.operation
    memo[value] = False
    memo[value] = op.block == body and any(_computed_in(v, body, memo) for v in op.operands)
    return memo[value]
