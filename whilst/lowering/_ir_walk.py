"""Finding ops in an MLIR module (IREE's Python bindings), for preparation's rewrites
and for tests and benchmarks that read what was emitted."""
from __future__ import annotations

BRANCH_OPS = ("stablehlo.case", "stablehlo.if")   # ops that run one of their regions


def ops_where(module, predicate) -> list:
    """`[op for op in module (nested ops included, in walk order) if predicate(op)]`,
    collected before the caller edits any of them."""
    from whilst.lowering._iree_ir import ir

    found = []

    def visit(op):
        if predicate(op.operation):
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def integer_constant(value):
    """The value of `value` where a `stablehlo.constant` scalar integer makes it (a
    boolean reads 0 or -1), else None."""
    from whilst.lowering._iree_ir import ir

    owner = value.owner
    if (isinstance(owner, ir.Block) or owner.name != "stablehlo.constant"
            or not isinstance(ir.RankedTensorType(value.type).element_type, ir.IntegerType)
            or ir.RankedTensorType(value.type).rank != 0):
        return None
    return ir.IntegerAttr(ir.DenseElementsAttr(owner.attributes["value"]).get_splat_value()).value


def flagged_unique_indices(scatter) -> bool:
    """Whether `scatter` (a `stablehlo.scatter`) is flagged `unique_indices = true`."""
    from whilst.lowering._iree_ir import ir

    return ("unique_indices" in scatter.attributes
            and ir.BoolAttr(scatter.attributes["unique_indices"]).value)


def scatter_at_one_index(scatter) -> bool:
    """Whether the indices operand of `scatter` (a `stablehlo.scatter`, its inputs,
    indices and updates) is a tensor of static shape with one element."""
    from whilst.lowering._iree_ir import ir

    shaped = ir.RankedTensorType(scatter.operands[len(scatter.operands) // 2].type)
    return shaped.has_static_shape and all(d == 1 for d in shaped.shape)


def target_variants(module, targets) -> list:
    """The `hal.executable.variant` ops of `module` (iree-compile's executable-sources
    phase) whose target backend is one of `targets` ("cuda", "llvm-cpu", ...)."""
    return ops_where(module, lambda op: op.name == "hal.executable.variant" and any(
        str(op.attributes["target"]).startswith(f'#hal.executable.target<"{t}"')
        for t in targets))


def is_public(op) -> bool:
    """Whether a symbol op (a function) has public visibility."""
    vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
    return vis is None or str(vis) == '"public"'


def public_functions(module) -> list:
    """The `func.func` ops of `module` that have a body and public visibility."""
    return ops_where(module, lambda op: op.name == "func.func" and bool(op.regions[0].blocks)
                     and is_public(op))


def unroll_factors(stablehlo_text: str) -> list[int]:
    """The `whilst.unroll` attribute of each `stablehlo.while` whilst emitted (those
    that have one; a `lax.scan` has none), in program order."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stablehlo_text)  # alive while its ops are read
        loops = ops_where(module, lambda op: op.name == "stablehlo.while"
                          and "whilst.unroll" in op.attributes)
        return [ir.IntegerAttr(op.attributes["whilst.unroll"]).value for op in loops]
