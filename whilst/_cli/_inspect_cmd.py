"""`whilst inspect`: a module's functions, pytree signatures and targets (no jax)."""
from __future__ import annotations

import shlex

from whilst._cli._errors import CLIError
from whilst._cli._leaves import describe_call, describe_dims, file_name, input_paths, leaf_paths
from whilst.runtime import signature as sig


def main(args, out=print) -> None:
    from whilst.runtime import LoadError, describe

    try:
        info = describe(args.module)
    except LoadError as e:
        raise CLIError(f"{args.module}: {e}") from None
    except OSError as e:
        raise CLIError(str(e)) from None
    seal = ("whilst seal verified (SHA-256)" if info.sealed
            else "no whilst seal (not compiled by whilst); its CRC-32s verified")
    out(f"{args.module}: {info.size / 1024:.1f} KiB, {seal}")
    out("  the checksums detect damage, not tampering: a .vmfb contains native code, so "
        "load only modules from sources you trust")
    out(f"targets: {info.describe_targets()}")
    driver = info.drivers[0] if info.drivers else "local-sync"
    for name, s in info.functions.items():
        out("")
        if s is None:
            out(f"function {name} (no whilst signature)")
            continue
        out(f"function {describe_call(name, s)}")
        in_paths = input_paths(s)
        out("  inputs (one --input .npy each, in this order):")
        for k, (p, a) in enumerate(zip(in_paths, s["input_avals"])):
            out(f"    {k}  {p:<20} {sig.format_aval(a)}{_passed_as(a)}")
        out("  outputs:")
        for k, (p, a) in enumerate(zip(leaf_paths(s["outputs"], "result"), s["output_avals"])):
            out(f"    {k}  {p:<20} {sig.format_aval(a)}{_passed_as(a)}")
        dims = describe_dims(s)
        if dims:
            out(f"  symbolic dimensions: {', '.join(dims)} (any size >= 1, the same size "
                f"wherever a name appears)")
        files = [f"--input=@{file_name(p)}.npy" for p in in_paths]
        cmd = ["iree-run-module", f"--module={args.module}", f"--device={driver}",
               f"--function={name}", *files]
        out("  equivalent iree-run-module command line:")
        out("    " + " ".join(shlex.quote(c) for c in cmd))


def _passed_as(aval) -> str:
    """What a leaf the module passes as another dtype says (`iree-run-module` takes and
    gives that dtype; `whilst run` converts)."""
    stored = sig.stored_dtype(aval)
    return "" if stored == aval["dtype"] else f"  (passed as {stored})"
