"""Booleans and other element types narrower than 32 bits, in forms IREE 3.13's
Vulkan code reads and writes correctly.

For a Vulkan target without 8- and 16-bit storage buffers (IREE's default,
`vp_android_baseline_2022`), IREE 3.13 packs bool (stored as i8), int8, int16 and
float16 tensors into 32-bit words and its shaders read and write whole words,
past the end of a buffer whose length is not a multiple of 4 bytes: a device that
checks buffer bounds (lavapipe does) drops those accesses, others read and write
their neighbours. `x > 0` of an f32[3] comes back all False, an int8[3] input reads
as zeros, a boolean computed in one dispatch and read in another is lost
(`iree_limits/vulkan_narrow_buffers.mlir`, `carried_booleans.py`).

* `booleans_as_int32`: every boolean tensor becomes an int32 tensor of 0s and 1s.
  Ops that move or combine values (slices, gathers, selects, `and`, loops, calls,
  ...) take them as they are; any other op that reads or makes booleans (compare,
  convert, not, constants, ...) gets them converted at its operands and results,
  conversions IREE fuses into the op's own dispatch.
* `narrow_arguments_widened`: the arguments and results of public functions of the
  other narrow types (int8, int16, their unsigned forms, float16, bfloat16) pass
  as int32 or float32 (`WIDER`), converted inside; `stored_dtypes` records each
  leaf's type as passed in its signature (`"stored"`), which the runtime follows.
* IREE 3.13's aggressive dispatch fusion computes wrong values from such int32
  booleans (the gradient of a vmapped loop, `jax.grad(lambda xs, ns:
  jax.vmap(f)(xs, ns).sum())`, gave one example's gradient as if its loop had not
  run, on llvm-cpu as on Vulkan, while XLA runs the same StableHLO right;
  `iree_limits/aggressive_fusion_int32_booleans.py`): modules for Vulkan are
  compiled with IREE's default fusion (`whilst.lowering.flag_sets`).
* `narrow_buffers` finds the dispatches of a compiled module that still read or
  write 8- or 16-bit buffers of values of those types that IREE stores between
  dispatches: such a module is refused for a Vulkan target without that storage.
  Booleans IREE itself stores as i8 (a loop test it reads back, computed from
  int32 0s and 1s) are not counted: those land in larger allocations and are
  read right (the test corpus's loops run on lavapipe).
"""
from __future__ import annotations

# Ops that take boolean operands and make boolean results of the same meaning when
# both are int32 0s and 1s: data movement, logic, loops and calls. Their regions'
# arguments are retyped too.
_RETYPED = {
    "stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim", "stablehlo.reshape",
    "stablehlo.dynamic_reshape", "stablehlo.slice", "stablehlo.dynamic_slice",
    "stablehlo.real_dynamic_slice", "stablehlo.dynamic_update_slice", "stablehlo.concatenate",
    "stablehlo.transpose", "stablehlo.reverse", "stablehlo.pad", "stablehlo.dynamic_pad",
    "stablehlo.gather", "stablehlo.dynamic_gather", "stablehlo.scatter", "stablehlo.select",
    "stablehlo.and", "stablehlo.or", "stablehlo.xor", "stablehlo.maximum", "stablehlo.minimum",
    "stablehlo.while", "stablehlo.case", "stablehlo.if", "stablehlo.reduce", "stablehlo.sort",
    "stablehlo.optimization_barrier", "stablehlo.return", "func.return", "func.call",
    "tensor.empty",
}
# (op, operand index) pairs of retyped ops whose operand must stay a boolean.
_PREDICATES = {("stablehlo.select", 0), ("stablehlo.if", 0)}

