"""Expressions of constants folded before IREE sees them.

JAX does not fold constants: `jnp.nextafter(0.0, 10.0)` exports as some twenty ops on
two literals, and a diffrax solve holds about two thousand such scalar ops (its
times' `nextafter`s, direction signs and tableau entries). IREE 3.13 folds none of
them either: const-expr hoisting makes each a global of its own with an initializer
compiled as a dispatch of its own (the batch of 1024 Tsit5 solves: 710 initializers,
half of a 16 s compile), and without hoisting they are computed on every call.
`constant_expressions_folded` evaluates them once, with StableHLO's reference
interpreter, and writes their values as constants::

    y = f(constant_1, ..., constant_k)   # every operand a constant, y small
    ==
    y = constant(f(constant_1, ..., constant_k))

Only ops whose value the interpreter computes exactly as every IREE target does
are folded (`FOLDED_OPS`: integer and bitwise arithmetic, comparisons, selects,
IEEE-exact float arithmetic, bitcasts and reshaping; not transcendentals, whose
approximations differ between libraries, nor float-to-integer conversions), and
only results of at most FOLDED_ELEMENTS elements (scalars and short vectors, not
broadcasts that would grow the module). A broadcast or reshape of a folded value
stays as written, reading the folded constant (`_unbroadcast`). Ops whose value is
hidden on purpose (`optimization_barrier`) and ops whilst tags stay as they are.
Reductions fold where their combiner is exact in any order (`EXACT_REDUCERS`).

A branch whose index folds to a literal is then replaced by the branch it takes, and
what that branch computes is folded in turn::

    y = case(constant k, b_0, ..., b_n)   # lax.cond / lax.switch; stablehlo.if alike
    ==
    y = b_min(k, n)()                     # an index out of range takes the last branch

equinox's checks under `EQX_ON_ERROR=nan` are such branches: diffrax's SaveAt times
are checked by `lax.cond(any(ts < t0), nan, ts)` on constants. Left to IREE, each
check is a host readback and a command buffer of its own on every call.
"""
from __future__ import annotations

import logging

import numpy as np

from whilst.lowering._ir_walk import BRANCH_OPS, integer_constant, ops_where

logger = logging.getLogger(__name__)

# Results of at most this many elements are folded into literals.
FOLDED_ELEMENTS = 64

FOLDED_OPS = frozenset({
    "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.negate",
    "stablehlo.abs", "stablehlo.minimum", "stablehlo.maximum", "stablehlo.clamp",
    "stablehlo.sign", "stablehlo.and", "stablehlo.or", "stablehlo.xor", "stablehlo.not",
    "stablehlo.shift_left", "stablehlo.shift_right_logical",
    "stablehlo.shift_right_arithmetic", "stablehlo.compare", "stablehlo.select",
    "stablehlo.bitcast_convert", "stablehlo.convert", "stablehlo.broadcast_in_dim",
    "stablehlo.reshape", "stablehlo.slice", "stablehlo.concatenate", "stablehlo.transpose",
    "stablehlo.reduce",
})

# Reductions of constants of at most this many elements are folded (StableHLO's
# interpreter takes microseconds per element).
REDUCED_ELEMENTS = 1024

# A `stablehlo.reduce` folds where its body is one of these combiners, by element type:
# exact whatever order IREE combines the elements in.
EXACT_REDUCERS = {
    "integer": frozenset({"stablehlo.add", "stablehlo.and", "stablehlo.or", "stablehlo.xor",
                          "stablehlo.maximum", "stablehlo.minimum"}),
    "float": frozenset({"stablehlo.maximum", "stablehlo.minimum"}),
}


def constant_expressions_folded(module) -> int:
    """Fold, in place, each op of `module` that `_folds` (module docstring) whose
    result an op that does not fold reads, and take each branch whose index becomes
    a literal, until none is left; returns how many values became constants."""
    folded = _folded_once(module)
    while _literal_branches_taken(module):
        folded += _folded_once(module)
    return folded


def _literal_branches_taken(module) -> int:
    """Replace each `stablehlo.case` / `stablehlo.if` whose index is a literal by the
    ops of the branch it takes (module docstring); returns how many. Branches are
    visited innermost first (post-order), so none is visited after an enclosing
    branch erased it."""
    taken = 0
    for op in ops_where(module, lambda op: op.name in BRANCH_OPS):
        index = integer_constant(op.operands[0])
        if index is None:
            continue
        if op.name == "stablehlo.if":
            region = op.regions[0 if index else 1]
        else:
            region = op.regions[index if 0 <= index < len(op.regions) else -1]
        *ops, returned = region.blocks[0].operations
        for inner in ops:
            inner.move_before(op)
        for result, value in zip(op.results, returned.operands):
            result.replace_all_uses_with(value)
        op.erase()
        taken += 1
    return taken


