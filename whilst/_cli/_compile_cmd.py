"""`whilst compile`: export a function (and its gradient), compile it with the stages
of `whilst.compile`, write a `.vmfb`."""
from __future__ import annotations

import os
import sys

from whilst._cli._errors import CLIError
from whilst._cli._leaves import describe_call
from whilst._cli._output import check_output, check_output_dir, output_dir, write_output
from whilst._cli._progress_line import ProgressLine
from whilst._cli._user_fn import function_names, run_traced, source_path, targets


def gpu_arch_option(values, chosen_targets):
    """`--gpu-arch` values (`ARCH` or `TARGET=ARCH`) -> what `compile_flags` takes."""
    if not values:
        return None
    arch = {}
    for v in values:
        target, sep, a = v.rpartition("=")
        if not sep:
            arch.update({t: v for t in chosen_targets if t != "llvm-cpu"})
        elif target not in chosen_targets or target == "llvm-cpu":
            gpus = [t for t in chosen_targets if t != "llvm-cpu"]
            raise CLIError(f"--gpu-arch {v!r}: {target!r} is not one of the GPU targets "
                           f"being compiled ({gpus}); use TARGET=ARCH with one of them.")
        else:
            arch[target] = a
    return arch


def main(args, out=print) -> None:
    from whilst._compile import IREE_COMPILE, compile_stage, prepare_stage
    from whilst._stages import Stages
    from whilst.lowering import CompileError, export

    chosen = list(dict.fromkeys(args.target or ["llvm-cpu"]))
    gpu_arch = gpu_arch_option(args.gpu_arch, chosen)
    out(f"whilst compile {args.function} -> {args.output}")
    _check_outputs(args)
    with ProgressLine(sys.stderr, "whilst compile",
                      announce=lambda label: label.startswith(IREE_COMPILE)) as line:
        def progress(label, seconds, done):
            line(label, seconds, done)
            if done:
                out(f"  {label:<58} {seconds * 1e3:9.1f} ms")
                sys.stdout.flush()

        stages = Stages(progress)
        with stages(f"import {args.function.rpartition(':')[0]}"):
            fns, path = targets(args.function, args.arg, args.grad)
        exports = []
        for t in fns:
            with stages(f"export {t.name} to StableHLO"):
                exports.append(run_traced(t, path, "exporting",
                                          lambda t=t: export(t.fn, *t.args, name=t.name,
                                                             targets=chosen)))
        try:
            text = prepare_stage(exports, chosen, args.cpu, gpu_arch, stages)
        except Exception as e:  # the MLIR bindings raise their own error types
            raise CLIError(f"IREE cannot read the exported StableHLO: {e}\nThe function uses "
                           f"an operation IREE does not support (jnp.linalg, for example, "
                           f"lowers to LAPACK calls).") from None
        if args.emit_mlir:
            _emit_mlir(args, exports, text, out)
        try:
            compiled = compile_stage(text, [e.name for e in exports], chosen, args.cpu,
                                     gpu_arch, cache=False if args.no_cache else None,
                                     stages=stages,
                                     loops_in_dispatch=not args.no_loops_in_dispatch)
        except CompileError as e:
            hint = ("" if args.emit_mlir else "\nAdd --emit-mlir DIR to keep the module given "
                    "to iree-compile.")
            raise CLIError(f"{_short_compile_error(e, args.cpu)}{hint}") from None
    write_output(args.output, compiled.data, args.force, "-o")
    out(f"wrote {args.output} ({len(compiled.data) / 1024:.1f} KiB): "
        f"functions {', '.join(e.name for e in exports)}; targets {', '.join(chosen)}")
    for e in exports:
        out(f"  {describe_call(e.name, e.signature)}")


def _check_outputs(args) -> None:
    """Refuse, before any work, outputs that could not be written: -o and the files of
    --emit-mlir (existing ones without --force, devices and the like, the traced
    source, missing or unwritable directories)."""
    source = source_path(args.function)
    check_output(args.output, args.force, "-o", source, args.function)
    if args.emit_mlir:
        check_output_dir(args.emit_mlir, "--emit-mlir")
        if os.path.isdir(args.emit_mlir):
            for name in _mlir_files(function_names(args.function, args.grad)):
                check_output(os.path.join(args.emit_mlir, name), args.force, "--emit-mlir")


def _mlir_files(names) -> list[str]:
    return [f"{name}.stablehlo.mlir" for name in names] + ["module.mlir"]


def _emit_mlir(args, exports, text, out) -> None:
    directory = output_dir(args.emit_mlir, "--emit-mlir")
    files = _mlir_files(e.name for e in exports)
    for name, contents in zip(files, [*(e.text for e in exports), text]):
        write_output(os.path.join(directory, name), contents, args.force, "--emit-mlir")
    out(f"  wrote StableHLO of {', '.join(e.name for e in exports)} and the prepared "
        f"module.mlir to {args.emit_mlir}/")


def _short_compile_error(e, cpu: str) -> str:
    """iree-compile's diagnostics, or one line for an LLVM CPU name it does not know
    (LLVM then prints its whole table of CPUs and features)."""
    text = str(e)
    if "Unknown CPU for target" in text or "is not a recognized processor" in text:
        return (f"--cpu {cpu!r} is not a CPU LLVM knows; use host, generic, or an LLVM CPU "
                f"name such as x86-64-v3, skylake, znver4 or apple-m1.")
    return text