# The 32-bit type each narrow element type passes as at a public function's boundary.
WIDER = {"i8": "i32", "i16": "i32", "ui8": "i32", "ui16": "i32", "f16": "f32", "bf16": "f32"}
_NUMPY = {"i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
          "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
          "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def booleans_as_int32(module) -> None:
    """Rewrite `module` so that no value is a boolean tensor except the operands
    and results of ops that need them, each converted from and to int32 next to
    its op. Public functions take and return int32 in place of booleans."""
    from whilst.lowering._iree_ir import ir

    booleans = set()  # int32 values that hold booleans
    i32 = ir.IntegerType.get_signless(32)
    for func in [op for op in module.body.operations if op.operation.name == "func.func"]:
        func = func.operation
        if not func.regions[0].blocks:
            continue
        entry = func.regions[0].blocks[0]
        for arg in entry.arguments:
            _retype(arg, i32, booleans)
        _rewrite_block(entry, i32, booleans)
        _update_function_type(func)


def _rewrite_block(block, i32, booleans) -> None:
    from whilst.lowering._iree_ir import ir

    for op in list(block.operations):
        op = op.operation
        name = op.name
        if name in _RETYPED:
            needs_boolean = {k for k in range(len(op.operands)) if (name, k) in _PREDICATES}
            if name == "stablehlo.return" and _is_test_region(op):
                needs_boolean = {0}
        else:
            needs_boolean = set(range(len(op.operands)))
            _captured_booleans_restored(op, booleans)
        for k in needs_boolean:
            value = op.operands[k]
            if value in booleans:
                with ir.InsertionPoint(op), op.location:
                    op.operands[k] = _convert(value, ir.IntegerType.get_signless(1))
        if name in _RETYPED:
            for result in op.results:
                _retype(result, i32, booleans)
            for region in op.regions:
                for inner in region.blocks:
                    for arg in inner.arguments:
                        _retype(arg, i32, booleans)
                    _rewrite_block(inner, i32, booleans)
        else:
            for result in op.results:
                if is_boolean_tensor(result.type):
                    with ir.InsertionPoint.after(op), op.location:
                        wide = _convert(result, i32)
                    result.replace_all_uses_except(wide, wide.owner.operation)
                    booleans.add(wide)


def _captured_booleans_restored(op, booleans) -> None:
    """The ops inside the regions of `op` (left as it is) that read a boolean of an
    enclosing region read it as a boolean again, converted before `op`."""
    from whilst.lowering._ir_walk import ops_where
    from whilst.lowering._iree_ir import ir

    for region in op.regions:
        for block in region.blocks:
            for inner in [o for top in block.operations
                          for o in ops_where(top, lambda o: True)]:
                for k, value in enumerate(list(inner.operands)):
                    if value in booleans:
                        with ir.InsertionPoint(op), op.location:
                            inner.operands[k] = _convert(value, ir.IntegerType.get_signless(1))


def _is_test_region(op) -> bool:
    """Whether a `stablehlo.return` ends a region that must yield a boolean: a
    loop's test or a sort's comparator."""
    region_op = op.parent
    if region_op is None:
        return False
    if region_op.name == "stablehlo.sort":
        return True
    if region_op.name != "stablehlo.while":
        return False
    cond = region_op.regions[0].blocks[0]
    return list(cond.operations)[-1].operation == op


def _retype(value, i32, booleans) -> None:
    from whilst.lowering._iree_ir import ir

    if is_boolean_tensor(value.type):
        value.set_type(ir.RankedTensorType.get(value.type.shape, i32, value.type.encoding))
        booleans.add(value)


def is_boolean_tensor(type_) -> bool:
    """Whether `type_` is a ranked tensor of `i1`."""
    from whilst.lowering._iree_ir import ir

    if not isinstance(type_, ir.RankedTensorType):
        return False
    element = type_.element_type
    return isinstance(element, ir.IntegerType) and element.width == 1


def _convert(value, element):
    """`value` converted to `element` (at the current insertion point): to i1 it is
    `value != 0` (a compare where the shape is static: IREE 3.13 turns a select
    of a scalar converted to i1 into an op it cannot compile), from i1 0 or 1."""
    from whilst.lowering._iree_ir import ir

    shaped = ir.RankedTensorType(value.type)
    result = ir.RankedTensorType.get(shaped.shape, element, shaped.encoding)
    if not is_boolean_tensor(result) or not shaped.has_static_shape:
        return ir.Operation.create("stablehlo.convert", results=[result], operands=[value]).result
    zero = ir.Operation.create("stablehlo.constant", results=[shaped], attributes={
        "value": ir.DenseElementsAttr.get_splat(shaped, ir.IntegerAttr.get(shaped.element_type, 0))})
    return ir.Operation.create(
        "stablehlo.compare", results=[result], operands=[value, zero.result],
        attributes={"comparison_direction": ir.Attribute.parse("#stablehlo<comparison_direction NE>")}
    ).result


def _update_function_type(func) -> None:
    from whilst.lowering._iree_ir import ir

    entry = func.regions[0].blocks[0]
    ret = list(entry.operations)[-1].operation
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in entry.arguments], [v.type for v in ret.operands]))


def narrow_arguments_widened(func) -> None:
    """Public function `func` takes and returns its int8, int16, uint8, uint16,
    float16 and bfloat16 arrays as the `WIDER` type, converted on entry and exit.
    An argument's conversions to other types (`x.astype(jnp.float32)`) read the
    wide value itself, which holds the same number: IREE 3.13 makes a dispatch of
    each narrowing conversion and stores its result."""
    from whilst.lowering._iree_ir import ir

    entry = func.regions[0].blocks[0]
    first = list(entry.operations)[0].operation
    for arg in list(entry.arguments):
        wide = _wider(arg.type)
        if wide is None:
            continue
        narrow = arg.type
        arg.set_type(wide)
        with ir.InsertionPoint(first), first.location:
            inside = ir.Operation.create("stablehlo.convert", results=[narrow], operands=[arg])
        arg.replace_all_uses_except(inside.result, inside)
        for use in list(inside.result.uses):
            if use.owner.name == "stablehlo.convert":
                use.owner.operands[0] = arg
        if not list(inside.result.uses):
            inside.erase()
    ret = list(entry.operations)[-1].operation
    for k, value in enumerate(list(ret.operands)):
        wide = _wider(value.type)
        if wide is not None:
            with ir.InsertionPoint(ret), ret.location:
                ret.operands[k] = ir.Operation.create(
                    "stablehlo.convert", results=[wide], operands=[value]).result
    _update_function_type(func)


