"""Preparing exported StableHLO for IREE and compiling it to a `.vmfb`.

Preparation edits the module with IREE's MLIR Python bindings (never text):
  * each exported function is renamed to its signature name and its private
    helpers are prefixed, so several exports merge into one module;
  * residual stacks (`whilst.uninitialized` zeros) become `tensor.empty`, so
    their cost does not grow with `maximum_iterations`;
  * small expressions of constants alone become constants
    (`_iree_folded_constants`);
  * selects with a scalar predicate, and small `jnp.stack`s, become elementwise
    ops that IREE fuses with their operands' producers, with no predicate read
    back to the host (`_iree_fusion.fusible_small_tensor_code`);
  * with symbolic dimensions, every dynamic dimension is computed from the
    arguments' own (`_iree_dims`);
  * the module is canonicalized and CSE'd, loop carries that start from one
    value get distinct initial buffers (`_iree_loops.distinct_loop_inits`), every
    loop body reads every carry (`_iree_unread_carries`, also in loops whilst did
    not emit, such as a library's `lax.while_loop`), and
    results computed before a loop are returned through a copy made after it
    (`_iree_loops.results_after_loops`), as are results computed from
    constants alone (`_iree_loops.constant_results_copied`);
  * except for Vulkan, rows added into a buffer of zeros and then into another
    buffer are added into that buffer in place (`_iree_row_accumulations`): IREE
    adds the whole buffers;
  * operands of sorts that other ops read are sorted from copies
    (`_iree_sort_operands`), and scatters at one index are not flagged as having
    unique indices (`_iree_one_index_scatters`): IREE miscompiles or rejects both;
  * every loop's results pass an optimization barrier, so that IREE never frees
    the initial values a loop that ran no iteration returns
    (`_iree_loop_results`);
  * each public function gets `stream.affinity = #hal.device.affinity<@__device_0>`:
    without it IREE cannot tell where loop-carried values live and copies every
    loop-carried buffer on every iteration (research/iree-inplace, fact 1);
  * each public function gets `iree.reflection = {whilst = "<signature json>"}`,
    which the runtime reads back to rebuild pytrees, and, when the targets are
    given, `whilst_targets = "<targets json>"` (see `target_metadata`).

Compiling, the VM program's branches get distinct values for repeated ref operands
(`_iree_vm_branches`), which iree-compile 3.13's register allocation would clear.

Several targets make ONE device that selects, at load time, the first target
whose driver matches (`--iree-hal-target-device=cuda,local`): the module
carries an executable per target and runs on any one of them. Repeating the
flag instead would declare several devices that must all be present at once.
IREE 3.13 keeps only one target's variant of each *linked* executable (the
others are dropped without a diagnostic), so executables are not linked when
there are several targets (`--iree-hal-link-executables=false`).
"""
from __future__ import annotations

import logging
import re

from whilst.ir._buffers import UNINITIALIZED_ATTR
from whilst.lowering._ir_walk import is_public, ops_where, public_functions
from whilst.lowering._iree_barrier_inits import barrier_inits_apart
from whilst.lowering._iree_bindings import binding_counts, too_many_bindings
from whilst.lowering._iree_boolean_converts import boolean_converts_selected
from whilst.lowering._iree_branch_results import constant_branch_results_fenced
from whilst.lowering._iree_dims import (
    dims_from_arguments, has_dynamic_shapes, known_broadcast_dims, reshapes_as_tensor_reshape,
    results_with_own_dims)
from whilst.lowering._iree_fusion import fusible_small_tensor_code, unfenced
from whilst.lowering._iree_loops import (
    constant_results_copied, distinct_loop_inits, results_after_loops)
from whilst.lowering._iree_direct_bindings import DIRECT_BINDINGS
from whilst.lowering._iree_carry_guards import carry_guards_hoisted
from whilst.lowering._iree_float64 import KEEP_64_BITS, float64_hint
from whilst.lowering._iree_gpu_loop_kernels import GPU_LOOP_TARGETS, loop_kernels_single_threaded
from whilst.lowering._iree_gpu_scatters import FLAGGED_TARGETS, one_index_scatters_unique
from whilst.lowering._iree_folded_constants import constant_expressions_folded
from whilst.lowering._iree_loop_results import loop_results_fenced
from whilst.lowering._iree_loops_in_dispatch import (
    DISABLE_DISTRIBUTION, loops_at_lines, loops_in_dispatch)
