"""Loop bodies that read every carry and compute every new value, for every
`stablehlo.while` of a module (whilst's own and those of libraries, e.g. the
`lax.while_loop`s of diffrax or optimistix).

IREE 3.13 fails on a loop whose body does not read one of its carries (the previous
value of a state that the body overwrites, as diffrax carries; a flag the body
recomputes from scratch): after it rotates the loop, a canonicalization drops the
carry and stream conversion fails ("region branch point has 4 operands, but region
successor needs 2 inputs"; a segfault in ScfWhileOpConversion in larger modules;
`iree_limits/unread_loop_carry.mlir`, `iree_limits/unread_loop_predicate.mlir`).
It fails the same way on a carry whose new value does not depend on the carries
(a constant: the gradient of a diffrax solve, whose tangents restart from zeros),
and on two carries given one new value. IREE folds a select on a constant predicate
to the operand it picks, so such a select reads only that operand (diffrax's
fixed-step Tsit5 sets its first-step flag by `select(True, False, flag)`).

So the body computes a `true` IREE cannot fold: the first element of a carry's new
value compared, bit for bit, with itself through the two results of an optimization
barrier. Each unread carry is read by a select on it, and each new value that is
constant or shared is combined with an identity element selected by it. No barrier
holds a constant: IREE 3.13 packs constants with a loop's initial values, and such
a barrier makes it bind one buffer to several values, a module that fails on every
call (`iree_limits/barrier_on_constant_init.mlir`).
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops import identity_element


def unread_carries_read(module) -> None:
    """In each `stablehlo.while` of `module`, with `true` computed in the body from a
    new value (not foldable) and `e_k = e if true else k`, `e` the identity element of
    the carry's dtype and `k` a constant of its own per carry::

        new = combine(new, e_k)          # a new value constant, computed outside the
                                         # loop, or another carry's new value too
        new = select(true, new, old)     # a carry the body does not read
    """
    from whilst.lowering._iree_ir import ir

    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        body = loop.regions[1].blocks[0]
        ret = list(body.operations)[-1].operation
        news = list(ret.operands)
        memo = {}
        anchors = [i for i, v in enumerate(news)   # computed, not a carry passed on
                   if _computed_in(v, body, memo) and not isinstance(v, ir.BlockArgument)
                   and _real_or_integer(v)]
        unread = {i for i, old in enumerate(body.arguments)     # (static shapes only)
                  if not _read(old) and ir.RankedTensorType(old.type).has_static_shape}
        combined = {i for i, v in enumerate(news) if _real_or_integer(v, empty=True)
                    and (not _computed_in(v, body, memo) or v in news[:i])}
        if not anchors or not unread and not combined:
            continue
        with ir.InsertionPoint(ret), ret.location:
            true = _hidden_true(ret, anchors[0])
            for serial, index in enumerate(sorted(unread | combined)):
                new, old = ret.operands[index], body.arguments[index]
                tensor = ir.RankedTensorType(new.type)
                if index in combined:
                    identity, combine = identity_element(tensor.element_type)
                    e = _select(true, _scalar(tensor.element_type, identity),
                                _scalar(tensor.element_type, _other(tensor.element_type, serial)))
                    new = _op(combine, tensor, new, _spread(e, tensor))
                if index in unread:
                    new = _op("stablehlo.select", tensor, _spread(true, ir.RankedTensorType.get(
                        tensor.shape, ir.IntegerType.get_signless(1))), new, old)
                ret.operands[index] = new


def _hidden_true(ret, anchor):
    """A scalar `True` computed from the new value of carry `anchor`, which passes
    an optimization barrier twice (its first element compared bit for bit)."""
    from whilst.lowering._iree_ir import ir

    value = ret.operands[anchor]
    tensor = ir.RankedTensorType(value.type)
    first, second = ir.Operation.create("stablehlo.optimization_barrier",
                                        results=[tensor, tensor], operands=[value, value]).results
    ret.operands[anchor] = first
    element = tensor.element_type
    width = (ir.IntegerType(element) if isinstance(element, ir.IntegerType)
             else ir.FloatType(element)).width
    bits = ir.IntegerType.get_signless(width)
    scalars = []
    for v in (first, second):
        if tensor.rank:
            one = ir.RankedTensorType.get([1] * tensor.rank, element)
            v = ir.Operation.create("stablehlo.slice", results=[one], operands=[v], attributes={
                "start_indices": ir.DenseI64ArrayAttr.get([0] * tensor.rank),
                "limit_indices": ir.DenseI64ArrayAttr.get([1] * tensor.rank),
                "strides": ir.DenseI64ArrayAttr.get([1] * tensor.rank)}).result
            v = _op("stablehlo.reshape", ir.RankedTensorType.get([], element), v)
        if not isinstance(element, ir.IntegerType):
            v = _op("stablehlo.bitcast_convert", ir.RankedTensorType.get([], bits), v)
        scalars.append(v)
    return ir.Operation.create(
        "stablehlo.compare", results=[ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))],
        operands=scalars,
        attributes={"comparison_direction": ir.Attribute.parse(
            "#stablehlo<comparison_direction EQ>")}).result


def _real_or_integer(value, empty=False) -> bool:
    """Whether `value` is a tensor of floats, integers or booleans (no complex
    numbers), of static shape and, unless `empty`, at least one element (whose first
    element can be compared bit for bit)."""
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(value.type)
    return (tensor.has_static_shape and (empty or all(d > 0 for d in tensor.shape))
            and (isinstance(tensor.element_type, ir.IntegerType)
                 or isinstance(tensor.element_type, ir.FloatType)))


def _other(element, serial):
    """A constant of `element` that is not its identity, different per `serial` (so
    that no two carries' new values are the same expression)."""
    from whilst.lowering._iree_ir import ir

    if isinstance(element, ir.IntegerType):
        width = ir.IntegerType(element).width
        return ir.IntegerAttr.get(element, 1 if width == 1 else 1 + serial % 100)
    return ir.FloatAttr.get(element, 1.0 + serial)


def _scalar(element, attr):
    from whilst.lowering._iree_ir import ir

    scalar = ir.RankedTensorType.get([], element)
    return ir.Operation.create("stablehlo.constant", results=[scalar], attributes={
        "value": ir.DenseElementsAttr.get_splat(scalar, attr)}).result


def _select(predicate, if_true, if_false):
    return _op("stablehlo.select", if_true.type, predicate, if_true, if_false)


def _op(name, result_type, *operands):
    from whilst.lowering._iree_ir import ir

    return ir.Operation.create(name, results=[result_type], operands=list(operands)).result


def _spread(scalar, tensor):
    """`scalar` broadcast to the shape of `tensor` (a RankedTensorType)."""
    from whilst.lowering._iree_ir import ir

    return ir.Operation.create(
        "stablehlo.broadcast_in_dim", results=[tensor], operands=[scalar],
        attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}).result


