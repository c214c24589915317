"""Rewrites of `stablehlo.while` loops, during IREE preparation, into forms IREE 3.13
runs correctly with loop-carried buffers updated in place.

IREE 3.13 gives two carries of one loop a single buffer when they start from the
same value (after canonicalization and CSE, e.g. two `jnp.zeros` of one shape, or
the equal initial carries of a `lax.scan`), so writing one overwrites the other.
`distinct_loop_inits` starts every such duplicate carry from its own copy of the
value: `init + barrier(0, k)[0]` (`init ^ barrier(false, k)[0]` for booleans), one
elementwise dispatch before the loop that IREE cannot fold, so each carry owns its
buffer. Each copy's barrier also holds its own `k` (the carry's index): IREE merges
equal barriers, and two copies `init + barrier(0)` were one buffer again (the
stage-loop checkpoints of diffrax's Tsit5, whose gradient came out as zeros).

IREE 3.13 also packs a value computed before a loop into one allocation with
the loop's initial carries, and a function that returns such a value fails on
every call ("ref is null ... hal.buffer_view.create"; e.g. `jax.value_and_grad`
with two `argnums` returns the loss, computed before the gradient While).
`results_after_loops` returns each such value through a copy made after the
loops (`iree_limits/result_packed_with_loop_init.mlir`).

A public function (with the `stream.affinity` whilst gives it) that returns a
value computed from constants alone, such as `jnp.linspace(0, 1, 5)`, fails to
compile ("failed to legalize unresolved target materialization ... stream.async.cast",
`iree_limits/computed_constant_result.mlir`); `constant_results_copied`
returns each such value through the same kind of copy. IREE also evaluates a
loop's counter at compile time when the loop's trip count is constant, whatever
its other carries read (corpus `maximum_iterations_cuts`), so such counters
count as computed from constants.
"""
from __future__ import annotations

from whilst.lowering._ir_walk import ops_where, public_functions


def _is_boolean(element) -> bool:
    """Whether an MLIR element type is i1."""
    from whilst.lowering._iree_ir import ir

    return isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1


# Tags the copies `distinct_loop_inits` makes (`_iree_loop_results` fences the results
# of the carries that start from them apart).
DISTINCT_INIT_ATTR = "whilst.distinct_init"


def distinct_loop_inits(module) -> None:
    """Canonicalize and CSE `module` (as IREE will), then give each `stablehlo.while`
    operand that repeats an earlier tensor operand of the same loop its own copy,
    tagged DISTINCT_INIT_ATTR."""
    from iree.compiler import passmanager

    from whilst.lowering._iree_ir import ir

    passmanager.PassManager.parse("builtin.module(canonicalize,cse)").run(module.operation)
    for loop in ops_where(module, lambda op: op.name == "stablehlo.while"):
        seen = set()
        for index, value in enumerate(loop.operands):
            if ir.RankedTensorType(value.type).rank == 0:
                continue
            if value in seen:
                copy = opaque_copy(value, loop, index)
                copy.owner.attributes[DISTINCT_INIT_ATTR] = ir.UnitAttr.get()
                loop.operands[index] = copy
            seen.add(value)


def results_after_loops(module) -> None:
    """In each function with top-level `stablehlo.while` loops, return every result
    of static shape computed before the last of them through its own copy, made
    after it (`_iree_dims.results_with_own_dims` copies the others)."""
    from whilst.lowering._iree_ir import ir

    for func in ops_where(module, lambda op: op.name == "func.func"):
        if not func.regions[0].blocks:
            continue
        ops = list(func.regions[0].blocks[0].operations)
        loops = [i for i, op in enumerate(ops) if op.operation.name == "stablehlo.while"]
        if not loops:
            continue
        before_last_loop = {result for op in ops[:loops[-1]] for result in op.results}
        ret = ops[-1].operation
        for index, value in enumerate(ret.operands):
            if value in before_last_loop and ir.RankedTensorType(value.type).has_static_shape:
                ret.operands[index] = opaque_copy(value, ret)


def constant_results_copied(module) -> None:
    """In each public function, return every result that depends on no argument
    through its own copy."""
    from whilst.lowering._iree_ir import ir

    for func in public_functions(module):
        ret = list(func.regions[0].blocks[0].operations)[-1].operation
        for index, value in enumerate(ret.operands):
            if not reads_arguments(value) and isinstance(value.type, ir.RankedTensorType):
                ret.operands[index] = opaque_copy(value, ret)