from whilst.lowering._iree_narrow_types import (
    booleans_as_int32, narrow_arguments_widened, narrow_buffers, narrow_buffers_error,
    stored_dtypes)
from whilst.lowering._iree_one_index_scatters import one_index_scatters_not_unique
from whilst.lowering._iree_push_constants import push_constant_counts, too_many_push_constants
from whilst.lowering._iree_row_accumulations import row_accumulations_in_place
from whilst.lowering._iree_sort_operands import sort_operands_copied
from whilst.lowering._iree_unread_carries import unread_carries_read
from whilst.lowering._iree_vm_branches import branch_refs_distinct
from whilst.runtime.signature import REFLECTION_KEY, TARGETS_KEY, dumps
from whilst.runtime.targets import TARGETS

AFFINITY = "#hal.device.affinity<@__device_0>"

_log = logging.getLogger(__name__)


class CompileError(RuntimeError):
    """iree-compile rejected a module (the message keeps IREE's diagnostics), or made
    one that cannot run (the message names the dispatches and the limit they pass)."""


def prepare(exports, targets=None) -> str:
    """Merge `Exported` functions into one module text ready for iree-compile.

    `targets`, if given, is `target_metadata(...)`, stored on each function.
    """
    from whilst.lowering._iree_ir import ir

    vulkan = any(t["name"] == "vulkan-spirv" for t in targets or ())
    with ir.Context(), ir.Location.unknown():
        merged = ir.Module.create()
        for exp in exports:
            module = ir.Module.parse(exp.text)
            _rename_symbols(module, exp.name)
            dynamic = has_dynamic_shapes(module)
            if dynamic:
                dims_from_arguments(module)
                known_broadcast_dims(module)
                reshapes_as_tensor_reshape(module)
            _leave_uninitialized(module)
            boolean_converts_selected(module)
            constant_expressions_folded(module)
            fusible_small_tensor_code(module)
            distinct_loop_inits(module)
            sort_operands_copied(module)
            if not vulkan:
                row_accumulations_in_place(module)
            one_index_scatters_not_unique(module)
            unread_carries_read(module)
            results_after_loops(module)
            constant_results_copied(module)
            if dynamic:
                results_with_own_dims(module)
            loop_results_fenced(module)
            constant_branch_results_fenced(module)
            barrier_inits_apart(module)
            if vulkan:
                booleans_as_int32(module)
            for op in public_functions(module):
                if vulkan:
                    narrow_arguments_widened(op)
                op.attributes["stream.affinity"] = ir.Attribute.parse(AFFINITY)
                signature = stored_dtypes(exp.signature, op)
                reflection = {REFLECTION_KEY: ir.StringAttr.get(dumps(signature))}
                if targets is not None:
                    reflection[TARGETS_KEY] = ir.StringAttr.get(dumps(targets))
                op.attributes["iree.reflection"] = ir.DictAttr.get(reflection)
            for op in list(module.body.operations):
                merged.body.append(op.operation)
        return merged.operation.get_asm(enable_debug_info=False)


def _leave_uninitialized(module) -> None:
    """Ops tagged `whilst.uninitialized` (residual stacks, see whilst.ir._buffers)
    become `tensor.empty`: allocated, never filled. Those inside a loop body of the
    type of one in an enclosing block (a budget's chunk loops and its forward While
    start stacks of one type) keep their zero fill, and their tag: CSE would merge
    the two `tensor.empty`s, and IREE 3.13 then runs the module with a null buffer,
    "ref is null" (`iree_limits/budget_chunk_stacks.py`). A loop that moves into a
    dispatch starts such a stack from a `tensor.empty` of its own
    (`_iree_loops_in_dispatch`)."""
    from whilst.lowering._iree_ir import ir

    tagged = [op for op in ops_where(module, lambda op: UNINITIALIZED_ATTR in op.attributes)
              if ir.RankedTensorType(op.results[0].type).has_static_shape]
    for op in [op for op in tagged if not _enclosing_same_type(op, tagged)]:
        with ir.InsertionPoint(op), op.location:
            empty = ir.Operation.create("tensor.empty", results=[op.results[0].type])
        op.results[0].replace_all_uses_with(empty.results[0])
        op.erase()


