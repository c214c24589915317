"""`whilst compile`: export a function (and its gradient), compile, write a `.vmfb`."""
from __future__ import annotations

import contextlib
import os
import time

from whilst._cli._errors import CLIError
from whilst._cli._leaves import describe_call
from whilst._cli._user_fn import run_traced, targets


class _Stages:
    """Prints each stage with its duration as it finishes."""

    def __init__(self, out):
        self.out = out

    @contextlib.contextmanager
    def __call__(self, label):
        t = time.perf_counter()
        yield
        self.out(f"  {label:<58} {(time.perf_counter() - t) * 1e3:9.1f} ms")


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
    from whilst.lowering import (CompileError, compile_text, export, prepare,
                                 target_metadata)
    from whilst.runtime.seal import seal

    chosen = list(dict.fromkeys(args.target or ["llvm-cpu"]))
    gpu_arch = gpu_arch_option(args.gpu_arch, chosen)
    out(f"whilst compile {args.function} -> {args.output}")
    stage = _Stages(out)
    with stage(f"import {args.function.rpartition(':')[0]}"):
        fns, path = targets(args.function, args.arg, args.grad)
    exports = []
    for t in fns:
        with stage(f"export {t.name} to StableHLO"):
            exports.append(run_traced(t, path, "exporting",
                                      lambda t=t: export(t.fn, *t.args, name=t.name)))
    meta = target_metadata(chosen, args.cpu, gpu_arch)
    with stage(f"prepare for IREE ({len(exports)} function{'s' * (len(exports) > 1)})"):
        try:
            text = prepare(exports, targets=meta)
        except Exception as e:  # the MLIR bindings raise their own error types
            raise CLIError(f"IREE cannot read the exported StableHLO: {e}\nThe function uses "
                           f"an operation IREE does not support (jnp.linalg, for example, "
                           f"lowers to LAPACK calls).") from None
    if args.emit_mlir:
        os.makedirs(args.emit_mlir, exist_ok=True)
        for e in exports:
            _write(os.path.join(args.emit_mlir, f"{e.name}.stablehlo.mlir"), e.text)
        _write(os.path.join(args.emit_mlir, "module.mlir"), text)
        out(f"  wrote StableHLO of {', '.join(e.name for e in exports)} and the prepared "
            f"module.mlir to {args.emit_mlir}/")
    described = ", ".join(f"{m['name']}" + (f" ({m['arch']})" if m["arch"] else "")
                          for m in meta)
    with stage(f"iree-compile for {described}"):
        try:
            data = seal(compile_text(text, targets=chosen, cpu=args.cpu, gpu_arch=gpu_arch))
        except CompileError as e:
            hint = ("" if args.emit_mlir else "\nAdd --emit-mlir DIR to keep the module given "
                    "to iree-compile.")
            raise CLIError(f"{e}{hint}") from None
    try:
        with open(args.output, "wb") as f:
            f.write(data)
    except OSError as e:
        raise CLIError(f"cannot write {args.output!r}: {e.strerror}.") from None
    out(f"wrote {args.output} ({len(data) / 1024:.1f} KiB): "
        f"functions {', '.join(e.name for e in exports)}; targets {described}")
    for e in exports:
        out(f"  {describe_call(e.name, e.signature)}")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
