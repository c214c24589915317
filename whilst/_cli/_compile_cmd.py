"""`whilst compile`: export a function (and its gradient), compile it with the stages
of `whilst.compile`, write a `.vmfb`."""
from __future__ import annotations

import os

from whilst._cli._errors import CLIError
from whilst._cli._leaves import describe_call
from whilst._cli._output import output_dir, write_output
from whilst._cli._user_fn import run_traced, targets


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
    from whilst._compile import Stages, compile_stage, prepare_stage
    from whilst.lowering import CompileError, export

    chosen = list(dict.fromkeys(args.target or ["llvm-cpu"]))
    gpu_arch = gpu_arch_option(args.gpu_arch, chosen)
    out(f"whilst compile {args.function} -> {args.output}")
    _check_output(args)
    stages = Stages(lambda label, seconds: out(f"  {label:<58} {seconds * 1e3:9.1f} ms"))
    with stages(f"import {args.function.rpartition(':')[0]}"):
        fns, path = targets(args.function, args.arg, args.grad)
    if path is not None and os.path.exists(args.output) and os.path.samefile(path, args.output):
        raise CLIError(f"-o {args.output!r} is the source file of {args.function}; write the "
                       f"module to a .vmfb file instead.")
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
        compiled = compile_stage(text, [e.name for e in exports], chosen, args.cpu, gpu_arch,
                                 cache=False if args.no_cache else None, stages=stages)
    except CompileError as e:
        hint = ("" if args.emit_mlir else "\nAdd --emit-mlir DIR to keep the module given "
                "to iree-compile.")
        raise CLIError(f"{_short_compile_error(e, args.cpu)}{hint}") from None
    write_output(args.output, compiled.data, args.force, "-o")
    out(f"wrote {args.output} ({len(compiled.data) / 1024:.1f} KiB): "
        f"functions {', '.join(e.name for e in exports)}; targets {', '.join(chosen)}")
    for e in exports:
        out(f"  {describe_call(e.name, e.signature)}")


def _check_output(args) -> None:
    """Refuse an existing -o before doing any work (unless --force)."""
    if os.path.isdir(args.output):
        raise CLIError(f"-o {args.output!r} is a directory; give the .vmfb file to write.")
    if os.path.lexists(args.output) and not args.force:
        raise CLIError(f"-o {args.output!r} exists; pass --force to replace it, or choose "
                       f"another name.")


def _emit_mlir(args, exports, text, out) -> None:
    directory = output_dir(args.emit_mlir, "--emit-mlir")
    for e in exports:
        write_output(os.path.join(directory, f"{e.name}.stablehlo.mlir"), e.text, args.force,
                     "--emit-mlir")
    write_output(os.path.join(directory, "module.mlir"), text, args.force, "--emit-mlir")
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