def _enclosing_same_type(op, ops) -> bool:
    """Whether one of `ops` of `op`'s result type lies in a block enclosing `op`'s."""
    ancestors, parent = [], op.operation.parent
    while parent is not None and parent.name != "builtin.module":
        ancestors.append(parent)
        parent = parent.parent
    return any(other.results[0].type == op.results[0].type
               and other.operation.parent in ancestors[1:] for other in ops)


def _rename_symbols(module, name: str) -> None:
    """`@main` -> `@name`; private helpers `@f` -> `@name__f`."""
    from whilst.lowering._iree_ir import ir

    table = ir.SymbolTable(module.operation)
    for op in list(module.body.operations):
        if "sym_name" not in op.attributes:
            continue
        old = ir.StringAttr(op.attributes["sym_name"]).value
        new = name if is_public(op) else f"{name}__{old}"
        if new != old:
            ir.SymbolTable.replace_all_symbol_uses(old, new, module.operation)
            table.set_symbol_name(op, new)


def _check_targets(targets) -> None:
    if not targets:
        raise ValueError(f"no target given; expected one or more of {sorted(TARGETS)}")
    for t in targets:
        if t not in TARGETS:
            raise ValueError(f"unknown target {t!r}; expected one of {sorted(TARGETS)}")


def _gpu_arch(target: str, gpu_arch) -> str | None:
    """`gpu_arch` is None, one architecture for every GPU target, or {target: arch}."""
    if isinstance(gpu_arch, dict):
        return gpu_arch.get(target) or TARGETS[target].default_arch
    return gpu_arch or TARGETS[target].default_arch


# IREE 3.13 forms one dispatch per scalar value that several ops read; with this flag
# it fuses across such values (bench/fusion_ab.py: loops 1.08-1.88x faster on llvm-cpu),
# but iree-compile fails on some programs with it ("operand #N does not dominate this
# use", iree_limits/reproduce.py aggressive_fusion_dominance; 2 of the programs of
# tests/iree/test_iree_corpus.py), so whilst falls back to the default fusion then
# (`compile_module`).
AGGRESSIVE_FUSION = "--iree-dispatch-creation-enable-aggressive-fusion"

# IREE's constant evaluation compiles and runs a second module (for llvm-cpu, whatever
# the targets) to fold the expressions hoisted out of functions, such as a one-hot
# select's iota: 0.3-0.4 s of a 2-4 s compile of the samples. Without it the hoisted
# expressions are computed once when the module loads (IREE initializers), and the
# samples ran as fast (bench/compile_time.py).
NO_CONST_EVAL = "--iree-opt-const-eval=false"

# iree-compile 3.13 crashes in iree-stream-refine-usage on some nested loops fed by
# hoisted constant expressions (the step loop and SaveAt loop of a diffrax solve on
# whilst's loops: the inner scf.while gets more arguments than results after stream
# conversion; `iree_limits/hoisted_nested_loop.py`); without hoisting they compile.
# Tried last, only when the other flag sets fail: hoisting computes expressions of
# constants once, at load.
NO_CONST_EXPR_HOISTING = "--iree-opt-const-expr-hoisting=false"

# The source file that iree-compile 3.13's stack dump names for that crash (its
# stream resource-usage analysis). Every flag set that keeps hoisting crashed so on
# the modules that met it (aggressive and default fusion alike: diffrax's Tsit5 solve
# and gradient with SaveAt ts), each after the whole flow phase, so `compile_module`
# goes straight to a flag set without hoisting once one crashed there.
HOISTING_CRASH_SOURCE = "ResourceUsage.cpp"


def compile_flags(targets, cpu="host", gpu_arch=None, aggressive_fusion=False) -> list[str]:
    """iree-compile flags for one module that runs on each of `targets`.

    `gpu_arch` is one architecture for every GPU target or a dict
    `{target: arch}`; GPU targets without one get their `Target.default_arch`.
    `aggressive_fusion` sets AGGRESSIVE_FUSION (named either way, so the compile
    cache tells the two apart).
    """
    _check_targets(targets)
    devices = ",".join(TARGETS[t].device for t in targets)
    # Unrolled gradient Whiles read the padding rows of their residual stacks in
    # steps whose results are discarded (whilst.ir._stacks): by design, not a bug
    # in the user's program, so IREE's warning about it is off.
    flags = ["--iree-input-type=stablehlo", f"--iree-hal-target-device={devices}",
             "--iree-global-opt-enable-warn-on-uninitialized-values=false", NO_CONST_EVAL,
             *KEEP_64_BITS, f"{AGGRESSIVE_FUSION}={str(bool(aggressive_fusion)).lower()}"]
    if len(targets) > 1:
        flags.append("--iree-hal-link-executables=false")
    for t in targets:
        arch = _gpu_arch(t, gpu_arch)
        if t == "llvm-cpu":
            flags += ["--iree-hal-local-target-device-backends=llvm-cpu",
                      f"--iree-llvmcpu-target-cpu={cpu}", DIRECT_BINDINGS]
        elif t == "cuda":
            flags.append(f"--iree-cuda-target={arch}")
        elif t == "rocm":
            flags.append(f"--iree-rocm-target={arch}")
        elif t == "vulkan-spirv" and arch:
            flags.append(f"--iree-vulkan-target={arch}")
    return flags


