"""`whilst run`: run a module on `.npy` inputs with the embedded runtime (no jax)."""
from __future__ import annotations

import os
import time

import numpy as np

from whilst._cli._errors import CLIError
from whilst._cli._leaves import leaf_paths
from whilst.runtime import signature as sig


def choose_function(module, name: str | None):
    """The function named `name`, else `main`, else the module's first function."""
    names = list(module.functions)
    if name is None:
        name = "main" if "main" in names else names[0]
    if name not in module.functions:
        raise CLIError(f"the module has no function {name!r}; it exports {names}.")
    return module.functions[name]


def read_input(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CLIError(f"--input {path!r}: no such file.") from None
    except ValueError as e:
        raise CLIError(f"--input {path!r} is not a plain .npy array ({e}); save it with "
                       f"numpy.save from an array of numbers (pickled objects are refused)."
                       ) from None
    except OSError as e:
        raise CLIError(f"--input {path!r} cannot be read: {e}.") from None


def _stats(a: np.ndarray) -> str:
    if a.size == 0:
        return "empty"
    if a.size == 1:
        return f"= {a.reshape(()).item()!r}"
    if a.dtype.kind in "fiu":
        return f"min {a.min():.6g}  max {a.max():.6g}  mean {a.mean():.6g}"
    if a.dtype.kind == "b":
        return f"{int(a.sum())} of {a.size} true"
    return ""


def main(args, out=print) -> None:
    from whilst.runtime import LoadError, load

    try:
        module = load(args.module, driver=args.driver)
    except (LoadError, FileNotFoundError) as e:
        raise CLIError(f"{args.module}: {e}") from None
    fn = choose_function(module, args.function)
    inputs = [read_input(p) for p in args.input or []]
    s = fn.signature
    if s is None:
        arguments = inputs
    else:
        paths = leaf_paths(s["inputs"], "args")
        if len(inputs) != len(paths):
            want = ", ".join(f"{p}: {sig.format_aval(a)}"
                             for p, a in zip(paths, s["input_avals"]))
            raise CLIError(f"{fn.name} takes {len(paths)} input(s) ({want}); "
                           f"{len(inputs)} --input file(s) given, one .npy per input, in order.")
        arguments = sig.unflatten(s["inputs"], inputs)
    t = time.perf_counter()
    try:
        result = fn(*arguments)
    except ValueError as e:
        raise CLIError(f"{e} (inputs: {', '.join(args.input or [])})") from None
    except RuntimeError as e:
        raise CLIError(f"{fn.name} failed on driver {args.driver}: {e}") from None
    elapsed = time.perf_counter() - t
    if s is None:
        results = [("result", r) for r in (result if isinstance(result, list) else [result])]
    else:
        results = sig.flatten(s["outputs"], result, "result")
    out(f"{fn.name} on {args.driver}: {len(inputs)} input(s), {len(results)} output(s), "
        f"{elapsed * 1e3:.2f} ms")
    if args.output:
        os.makedirs(args.output, exist_ok=True)
    for k, (path, value) in enumerate(results):
        value = np.asarray(value)
        line = (f"  {path:<16} {sig.format_aval({'shape': value.shape, 'dtype': value.dtype.name}):<14}"
                f" {_stats(value)}")
        if args.output:
            file = os.path.join(args.output, f"output_{k}.npy")
            np.save(file, value, allow_pickle=False)
            line += f"  -> {file}"
        out(line)