def _computed_in(value, body, memo) -> bool:
    """Whether `value` depends on an argument of `body` (is computed in the loop: IREE
    folds or hoists out of the loop what does not, constants broadcast in the body
    included, and a select on a constant predicate is the operand it picks)."""
    from whilst.lowering._iree_ir import ir

    pending = [value]
    while pending:
        v = pending[-1]
        if isinstance(v, ir.BlockArgument):
            memo[v] = v.owner == body
        elif v not in memo:
            op = v.owner.operation
            if op.block != body:
                memo[v] = False
            else:
                operands = _operands_read(op)
                unknown = [o for o in operands if o not in memo
                           and not isinstance(o, ir.BlockArgument)]
                if unknown:
                    pending.extend(unknown)
                    continue
                memo[v] = any(o.owner == body if isinstance(o, ir.BlockArgument) else memo[o]
                              for o in operands)
        pending.pop()
    return memo[value]


def _read(value) -> bool:
    """Whether an op reads `value` other than as the operand a select on a constant
    predicate does not pick (IREE folds such a select to its other operand)."""
    return any(value in _operands_read(use.owner) for use in value.uses)


def _operands_read(op) -> list:
    """The operands `op`'s result depends on: for `select(p, a, b)` with `p` a
    constant, `[a]` or `[b]` (IREE folds it to that operand); else all of them."""
    operands = list(op.operands)
    if op.name == "stablehlo.select":
        picked = _constant_predicate(operands[0])
        if picked is not None:
            return [operands[1] if picked else operands[2]]
    return operands


def _constant_predicate(value):
    """True or False if `value` is a splat boolean constant (a `stablehlo.constant`,
    possibly broadcast), else None."""
    from whilst.lowering._iree_ir import ir

    while not isinstance(value, ir.BlockArgument):
        op = value.owner.operation
        if op.name == "stablehlo.broadcast_in_dim":
            value = op.operands[0]
        elif op.name == "stablehlo.constant":
            attr = ir.DenseElementsAttr(op.attributes["value"])
            element = ir.RankedTensorType(attr.type).element_type
            if not attr.is_splat or not isinstance(element, ir.IntegerType) \
                    or ir.IntegerType(element).width != 1:
                return None
            return bool(ir.DenseIntElementsAttr(attr)[0])
        else:
            return None
    return None