def _folded_once(module) -> int:
    """One pass of `constant_expressions_folded`'s folding, without its branches."""
    from whilst.lowering._iree_ir import ir

    constants, read_constants, folded, known, roots = {}, {}, [], set(), {}
    for op in ops_where(module, lambda op: True):
        if op.name == "stablehlo.constant":
            constants[op.results[0]] = op
        elif _folds(op, known, constants):
            folded.append(op)
            known.update(op.results)
            read_constants.update((constants[v], None) for v in op.operands if v in constants)
        else:
            roots.update((_unbroadcast(v, known), None) for v in op.operands if v in known)
    roots.pop(None, None)
    if not roots:
        return 0
    values = _evaluated([*read_constants, *folded], list(roots))
    if values is None:
        return 0
    for root, value in zip(roots, values):
        with ir.InsertionPoint(root.owner), root.owner.location:
            constant = ir.Operation.create(
                "stablehlo.constant", results=[root.type],
                attributes={"value": ir.Attribute.parse(value)})
        root.replace_all_uses_with(constant.results[0])
    for op in reversed(folded):
        if not any(list(r.uses) for r in op.results):
            op.erase()
    return len(roots)


def _unbroadcast(value, known):
    """The value that `value`, a folded result, broadcasts or reshapes (through any
    chain of such ops), or `value` itself; None where that is a literal constant. A
    broadcast of a constant stays as written: IREE makes it a splat of its own, and
    whilst keeps some apart on purpose (`_iree_loops_in_dispatch._scalar_pads`)."""
    while value.owner.name in _SHAPE_ONLY_OPS:
        value = value.owner.operands[0]
    return value if value in known else None


# Ops that only place the elements of one operand.
_SHAPE_ONLY_OPS = ("stablehlo.broadcast_in_dim", "stablehlo.reshape")


def _folds(op, known, constants) -> bool:
    """Whether `op` is in FOLDED_OPS, untagged, reads only `known` values or
    `constants`, on static shapes of `_interpreted` types, with results of at most
    FOLDED_ELEMENTS elements; a `convert` not from float to integer."""
    from whilst.lowering._iree_ir import ir

    if (op.name not in FOLDED_OPS
            or any(name not in _STABLEHLO_ATTRS for name in op.attributes)
            or not all(v in known or v in constants for v in op.operands)):
        return False
    for value in [*op.operands, *op.results]:
        if not (isinstance(value.type, ir.RankedTensorType) and value.type.has_static_shape
                and _interpreted(value.type.element_type)):
            return False
    if any(int(np.prod(r.type.shape)) > FOLDED_ELEMENTS for r in op.results):
        return False
    if op.name == "stablehlo.reduce":
        return _exact_reduction(op)
    return not (op.name == "stablehlo.convert"
                and isinstance(op.operands[0].type.element_type, ir.FloatType)
                and not isinstance(op.results[0].type.element_type, ir.FloatType))


def _exact_reduction(op) -> bool:
    """Whether `op`, a `stablehlo.reduce`, reduces one operand of at most
    REDUCED_ELEMENTS elements with a body of one of the `EXACT_REDUCERS` of its
    element type."""
    from whilst.lowering._iree_ir import ir

    if len(op.results) != 1 or int(np.prod(op.operands[0].type.shape)) > REDUCED_ELEMENTS:
        return False
    body = [inner.name for inner in op.regions[0].blocks[0].operations]
    kind = ("float" if isinstance(op.results[0].type.element_type, ir.FloatType)
            else "integer")
    return len(body) == 2 and body[0] in EXACT_REDUCERS[kind]


def _interpreted(element_type) -> bool:
    """Whether `element_type` is an integer or a float of 16, 32 or 64 bits (the
    interpreter's other types are not folded)."""
    from whilst.lowering._iree_ir import ir

    return isinstance(element_type, ir.IntegerType) or (
        isinstance(element_type, ir.FloatType)
        and ir.FloatType(element_type).width in (16, 32, 64))


# The attributes an op of FOLDED_OPS has of itself; any other is a tag.
_STABLEHLO_ATTRS = ("comparison_direction", "compare_type", "broadcast_dimensions",
                    "dimension", "start_indices", "limit_indices", "strides",
                    "permutation", "dimensions")


def _evaluated(ops, roots) -> list[str] | None:
    """The value of each of `roots` (results of `ops`), as attribute text: `ops`
    (constants, then the folded ops in order) cloned into one function returning
    `roots`, run by StableHLO's reference interpreter (jaxlib's, in a context of its
    own). None, with a warning, where that interpreter refuses the function."""
    from whilst.lowering._iree_ir import ir
    from jax.extend.mlir import ir as jax_ir
    from jax.extend.mlir.dialects import stablehlo as jax_hlo
    from jax.interpreters import mlir as jax_mlir

    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        function = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get("main"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([], [r.type for r in roots]))})
    clones = {}
    with ir.InsertionPoint(function.regions[0].blocks.append()):
        for op in ops:
            clone = op.clone()
            for i, operand in enumerate(op.operands):
                clone.operands[i] = clones[operand]
            clones.update(zip(op.results, clone.results))
        ir.Operation.create("func.return", operands=[clones[r] for r in roots])
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    with jax_mlir.make_ir_context():
        try:
            values = jax_hlo.eval_module(jax_ir.Module.parse(text), [])
        except Exception as error:  # jaxlib's StableHLO may lack an op of IREE's
            logger.warning("constants left unfolded: StableHLO's interpreter refused "
                           "them (%s)", error)
            return None
        return [str(v) for v in values]