def _wider(type_):
    """The tensor type `type_` passes as at a boundary, or None if it is not narrow."""
    from whilst.lowering._iree_ir import ir

    if not isinstance(type_, ir.RankedTensorType) or str(type_.element_type) not in WIDER:
        return None
    wide = ir.Type.parse(WIDER[str(type_.element_type)])
    return ir.RankedTensorType.get(type_.shape, wide, type_.encoding)


def stored_dtypes(signature: dict, func) -> dict:
    """`signature` with `"stored": dtype` on each aval whose argument or result of
    public function `func` has another element type than the aval's dtype."""
    from whilst.lowering._iree_ir import ir

    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    out = dict(signature)
    for key, types in (("input_avals", ftype.inputs), ("output_avals", ftype.results)):
        if len(types) != len(signature[key]):
            continue
        avals = []
        for aval, type_ in zip(signature[key], types):
            element = str(ir.RankedTensorType(type_).element_type)
            stored = _NUMPY.get(element, aval["dtype"])
            avals.append(aval if stored == aval["dtype"] else {**aval, "stored": stored})
        out[key] = avals
    return out


# Element types of buffer bindings IREE 3.13 reads and writes wrongly on a Vulkan
# target without 8- and 16-bit storage (the target's `storage = b32`).
NARROW_ELEMENTS = ("i1", "i8", "i16", "f16", "bf16")


def narrow_buffers(sources: str | bytes) -> dict[str, list[str]]:
    """`{dispatch: [element types]}` of the Vulkan dispatches of a module at
    iree-compile's executable-sources phase that bind 8- or 16-bit buffers, when
    their target has 32-bit storage only."""
    import re

    from whilst.lowering._ir_walk import ops_where
    from whilst.lowering._iree_ir import ir

    found: dict[str, list[str]] = {}
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(sources)
        for variant in ops_where(module, lambda op: op.name == "hal.executable.variant"):
            target = str(variant.attributes["target"])
            if '"vulkan-spirv"' not in target or not re.search(r"storage = b32\b[,>]", target):
                continue
            for func in ops_where(variant, lambda op: op.name == "func.func"):
                name = ir.StringAttr(func.attributes["sym_name"]).value
                types = set()
                for op in ops_where(func, lambda op: op.name == "hal.interface.binding.subspan"):
                    match = re.search(r"tensor<(?:[?\dx]*x)?(\w+)>", str(op.results[0].type))
                    if (match and match.group(1) in NARROW_ELEMENTS
                            and not _holds_booleans(op.results[0])):
                        types.add(match.group(1))
                if types:
                    found[name] = sorted(types)
    return found


def _holds_booleans(binding) -> bool:
    """Whether a dispatch's i8 binding holds booleans: every value stored to it
    is widened from i1 (`arith.extui`), every value loaded from it narrowed to i1."""
    uses = [use.owner for use in binding.uses]
    for user in uses:
        if user.name == "iree_tensor_ext.dispatch.tensor.store":
            widen = user.operands[0].owner
            if getattr(widen, "name", None) != "arith.extui" or not _is_i1(widen.operands[0]):
                return False
        elif user.name == "iree_tensor_ext.dispatch.tensor.load":
            if not all(use.owner.name == "arith.trunci" and _is_i1(use.owner.results[0])
                       for use in user.results[0].uses):
                return False
        else:
            return False
    return bool(uses)


def _is_i1(value) -> bool:
    from whilst.lowering._iree_ir import ir

    type_ = value.type
    element = type_.element_type if isinstance(type_, ir.ShapedType) else type_
    return isinstance(element, ir.IntegerType) and element.width == 1


def narrow_buffers_error(found: dict[str, list[str]]) -> str | None:
    """Why a Vulkan module whose dispatches bind the narrow buffers `found`
    (`narrow_buffers`) computes wrong values, or None if it binds none."""
    if not found:
        return None
    named = "; ".join(f"{name}: {', '.join(types)}" for name, types in sorted(found.items()))
    return (f"iree-compile would make a Vulkan module that computes wrong values: "
            f"{len(found)} dispatch{'es' * (len(found) > 1)} read or write 8- or 16-bit "
            f"buffers ({named}), which IREE 3.13's code for Vulkan targets without 8- and "
            f"16-bit storage (the default) reads and writes as 32-bit words, past their end. "
            f"Compute with 32-bit types inside the function (.astype(jnp.int32) or "
            f"jnp.float32; arguments and results of any type are fine), or compile for a "
            f"Vulkan device with 8- and 16-bit storage (gpu_arch={{'vulkan-spirv': ...}}, "
            f"e.g. 'llvmpipe' for lavapipe).")
