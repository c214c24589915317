"""`whilst.compile`: export, prepare and compile functions into one IREE module, in
stages that `whilst compile` (the command) calls one by one and times."""
from __future__ import annotations

import os
import time

from whilst import _cache
from whilst._files import write_file
from whilst._stages import Stages
from whilst.lowering import (
    Exported, compile_module, describe_flags, export, flag_sets, has_aggressive_fusion,
    has_loops_in_dispatch, prepare, target_metadata)
from whilst.runtime.seal import seal


class Compiled:
    """A compiled IREE module: `bytes(c)` or `c.data` are the `.vmfb` contents
    (an IREE module followed by a checksum the whilst runtime verifies, which
    IREE's own tools ignore).

    Attributes:
      stages: `[(label, seconds), ...]` of the stages that made it; the last is
        "iree-compile for ..." or, from the compile cache, "compile cache hit for ...".
      flags: the iree-compile flags it was compiled with (one of
        `whilst.lowering.flag_sets`; its module text is `source_for(text, flags)`).
    """

    def __init__(self, data: bytes, targets: tuple[str, ...], functions: tuple[str, ...],
                 stages: list[tuple[str, float]] = (), flags: tuple[str, ...] = ()):
        self.data = data
        self.targets = targets
        self.functions = functions
        self.stages = list(stages)
        self.flags = tuple(flags)

    def __bytes__(self) -> bytes:
        return self.data

    def __repr__(self):
        return (f"<whilst.Compiled {len(self.data)} bytes, functions {list(self.functions)}, "
                f"targets {list(self.targets)}>")

    @property
    def cache_hit(self) -> bool:
        return any(label.startswith(_CACHE_HIT) for label, _ in self.stages)

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the module to a `.vmfb` file, atomically and never through a link.

        Raises:
          FileExistsError: `path` exists and `overwrite` is false.
        """
        try:
            write_file(path, self.data, force=overwrite)
        except FileExistsError:
            raise FileExistsError(f"save: {os.fspath(path)!r} exists; pass overwrite=True to "
                                  f"replace it.") from None

    def load(self, driver: str = "local-sync"):
        """Load it with the embedded runtime (`whilst.runtime.load`)."""
        from whilst.runtime import load
        return load(self.data, driver=driver)


_CACHE_HIT = "compile cache hit"


def prepare_stage(exports, targets, cpu="host", gpu_arch=None, stages=None) -> str:
    """Stage 2: merge `Exported` functions into one module text for iree-compile."""
    names = [e.name for e in exports]
    if len(set(names)) != len(names):
        raise ValueError(f"compile: exported functions need distinct names; found {names}.")
    stages = stages or Stages()
    with stages(f"prepare for IREE ({len(names)} function{'s' * (len(names) > 1)})"):
        return prepare(exports, targets=target_metadata(targets, cpu, gpu_arch))


def compile_stage(text: str, functions, targets, cpu="host", gpu_arch=None, cache=None,
                  stages=None, loops_in_dispatch=True) -> Compiled:
    """Stage 3: iree-compile `text` (or take it from the compile cache) and seal it.

    Cache entries are keyed by the flags they were compiled with: the first of
    `flag_sets` that has an entry is used. A module compiled without aggressive
    fusion (`compile_module`'s fallback) says so, and why, in its last stage's label.
    """
    stages = stages or Stages()
    where = _cache.directory(cache)
    tried = flag_sets(targets, cpu, gpu_arch, loops_in_dispatch)
    described = ", ".join(f"{m['name']}" + (f" ({m['arch']})" if m["arch"] else "")
                          for m in target_metadata(targets, cpu, gpu_arch))
    if "vulkan-spirv" in targets and {"cuda", "rocm"} & set(targets):
        described += SHARED_FUSION_NOTE
    t = time.perf_counter()
    for flags in tried:
        cached = _cache.lookup(where, _cache.key(text, flags))
        if cached is not None:
            data, how = cached
            stages.record(_hit_label(how, described, flags == tried[0] or
                                     has_aggressive_fusion(flags)),
                          time.perf_counter() - t)
            return Compiled(data, tuple(targets), tuple(functions), stages.done, flags)
    with stages(f"{IREE_COMPILE} for {described}") as stage:
        failures = []

        def fallback(reason, flags):
            failures.append(reason)
            stage.relabel(f"{IREE_COMPILE} for {described} with {describe_flags(flags)} "
                          f"({'; '.join(failures)})")

        data, flags = compile_module(text, targets=targets, cpu=cpu, gpu_arch=gpu_arch,
                                     on_fallback=fallback, loops_in_dispatch=loops_in_dispatch)
        if not failures and has_loops_in_dispatch(flags):
            stage.relabel(f"{IREE_COMPILE} for {described} with {describe_flags(flags)}")
        data = seal(data)
    _cache.store(where, _cache.key(text, flags), data, stage.label)
    return Compiled(data, tuple(targets), tuple(functions), stages.done, flags)


def _hit_label(how, described, first):
    """The label of a cache hit: what the compile that made the entry said (`how`),
    with "compile cache hit" for "iree-compile"; for an entry without it, whether it
    was made by the first flag set tried."""
    if how is not None and how.startswith(f"{IREE_COMPILE} for "):
        return _CACHE_HIT + how[len(IREE_COMPILE):]
    return f"{_CACHE_HIT} for {described}" + ("" if first else
                                              f"{FALLBACK_NOTE} {_CACHED_FALLBACK}")


IREE_COMPILE = "iree-compile"
FALLBACK_NOTE = " with default fusion"
# `flag_sets` compiles modules with a vulkan-spirv target without aggressive fusion, and
# iree-compile's fusion flag holds for every target of the module.
SHARED_FUSION_NOTE = (" (default fusion for every target, since vulkan-spirv is one: cuda or "
                      "rocm in a module of its own forms fewer kernels per loop iteration)")
_CACHED_FALLBACK = ("(cached when aggressive fusion failed; cache=False or --no-cache "
                    "compiles it again and says why)")


def compile(fn_or_export, *example_args, target="llvm-cpu", cpu="host", gpu_arch=None,
            name="main", cache=None, progress=None, loops_in_dispatch=True) -> Compiled:
    """Compile a function (or an `Exported`, or a list of them) for IREE.

    `whilst.compile(f, x)` runs three stages: `export(f, x)`, IREE preparation
    (loop-carried buffers in place, signature metadata; `prepare_stage`) and
    `iree-compile` (`compile_stage`), whose result is cached (see `whilst._cache`).

    Args:
      fn_or_export: a function, an `Exported`, or a list of `Exported` with
        distinct names (one module exporting each).
      example_args: example inputs or `jax.ShapeDtypeStruct`s (for a function).
      target: "llvm-cpu", "vulkan-spirv", "cuda", "rocm", or a sequence of them.
      cpu: the llvm-cpu target CPU ("host", "generic" or an LLVM CPU name).
      gpu_arch: GPU architecture (e.g. "sm_80", "gfx942") for every GPU target, or a
        dict {target: arch}; a default per target. One module compiled for several
        targets carries an executable for each and runs on any one of them.
      name: the function's name when a function is given (a Python identifier).
      cache: None (the default cache directory, `$WHILST_CACHE_DIR`), False (no
        cache) or a directory.
      progress: called as `progress(label, seconds, done)` when each stage starts
        (`done` False), changes what it does (a fallback) and finishes (`done`
        True, its duration in seconds; a compile cache hit is reported only so).
        The stages are also logged at INFO level to the `whilst` logger, silent
        unless the application configures logging.
      loops_in_dispatch: for a module for llvm-cpu, cuda or both, first try to run
        each of its small loops whole inside one dispatch (`whilst.lowering.
        _iree_loops_in_dispatch`: loops over a few numbers, such as solvers'; on
        cuda in one thread; the others are stepped from the host), then the usual
        flag sets. False steps every loop from the host, as on Vulkan and ROCm.

    Returns:
      A `Compiled`; its `stages` lists each stage with its duration.

    Raises:
      whilst.CompileError: iree-compile failed (its diagnostics are kept), or would
        make a module that cannot run (a dispatch over the runtime's binding limit).
    """
    stages = Stages(progress)
    targets = (target,) if isinstance(target, str) else tuple(target)
    if isinstance(fn_or_export, Exported):
        exports = [fn_or_export]
    elif isinstance(fn_or_export, (list, tuple)):
        exports = list(fn_or_export)
    else:
        with stages(f"export {name} to StableHLO"):
            exports = [export(fn_or_export, *example_args, name=name, targets=targets)]
    text = prepare_stage(exports, targets, cpu, gpu_arch, stages)
    return compile_stage(text, [e.name for e in exports], targets, cpu, gpu_arch, cache,
                         stages, loops_in_dispatch)
