"""`whilst.compile`: export, prepare and compile functions into one IREE module."""
from __future__ import annotations

import os

from whilst.lowering import Exported, compile_text, export, prepare, target_metadata
from whilst.runtime.seal import seal


class Compiled:
    """A compiled IREE module: `bytes(c)` or `c.data` are the `.vmfb` contents
    (an IREE module followed by a checksum the whilst runtime verifies, which
    IREE's own tools ignore)."""

    def __init__(self, data: bytes, targets: tuple[str, ...], functions: tuple[str, ...]):
        self.data = data
        self.targets = targets
        self.functions = functions

    def __bytes__(self) -> bytes:
        return self.data

    def __repr__(self):
        return (f"<whilst.Compiled {len(self.data)} bytes, functions {list(self.functions)}, "
                f"targets {list(self.targets)}>")

    def save(self, path: str | os.PathLike) -> None:
        """Write the module to a `.vmfb` file."""
        with open(path, "wb") as f:
            f.write(self.data)

    def load(self, driver: str = "local-sync"):
        """Load it with the embedded runtime (`whilst.runtime.load`)."""
        from whilst.runtime import load
        return load(self.data, driver=driver)


def compile(fn_or_export, *example_args, target="llvm-cpu", cpu="host", gpu_arch=None,
            name="main") -> Compiled:
    """Compile a function (or an `Exported`, or a list of them) for IREE.

    `whilst.compile(f, x)` is `export(f, x)` followed by IREE preparation (loop-
    carried buffers in place, signature metadata) and `iree-compile`.

    Args:
      fn_or_export: a function, an `Exported`, or a list of `Exported` with
        distinct names (one module exporting each).
      example_args: example inputs or `jax.ShapeDtypeStruct`s (for a function).
      target: "llvm-cpu", "vulkan-spirv", "cuda", "rocm", or a sequence of them.
      cpu: the llvm-cpu target CPU ("host", "generic" or an LLVM CPU name).
      gpu_arch: GPU architecture (e.g. "sm_80", "gfx942") for every GPU target, or a
        dict {target: arch}; a default per target. One module compiled for several
        targets carries an executable for each and runs on any one of them.
      name: the function's name when a function is given.

    Raises:
      whilst.CompileError: iree-compile failed (its diagnostics are kept).
    """
    if isinstance(fn_or_export, Exported):
        exports = [fn_or_export]
    elif isinstance(fn_or_export, (list, tuple)):
        exports = list(fn_or_export)
    else:
        exports = [export(fn_or_export, *example_args, name=name)]
    names = [e.name for e in exports]
    if len(set(names)) != len(names):
        raise ValueError(f"compile: exported functions need distinct names; found {names}.")
    targets = (target,) if isinstance(target, str) else tuple(target)
    text = prepare(exports, targets=target_metadata(targets, cpu, gpu_arch))
    data = seal(compile_text(text, targets=targets, cpu=cpu, gpu_arch=gpu_arch))
    return Compiled(data, targets, tuple(names))
