"""`whilst run`: run a module on `.npy` inputs with the embedded runtime (no jax)."""
from __future__ import annotations

import io
import os
import re
import time

import numpy as np

from whilst._cli._errors import CLIError
from whilst._cli._leaves import input_paths
from whilst._cli._output import check_output, output_dir, write_output
from whilst._files import NotRegularFileError, open_regular
from whilst.runtime import signature as sig

_OUTPUT = re.compile(r"output_(\d+)\.npy")


def choose_function(module, name: str | None):
    """The function named `name`, else `main`, else the module's first function."""
    names = list(module.functions)
    if name is None:
        name = "main" if "main" in names else names[0]
    if name not in module.functions:
        raise CLIError(f"the module has no function {name!r}; it exports {names}.")
    return module.functions[name]


def read_input(path: str) -> np.ndarray:
    """The array in the `.npy` file `path`, its header checked against the file's size
    before anything is allocated; a one-line CLIError for anything else."""
    fmt = np.lib.format
    how = "save each input with numpy.save(path, array) (one .npy file per input)"
    try:
        with open_regular(path) as f:
            if f.read(6) != b"\x93NUMPY":
                f.seek(0)
                kind = ("an .npz archive" if f.read(4) == b"PK\x03\x04"
                        else "not a .npy file (no NumPy header)")
                raise CLIError(f"--input {path!r} is {kind}; {how}.")
            f.seek(0)
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise CLIError(f"--input {path!r}: .npy format version {version} is not "
                               f"supported; {how}.")
            read_header = (fmt.read_array_header_1_0 if version == (1, 0)
                           else fmt.read_array_header_2_0)
            shape, _, dtype = read_header(f)
            if dtype.hasobject or dtype.kind not in "biufc":
                raise CLIError(f"--input {path!r} holds {dtype} data, not numbers; {how}.")
            need = int(np.prod(shape, dtype=object)) * dtype.itemsize
            have = os.fstat(f.fileno()).st_size - f.tell()
            if need != have:
                raise CLIError(f"--input {path!r}: its header says {dtype}{list(shape)} "
                               f"({need} bytes), but the file holds {have} bytes of data; it "
                               f"is truncated or damaged. {how[0].upper()}{how[1:]}.")
            f.seek(0)
            return np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise CLIError(f"--input {path!r}: no such file.") from None
    except NotRegularFileError as e:
        raise CLIError(f"--input {path!r} is a {e.kind}, not a regular file; {how}.") from None
    except ValueError as e:  # a malformed header
        raise CLIError(f"--input {path!r} is not a valid .npy file ({e}); {how}.") from None
    except OSError as e:
        raise CLIError(f"--input {path!r} cannot be read: {e.strerror or e}.") from None


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
    except LoadError as e:
        raise CLIError(f"{args.module}: {e}") from None
    except OSError as e:
        raise CLIError(str(e)) from None
    fn = choose_function(module, args.function)
    inputs = [read_input(p) for p in args.input or []]
    s = fn.signature
    if s is None:
        arguments = inputs
    else:
        paths = input_paths(s)
        if len(inputs) != len(paths):
            want = ", ".join(f"{p}: {sig.format_aval(a)}"
                             for p, a in zip(paths, s["input_avals"]))
            raise CLIError(f"{fn.name} takes {len(paths)} input(s) ({want}); "
                           f"{len(inputs)} --input file(s) given, one .npy per input, in order.")
        arguments = sig.unflatten(s["inputs"], inputs)
        _output_files(args, sig.count_leaves(s["outputs"]), check_only=True)
    t = time.perf_counter()
    try:
        result = fn(*arguments)
    except (TypeError, ValueError) as e:
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
    files = _output_files(args, len(results))
    for k, (path, value) in enumerate(results):
        value = np.asarray(value)
        line = (f"  {path:<16} {sig.format_aval({'shape': value.shape, 'dtype': value.dtype.name}):<14}"
                f" {_stats(value)}")
        if files:
            buffer = io.BytesIO()
            np.save(buffer, value, allow_pickle=False)
            write_output(files[k], buffer.getvalue(), args.force, "--output")
            line += f"  -> {files[k]}"
        out(line)


def _output_files(args, n: int, check_only: bool = False) -> list[str]:
    """`output_0.npy` ... in --output, refusing (without --force) a directory that holds
    any `output_K.npy`; with --force, those beyond the `n` new ones are removed, so no
    stale output of an earlier run is left beside the new ones. `check_only`: refuse
    before the run what could not be written or removed (a FIFO named output_1.npy),
    remove nothing."""
    if not args.output:
        return []
    directory = output_dir(args.output, "--output")
    existing = sorted(name for name in os.listdir(directory) if _OUTPUT.fullmatch(name))
    if existing and not args.force:
        raise CLIError(f"--output {directory!r} already holds {', '.join(existing)}; pass "
                       f"--force to replace them, or choose an empty directory.")
    files = [os.path.join(directory, f"output_{k}.npy") for k in range(n)]
    if check_only:      # neither written nor removed may be anything but a regular file
        for path in files + [os.path.join(directory, name) for name in existing]:
            check_output(path, args.force, "--output")
        return files
    for name in existing:
        if int(_OUTPUT.fullmatch(name)[1]) >= n:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError as e:
                raise CLIError(f"--output: cannot remove the stale {name!r} in {directory!r}: "
                               f"{e.strerror or e}.") from None
    return files