def flag_sets(targets, cpu="host", gpu_arch=None, loops_in_dispatch=True) -> list[list[str]]:
    """The `compile_flags` that `compile_module` tries, in order: with aggressive
    fusion first, then without it, then also without const-expr hoisting
    (`NO_CONST_EXPR_HOISTING`). On a GPU each dispatch is a kernel launch, and
    aggressive fusion forms fewer (pushpop's forward While unrolled as for a CPU:
    34 -> 7 per iteration for cuda). Modules for vulkan-spirv, whose booleans are
    int32, only without it: IREE 3.13's aggressive fusion computed wrong gradients
    from those (`_iree_narrow_types`). With `loops_in_dispatch` (the default),
    modules for llvm-cpu and cuda (`GPU_LOOP_TARGETS`) try first to run their small
    loops inside one dispatch each (`LOOPS_IN_DISPATCH`, `source_for`; on cuda in one
    thread, `_iree_gpu_loop_kernels`)."""
    plain = compile_flags(targets, cpu, gpu_arch)
    unhoisted = [*plain, NO_CONST_EXPR_HOISTING]
    if "vulkan-spirv" in targets:
        return [plain, unhoisted]
    fused = compile_flags(targets, cpu, gpu_arch, aggressive_fusion=True)
    in_dispatch = ([[*fused, *LOOPS_IN_DISPATCH]]
                   if loops_in_dispatch and set(targets) <= {"llvm-cpu", *GPU_LOOP_TARGETS}
                   else [])
    return [*in_dispatch, fused, plain, unhoisted]


# The flags of a module whose small loops run inside one dispatch each
# (`_iree_loops_in_dispatch`): codegen in one workgroup, and no const-expr hoisting,
# which would pass each constant expression of such a loop to its dispatch as a
# buffer of its own (diffrax's solve: 35 bindings, past the runtime's 32).
LOOPS_IN_DISPATCH = [DISABLE_DISTRIBUTION, NO_CONST_EXPR_HOISTING]

# How long each iree-compile call of that flag set may run before `compile_module`
# stops it and tries the next flag set: its codegen of one big dispatch can run away
# (`iree_limits/remat_in_dispatch.py`), where the host-driven form compiles.
LOOPS_IN_DISPATCH_SECONDS = 60


def source_for(text: str, flags, memo=None, on_host=frozenset()) -> str | None:
    """The module text `compile_module` compiles with `flags` (one of `flag_sets`):
    `text` with its small loops in dispatches for LOOPS_IN_DISPATCH, but for the
    loops numbered in `on_host` (`loops_in_dispatch`; None where no loop moves: that
    flag set is not tried), `text` itself for other flag sets with aggressive
    fusion, and `unfenced(text)` for those without. `memo`, a dict, keeps each form
    made once across calls."""
    memo = {} if memo is None else memo
    if has_loops_in_dispatch(flags):
        kind, make = ("in_dispatch", *sorted(on_host)), lambda text: _with_loops_in_dispatch(
            text, on_host)
    elif has_aggressive_fusion(flags):
        kind, make = "fenced", _with_host_loop_forms
    else:
        kind, make = "unfenced", lambda text: _with_host_loop_forms(unfenced(text))
    if kind not in memo:
        memo[kind] = make(text)
    return memo[kind]


def _with_loops_in_dispatch(text: str, on_host) -> str | None:
    """`text` with its small loops in dispatches, the others and those numbered in
    `on_host` left to the host in their host forms, or None where no loop moved."""
    from whilst.lowering._iree_ir import ir

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        if not loops_in_dispatch(module, on_host):
            return None
        carry_guards_hoisted(module)
        return module.operation.get_asm(enable_debug_info=False)


