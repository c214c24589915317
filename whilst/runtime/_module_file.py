"""Reading a `.vmfb` file: its seal checked (`whilst.runtime.seal`), the IREE module
parsed, and the whilst metadata validated, all without creating a device.

Modules without a seal (from `iree-compile` itself) are checked by the CRC-32s
of their ZIP entries (`_zip_check`) and by IREE's flatbuffer verifier.
"""
from __future__ import annotations

import dataclasses
import json
import os

from whilst._files import FileTooLargeError, NotRegularFileError, read_regular
from whilst.runtime import signature as sig
from whilst.runtime._errors import LoadError
from whilst.runtime._zip_check import check_crcs
from whilst.runtime.seal import is_sealed, unseal
from whilst.runtime.targets import validate_metadata


# The largest `.vmfb` file read: enough for any module whilst compiles, and a bound
# on what a damaged or hostile path can make the reader allocate.
MODULE_SIZE_LIMIT = 4 << 30


def read_bytes(path_or_bytes) -> bytes:
    """The bytes of a module given as a path (str or os.PathLike) or as bytes.

    Raises:
      OSError: the path cannot be read, or is not a regular file of at most
        MODULE_SIZE_LIMIT bytes (FileNotFoundError when it cannot be opened).
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes)
    if isinstance(path_or_bytes, (str, os.PathLike)):
        try:
            return read_regular(path_or_bytes, MODULE_SIZE_LIMIT)
        except NotRegularFileError as e:
            raise NotRegularFileError(path_or_bytes, e.kind,
                                      "give the path of a .vmfb file.") from None
        except FileTooLargeError:
            raise
        except OSError as e:
            raise FileNotFoundError(f"cannot read module {os.fspath(path_or_bytes)!r}: "
                                    f"{e.strerror}.") from None
    raise TypeError(f"expected a path or bytes; found {type(path_or_bytes).__name__}.")


def parse(instance, data: bytes):
    """`data` (unsealed) as an `iree.runtime.VmModule` of `instance`, or a LoadError."""
    import iree.runtime as rt

    try:
        return rt.VmModule.copy_buffer(instance, data)
    except Exception as e:  # IREE maps its status codes to several exception types
        raise LoadError(
            f"not a valid IREE module (.vmfb), or a truncated or corrupted one: {e}. "
            f"Recompile it with `whilst compile`.") from None


@dataclasses.dataclass(frozen=True)
class ModuleInfo:
    """What a module says about itself.

    Attributes:
      functions: exported function name -> its whilst signature (see
        `whilst.runtime.signature`), or None for a function whilst did not export.
      targets: `[{"name", "arch", "drivers"}, ...]` the module was compiled for,
        or None when it does not record them.
      sealed: whether the module carries a whilst seal (checked on reading).
      size: the file's size in bytes.
    """
    functions: dict
    targets: list | None
    sealed: bool
    size: int

    @property
    def drivers(self) -> list[str] | None:
        """The runtime drivers that can run the module, or None when unknown."""
        if self.targets is None:
            return None
        return list(dict.fromkeys(d for t in self.targets for d in t["drivers"]))

    def describe_targets(self) -> str:
        if self.targets is None:
            return "unknown (the module records no targets)"
        return ", ".join(_describe_target(t) for t in self.targets)


def _describe_target(target: dict) -> str:
    arch = f" ({target['arch']})" if target["arch"] else ""
    return f"{target['name']}{arch} -> driver {' or '.join(target['drivers'])}"


def describe(path_or_bytes) -> ModuleInfo:
    """Read a module's functions, signatures and targets without creating a device.

    Raises:
      LoadError: the module is not a valid, intact `.vmfb`.
      OSError: the path cannot be read (see `read_bytes`).
    """
    data = read_bytes(path_or_bytes)
    return info(data, parse_module(data))


def parse_module(data: bytes):
    """The unsealed `VmModule` of `data` in a VM instance of its own."""
    import iree.runtime as rt

    return parse(rt.VmInstance(), checked_module(data))


def checked_module(data: bytes) -> bytes:
    """The IREE module inside `data`: its seal checked if it has one, else its CRCs.

    Raises:
      LoadError: the module was changed or damaged.
    """
    if is_sealed(data):
        return unseal(data)
    check_crcs(data)
    return data


def info(data: bytes, vm_module) -> ModuleInfo:
    """The `ModuleInfo` of `data`, already parsed as `vm_module`."""
    functions, targets = {}, None
    for name in vm_module.function_names:
        if name.startswith("__"):
            continue
        reflection = vm_module.lookup_function(name).reflection
        functions[name] = (_metadata(name, reflection[sig.REFLECTION_KEY], sig.validate)
                           if sig.REFLECTION_KEY in reflection else None)
        if sig.TARGETS_KEY in reflection:
            targets = _metadata(name, reflection[sig.TARGETS_KEY], validate_metadata)
    return ModuleInfo(functions=functions, targets=targets, sealed=is_sealed(data),
                      size=len(data))


def _metadata(function: str, text: str, validate):
    """Reflection metadata `text` parsed and validated, or a LoadError."""
    try:
        return validate(json.loads(text))
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise LoadError(f"the whilst metadata of function {function!r} is damaged ({e}). "
                        f"Recompile the module with `whilst compile`.") from None