def reads_arguments(value) -> bool:
    """Whether `value` is computed from an argument of its function. A result of a
    `stablehlo.while` reads what its initial value, the body's update of it and
    the loop test read, through the carries they read: a loop counter of
    constant trip count reads no argument, even when other carries do (IREE
    3.13 evaluates it at compile time)."""
    from whilst.lowering._iree_ir import ir

    seen, pending = set(), [value]
    while pending:
        v = pending.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, ir.BlockArgument):
            owner = v.owner.owner.operation  # (a func.func OpView's `name` is its symbol)
            if owner.name == "func.func":
                return True
            if owner.name == "stablehlo.while":
                pending.extend(_carry_sources(owner, v.arg_number))
            # Other regions' arguments (reduce, sort) are elements of their op's
            # operands, which are followed from the op.
        elif v.owner.operation.name == "stablehlo.while":
            pending.extend(_carry_sources(v.owner, ir.OpResult(v).result_number))
        else:
            pending.extend(v.owner.operands)
            pending.extend(_captured(v.owner))
    return False


def _carry_sources(loop, j):
    """What carry j of `loop` is computed from: its initial value, the body's new
    value of it, and the loop test (which decides how many updates it gets)."""
    cond, body = (region.blocks[0] for region in loop.regions)
    return [loop.operands[j], list(body.operations)[-1].operands[j],
            list(cond.operations)[-1].operands[0]]


def _captured(op):
    """The values an op's regions return (which they compute from values of
    the enclosing region, e.g. the branches of a `stablehlo.case`)."""
    return [v for region in op.regions for block in region.blocks
            for v in list(block.operations)[-1].operands]


def identity_element(element) -> tuple:
    """`(identity, op)` for an MLIR element type: `op(x, identity) == x` bit for bit
    (`False` and `stablehlo.xor` for booleans, 0 and `stablehlo.add` for integers,
    -0.0 and `stablehlo.add` for floats: x + -0.0 == x, -0.0 included). Each op
    reads both operands whatever `x` is: `x | y` would fold to `x` where `x` is all
    true, and two copies of it would be one buffer again."""
    from whilst.lowering._iree_ir import ir

    if _is_boolean(element):
        return ir.BoolAttr.get(False), "stablehlo.xor"
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0), "stablehlo.add"
    return ir.FloatAttr.get(element, -0.0), "stablehlo.add"


def opaque_scalar(element, value, serial):
    """A scalar `value` (an attribute of MLIR element type `element`) that IREE
    cannot fold: the first result of an optimization barrier that also holds
    `serial` (IREE merges equal barriers), made at the current insertion point."""
    from whilst.lowering._iree_ir import ir

    scalar = ir.RankedTensorType.get([], element)
    const = ir.Operation.create(
        "stablehlo.constant", results=[scalar],
        attributes={"value": ir.DenseElementsAttr.get_splat(scalar, value)})
    i32 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))
    tag = ir.Operation.create(
        "stablehlo.constant", results=[i32],
        attributes={"value": ir.DenseElementsAttr.get_splat(
            i32, ir.IntegerAttr.get(i32.element_type, serial))})
    return ir.Operation.create("stablehlo.optimization_barrier", results=[scalar, i32],
                               operands=[const.result, tag.result]).results[0]


def opaque_copy(value, before, serial=0):
    """`value` combined elementwise with an identity element hidden behind an
    optimization barrier (`opaque_scalar`), inserted before `before`: equal
    contents, a new buffer. Copies of one value with distinct serials stay distinct."""
    from whilst.lowering._iree_ir import ir

    tensor = ir.RankedTensorType(value.type)
    identity, combine = identity_element(tensor.element_type)
    with ir.InsertionPoint(before), before.location:
        opaque = opaque_scalar(tensor.element_type, identity, serial)
        spread = ir.Operation.create(
            "stablehlo.broadcast_in_dim", results=[tensor], operands=[opaque],
            attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])})
        copy = ir.Operation.create(combine, results=[tensor],
                                   operands=[value, spread.result])
    return copy.result