def _with_host_loop_forms(text: str) -> str:
    """`text` with the carry guards of its loops, each stepped from the host, made
    before them (`_iree_carry_guards`; a loop that moves into a dispatch drops its
    guard's barrier instead, `_iree_loops_in_dispatch`)."""
    from whilst.lowering._iree_ir import ir

    with ir.Context() as context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        if not carry_guards_hoisted(module):
            return text
        return module.operation.get_asm(enable_debug_info=False)


def target_metadata(targets, cpu="host", gpu_arch=None) -> list[dict]:
    """What a module records about its targets: `[{"name", "arch", "drivers"}]`,
    `arch` being the CPU for llvm-cpu and the GPU architecture otherwise."""
    _check_targets(targets)
    return [{"name": t, "arch": cpu if t == "llvm-cpu" else _gpu_arch(t, gpu_arch),
             "drivers": list(TARGETS[t].drivers)} for t in targets]


# iree-compile 3.13's diagnostic for loop bodies with too many loops and host branches
# nested in them (iree_limits/branches_in_loop.py), and what a user can do.
TIMEPOINT_COVERAGE = "failed to solve for timepoint coverage"
TIMEPOINT_COVERAGE_HINT = (
    "\nIREE 3.13 fails to solve for timepoint coverage on loop bodies that hold many "
    "loops or branches (lax.cond, lax.switch), each stepped from the host. Where a body "
    "branches several times, jnp.where in place of lax.cond computes both sides and "
    "branches nowhere. Nested loops come from a gradient of a gradient (reverse over "
    "reverse) through a whilst loop that runs past its gradient_memory (no "
    "maximum_iterations, or more rows than gradient_memory holds): give that loop "
    "maximum_iterations whose rows fit gradient_memory (whilst.residual_report gives "
    "the bytes per step), or checkpoints=K; or take the second derivative forward over "
    "reverse (jax.jvp of jax.grad).")

# The iree-compile phases `compile_module` stops at: to read the bindings, and to
# edit the VM program (`_iree_vm_branches`).
SOURCES_PHASE = "executable-sources"
VM_PHASE = "vm"


def compile_module(text: str, targets=("llvm-cpu",), cpu="host", gpu_arch=None,
                   extra_flags=(), on_fallback=None,
                   loops_in_dispatch=True) -> tuple[bytes, list[str]]:
    """Compile prepared module text with the first of `flag_sets(targets, cpu,
    gpu_arch, loops_in_dispatch)` that makes a module that can run: iree-compile
    accepts the module and `cannot_run` finds nothing against it. Returns `(vmfb
    bytes, that flag set)`.
    Once a flag set crashes iree-compile in its stream resource-usage analysis
    (`HOISTING_CRASH_SOURCE`), the flag sets that keep const-expr hoisting are skipped.

    Each compile runs in three iree-compile calls: to the executable-sources phase
    (where the bindings are read, and cuda's executables edited,
    `_gpu_executables_edited`), on to the VM program (whose branches
    `branch_refs_distinct` edits), and on from it.
    Each flag set compiles its `source_for(text, flags)`, and is skipped where
    that is None. Where iree-compile fails on the dispatches of loops moved there
    (LOOPS_IN_DISPATCH: llvm-cpu codegen of one loop's kernel, past its stack
    memory), the same flag set is tried again with those loops left to the host.
    `on_fallback(reason, flags)` is called before each flag set tried after the
    first, with the one tried before and why it failed, in one line ("with
    aggressive fusion, iree-compile failed: ...", "with default fusion, iree-compile
    crashed in ..."), and the flag set it tries now.

    Raises:
      CompileError: no flag set made such a module; IREE's diagnostics, or what
        `cannot_run` found, for the last one, what each flag set tried met (one
        line each, where more than one was tried), and TIMEPOINT_COVERAGE_HINT where
        any of them failed to solve for timepoint coverage.
    """
    from iree.compiler import tools

    forms = {}  # `source_for`'s, each made once
    hoisting_crashed, uncovered, met = False, False, []  # met: why each try failed
    for flags in flag_sets(targets, cpu, gpu_arch, loops_in_dispatch):
        if hoisting_crashed and NO_CONST_EXPR_HOISTING not in flags:
            continue
        on_host = set()
        source = source_for(text, flags, forms)
        while source is not None:
            if met and on_fallback is not None:
                on_fallback(met[-1], flags)
            args = [*flags, *extra_flags]
            seconds = LOOPS_IN_DISPATCH_SECONDS if has_loops_in_dispatch(flags) else None
            try:
                sources = _iree_compile(source, [*args, f"--compile-to={SOURCES_PHASE}"], seconds)
                sources = _gpu_executables_edited(sources, targets, has_loops_in_dispatch(flags))
                error = cannot_run(sources, targets)
                if error is None:
                    vm = _iree_compile(sources, [*args, f"--compile-from={SOURCES_PHASE}",
                                                 f"--compile-to={VM_PHASE}"], seconds)
                    return _iree_compile(branch_refs_distinct(vm.decode()),
                                         [*args, f"--compile-from={VM_PHASE}"], seconds), flags
                reason, failed = error.split(". ")[0], set()
            except tools.CompilerToolError as e:
                error = f"iree-compile failed for targets {list(targets)}:\n{e}"
                reason = _failure(str(e))
                hoisting_crashed = hoisting_crashed or (
                    _crash_frame(str(e)) is not None and HOISTING_CRASH_SOURCE in str(e))
                uncovered = uncovered or TIMEPOINT_COVERAGE in str(e)
                error += _illegal_op_hint(str(e)) + float64_hint(str(e), targets)
                failed = (loops_at_lines(source, _error_lines(str(e))) - on_host
                          if has_loops_in_dispatch(flags) else set())
            if failed:
                reason += (f" (in the dispatch of loop{'s' * (len(failed) > 1)} "
                           f"{', '.join(map(str, sorted(failed)))}: left to the host)")
            met.append(f"with {describe_flags(flags)}, {reason}")
            on_host |= failed
            source = source_for(text, flags, forms, on_host) if failed else None
    if len(met) > 1:
        error += "\nEach flag set tried failed:\n" + "\n".join(f"  {m}" for m in met)
    raise CompileError(error + (TIMEPOINT_COVERAGE_HINT if uncovered else "")) from None


def _gpu_executables_edited(sources: bytes, targets, loops_moved: bool) -> str | bytes:
    """`sources` (iree-compile's executable-sources phase) with cuda's one-index
    scatters flagged unique (`_iree_gpu_scatters`) and, where loops moved into
    dispatches, cuda's loop kernels run in one thread (`_iree_gpu_loop_kernels`);
    `sources` itself where there is nothing to edit."""
    from whilst.lowering._iree_ir import ir

    if not set(targets) & {*FLAGGED_TARGETS, *GPU_LOOP_TARGETS}:
        return sources
    with ir.Context():
        module = ir.Module.parse(sources)
        edited = one_index_scatters_unique(module)
        edited += loop_kernels_single_threaded(module) if loops_moved else 0
        return module.operation.get_asm(enable_debug_info=False) if edited else sources


def has_aggressive_fusion(flags) -> bool:
    """Whether a flag set of `flag_sets` has aggressive fusion on."""
    return f"{AGGRESSIVE_FUSION}=true" in flags


def _iree_compile(source, args, seconds=None) -> bytes:
    """`tools.compile_str(source, extra_args=args)`, with iree-compile stopped past
    `seconds` (CompilerToolError: "iree-compile ran past N s"), and the warnings of a
    compile that succeeds logged (DEBUG, the `whilst` logger) instead of printed
    ("failed to move consumer into region", of dispatch regions whilst forms)."""
    import subprocess

    from iree.compiler.tools import CompilerToolError, core

    with core.TempFileSaver.implicit() as saver:
        command = core.build_compile_command_line(
            "-", saver, core.CompilerOptions(extra_args=list(args)))
    data = source.encode() if isinstance(source, str) else source
    try:
        process = subprocess.run(command, input=data, capture_output=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        process = subprocess.CompletedProcess(
            command, -9, b"", f"error: iree-compile ran past {seconds} s, stopped".encode())
    if process.returncode:
        raise CompilerToolError(process)
    if process.stderr:
        _log.debug("iree-compile: %s", process.stderr.decode(errors="replace"))
    return process.stdout


def has_loops_in_dispatch(flags) -> bool:
    """Whether a flag set of `flag_sets` is LOOPS_IN_DISPATCH's."""
    return DISABLE_DISTRIBUTION in flags


def describe_flags(flags) -> str:
    """What a flag set of `flag_sets` changes, in words: "aggressive fusion" or
    "default fusion", and ", small loops in one dispatch each" for
    LOOPS_IN_DISPATCH, else ", no const-expr hoisting" where it has
    NO_CONST_EXPR_HOISTING."""
    fusion = "aggressive" if has_aggressive_fusion(flags) else "default"
    if has_loops_in_dispatch(flags):
        return f"{fusion} fusion, small loops in one dispatch each"
    return f"{fusion} fusion" + (", no const-expr hoisting"
                                 if NO_CONST_EXPR_HOISTING in flags else "")


def _failure(diagnostics: str) -> str:
    """Why iree-compile failed, in one line: the function its stack dump names
    first when it crashed, else its first error (`_first_error`)."""
    frame = _crash_frame(diagnostics)
    if frame is not None:
        return f"iree-compile crashed in {frame}"
    return f"iree-compile failed: {_first_error(diagnostics)}"


# A frame of an LLVM stack dump that names an MLIR function:
# " #4 0x00007fa7541a8fa3 mlir::iree_compiler::IREE::Stream::ResourceType::getLifetime() ..."
_MLIR_FRAME = re.compile(r"^ *#\d+ 0x[0-9a-f]+ mlir::(?:iree_compiler::)?(?:IREE::)?([\w:]+)",
                         re.MULTILINE)


def _crash_frame(diagnostics: str) -> str | None:
    """The innermost MLIR function of iree-compile's stack dump ("Stream::ResourceType::
    getLifetime"), or None when it did not crash (or its dump names none)."""
    if "Stack dump:" not in diagnostics:
        return None
    found = _MLIR_FRAME.search(diagnostics)
    return found[1] if found else None


def _first_error(diagnostics: str) -> str:
    """The first error of iree-compile's diagnostics (the message of its first `error:`
    line, else its first line), in one line of at most 200 characters."""
    lines = diagnostics.splitlines()
    if "Diagnostics:" in lines:
        lines = lines[lines.index("Diagnostics:") + 1:]
    errors = [line.partition("error: ")[2] for line in lines if "error: " in line]
    message = (errors or [line.strip() for line in lines if line.strip()] or ["(none)"])[0]
    return message if len(message) <= 200 else message[:197] + "..."


def _error_lines(diagnostics: str) -> list[int]:
    """The lines of the module text (read from standard input) that iree-compile's
    errors point at."""
    return [int(found.group(1)) for found in _ERROR_AT.finditer(diagnostics)]


# "<stdin>:106:12: error: 'func.func' op exceeded stack allocation limit ..."
_ERROR_AT = re.compile(r"^<stdin>:(\d+):\d+: error: ", re.MULTILINE)


# iree-compile 3.13's diagnostic for StableHLO ops its input conversion does not handle,
# most of them ops JAX emits for symbolic shapes (`dynamic_gather` for `x[1:]` of an
# `f32[b]`); whilst rewrites the ones it can (`_iree_dims.reshapes_as_tensor_reshape`).
_ILLEGAL_OP = re.compile(r"failed to legalize operation '(stablehlo\.[a-z_]+)'")


def _illegal_op_hint(diagnostics: str) -> str:
    found = _ILLEGAL_OP.search(diagnostics)
    if not found:
        return ""
    op = found[1]
    symbolic = ("JAX emits it for symbolic dimensions, e.g. for slices and gathers of "
                "symbolic size (x[1:] of an f32[b]); give that argument a static shape "
                "(--arg 'f32[8]' or jax.ShapeDtypeStruct((8,), jnp.float32)), one module "
                "per size, or compute without it" if "dynamic" in op else
                "compute without the JAX operation that emits it")
    return f"\nIREE 3.13 cannot compile {op!r}: {symbolic}."


def cannot_run(sources, targets) -> str | None:
    """Why the module at iree-compile's executable-sources phase `sources` cannot
    run (right) on each of `targets`, or None: a dispatch over the runtime's
    bindings (`_iree_bindings`) and, for Vulkan, over the push constants every
    device accepts (`_iree_push_constants`) or binding 8- or 16-bit buffers
    (`_iree_narrow_types`)."""
    error = too_many_bindings(binding_counts(sources), targets)
    if error is None and "vulkan-spirv" in targets:
        error = (too_many_push_constants(push_constant_counts(sources))
                 or narrow_buffers_error(narrow_buffers(sources)))
    return error


def compile_text(text: str, targets=("llvm-cpu",), cpu="host", gpu_arch=None,
                 extra_flags=()) -> bytes:
    """Compile prepared module text to `.vmfb` bytes (`compile_module`), raising
    `CompileError` when it fails or would make a module that cannot run."""
    return compile_module(text, targets, cpu, gpu_arch, extra_flags)[0]


def compile_to_stream(text: str, targets=("llvm-cpu",), cpu="host", gpu_arch=None,
                      loops_in_dispatch=True) -> str:
    """The module after IREE's stream phase (`--compile-to=stream`) with the first
    of `flag_sets` that iree-compile takes up to that phase, as text. `compile_module`
    may still fall back from that flag set on a failure past the stream phase (llvm-cpu
    codegen, `iree_limits/reproduce.py aggressive_fusion_dominance`): a compiled
    module's stages say whether it did (`FALLBACK_NOTE`, `whilst/_compile.py`)."""
    from iree.compiler import tools

    forms = {}
    *first, last = flag_sets(targets, cpu, gpu_arch, loops_in_dispatch)
    for flags in first:
        source = source_for(text, flags, forms)
        if source is None:
            continue
        try:
            return _iree_compile(source, [*flags, "--compile-to=stream"]).decode()
        except tools.CompilerToolError:
            continue
    return _iree_compile(source_for(text, last, forms), [*last, "--compile-to=stream"]).decode()


def stream_copy_sizes(stream_text: str) -> list[int | None]:
    """Byte lengths of the `stream.cmd.copy` ops in stream-phase output (None where
    the length is not a constant): a full loop-carried buffer among them means the
    buffer is copied instead of updated in place."""
    from whilst.lowering._iree_ir import ir

    sizes = []

    def visit(op):
        if op.operation.name == "stream.cmd.copy":
            owner = op.operation.operands[-1].owner
            attrs = getattr(owner, "attributes", {})
            value = attrs["value"] if "value" in attrs else None
            sizes.append(None if value is None else ir.IntegerAttr(value).value)
        return ir.WalkResult.ADVANCE

    with ir.Context():
        ir.Module.parse(stream_text).operation.walk(visit)
    return sizes


# What `loop_costs` counts in one loop iteration of a stream-phase function.
LOOP_COST_OPS = {"readbacks": "stream.resource.load", "dispatches": "stream.cmd.dispatch",
                 "submissions": "stream.cmd.execute", "allocations": "stream.resource.alloca",
                 "host_waits": "stream.timepoint.await"}


def loop_costs(stream_text: str) -> list[dict[str, int]]:
    """What one iteration of each innermost loop of a stream-phase function holds,
    `{name: count}` for each name of LOOP_COST_OPS: device-to-host readbacks,
    dispatches, command-buffer submissions, queue allocations and host waits.
    On IREE 3.13's GPU drivers the host waits for the device at each queue
    allocation of an iteration and copies through a staging buffer at each
    readback, so iterations cost tens of microseconds (`bench/gpu_loop_costs.py`).
    A loop is the blocks from a branch target to the block that branches back to
    it (whilst's emitted loops are one block, a `lax.scan`'s two: its test and
    its body); innermost: no other loop lies within those blocks."""
    from whilst.lowering._iree_ir import ir

    loops = []
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stream_text)
        for func in module.body.operations:
            if func.operation.name != "util.func" or not func.regions[0].blocks:
                continue
            blocks = list(func.regions[0].blocks)
            back_edges = {(blocks.index(target), j) for j, block in enumerate(blocks)
                          for target in list(block.operations)[-1].operation.successors
                          if blocks.index(target) <= j}
            for first, last in sorted(back_edges):
                if any(first <= inner[0] and inner[1] <= last and inner != (first, last)
                       for inner in back_edges):
                    continue
                counts = dict.fromkeys(LOOP_COST_OPS.values(), 0)

                def visit(op, counts=counts):
                    if op.operation.name in counts:
                        counts[op.operation.name] += 1
                    return ir.WalkResult.ADVANCE

                for block in blocks[first:last + 1]:
                    for op in block.operations:
                        op.operation.walk(visit)
                loops.append({name: counts[op] for name, op in LOOP_COST_OPS.items()})
    return loops


def loop_counts(stream_text: str) -> list[tuple[int, int]]:
    """`[(readbacks, dispatches)]` of each innermost loop (`loop_costs`)."""
    return [(c["readbacks"], c["dispatches"]) for c in loop_costs(stream_text)]
