"""Loading compiled modules and calling their functions with pytrees of numpy arrays.

Needs only `iree-base-runtime` and numpy: no JAX, no compiler.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from whilst.runtime import _signature as sig

DRIVERS = ("local-sync", "local-task", "cuda", "vulkan", "hip")


class LoadError(RuntimeError):
    """Loading or calling a module failed; the message says why and what to do."""


def _iree():
    import iree.runtime as rt
    return rt


class Function:
    """One exported function: `fn(*args)` takes and returns the original pytrees."""

    def __init__(self, module: "Module", name: str, signature: dict | None):
        self._module = module
        self.name = name
        self.signature = signature

    def __repr__(self):
        if self.signature is None:
            return f"<whilst function {self.name} (no whilst signature)>"
        s = self.signature
        return (f"<whilst function {self.name}{sig.describe_tree(s['inputs'], s['input_avals'])}"
                f" -> {sig.describe_tree(s['outputs'], s['output_avals'])}>")

    def __call__(self, *args):
        flat = self._flatten_inputs(args)
        outs = self._module._invoke(self.name, flat)
        outs = [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]
        if self.signature is None:
            return outs[0] if len(outs) == 1 else outs
        return sig.unflatten(self.signature["outputs"], outs)

    def _flatten_inputs(self, args):
        if self.signature is None:
            return [np.asarray(a) for a in args]
        s = self.signature
        try:
            leaves = sig.flatten(s["inputs"], tuple(args), "args")
        except ValueError as e:
            raise ValueError(f"{self.name}: inputs do not match the module's signature "
                             f"{sig.describe_tree(s['inputs'], s['input_avals'])}: {e}") from None
        bindings: dict[str, tuple[int, str]] = {}
        flat = []
        for (path, value), aval in zip(leaves, s["input_avals"]):
            arr = np.asarray(value)
            want = np.dtype(aval["dtype"])
            if arr.dtype != want:
                if np.can_cast(arr.dtype, want, "same_kind") and arr.ndim == 0 and \
                        not isinstance(value, np.ndarray):
                    arr = arr.astype(want)
                else:
                    raise ValueError(
                        f"{self.name}: {path} has dtype {arr.dtype}, but the module expects "
                        f"{sig.format_aval(aval)}; convert it with .astype({want.name}).")
            self._check_shape(path, arr.shape, aval, bindings)
            flat.append(arr if arr.flags.c_contiguous else arr.copy(order="C"))
        return flat

    def _check_shape(self, path, shape, aval, bindings):
        expected = aval["shape"]
        if len(shape) != len(expected):
            raise ValueError(f"{self.name}: {path} has shape {tuple(shape)}, but the module "
                             f"expects {sig.format_aval(aval)} (rank {len(expected)}).")
        for axis, (got, want) in enumerate(zip(shape, expected)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(
                        f"{self.name}: {path} has shape {tuple(shape)}, but the module "
                        f"expects {sig.format_aval(aval)} (axis {axis} must be {want}).")
                continue
            if got < 1:
                raise ValueError(f"{self.name}: {path} axis {axis} is {got}, but symbolic "
                                 f"dimension {want!r} must be at least 1.")
            if want in bindings and bindings[want][0] != got:
                raise ValueError(
                    f"{self.name}: {path} axis {axis} is {got}, but symbolic dimension "
                    f"{want!r} was bound to {bindings[want][0]} by {bindings[want][1]}; "
                    f"all uses of {want!r} must agree.")
            bindings.setdefault(want, (got, path))


class Module:
    """A loaded `.vmfb`: exported functions as attributes or `module["name"]`.

    Calls are serialised per module with a lock (one IREE context is not
    re-entrant); use one `load` per thread for parallel calls.
    """

    def __init__(self, data: bytes, driver: str):
        rt = _iree()
        available = rt.query_available_drivers()
        if driver not in available:
            raise LoadError(f"driver {driver!r} is not available here; available "
                                f"drivers: {sorted(available)}.")
        try:
            self._config = rt.Config(driver)
        except (RuntimeError, ValueError) as e:
            raise LoadError(f"driver {driver!r} found no usable device: {e}. Available "
                                f"drivers: {sorted(available)}.") from None
        try:
            self._vm_module = rt.VmModule.copy_buffer(self._config.vm_instance, data)
        except (RuntimeError, ValueError) as e:
            raise LoadError(
                f"not a valid IREE module (.vmfb), or a truncated or corrupted one: {e}. "
                f"Recompile it with `whilst compile`.") from None
        try:
            self._context = rt.SystemContext(vm_modules=[self._vm_module], config=self._config)
        except (RuntimeError, ValueError) as e:
            raise LoadError(
                f"the module cannot run with driver {driver!r}: {e}. Compile it for this "
                f"device's target, or choose the driver of a target it was compiled for.") from None
        self.driver = driver
        self._lock = threading.Lock()
        self._bound = self._context.modules[self._vm_module.name]
        self.functions = {}
        for name in self._vm_module.function_names:
            if name.startswith("__"):
                continue
            reflection = self._vm_module.lookup_function(name).reflection
            signature = sig.loads(reflection[sig.REFLECTION_KEY]) if (
                sig.REFLECTION_KEY in reflection) else None
            self.functions[name] = Function(self, name, signature)

    def _invoke(self, name, flat):
        with self._lock:
            out = self._bound[name](*flat)
        if out is None:
            return []
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def __getitem__(self, name) -> Function:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"no function {name!r} in this module; it exports "
                           f"{sorted(self.functions)}") from None

    def __getattr__(self, name) -> Function:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e)) from None

    def __call__(self, *args):
        """Call the module's only function (or `main`)."""
        if "main" in self.functions:
            return self.functions["main"](*args)
        if len(self.functions) == 1:
            return next(iter(self.functions.values()))(*args)
        raise TypeError(f"this module exports {sorted(self.functions)}; call one by name")


def load(path_or_bytes, driver: str = "local-sync") -> Module:
    """Load a compiled module from a `.vmfb` path or its bytes.

    Args:
      path_or_bytes: a path (str or os.PathLike) or the module's bytes.
      driver: "local-sync" (default), "local-task", "cuda", "vulkan" or "hip".

    Returns:
      A `Module` whose functions take and return the pytrees they were exported with.
    """
    if driver not in DRIVERS:
        raise ValueError(f"load: driver must be one of {DRIVERS}; found {driver!r}.")
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
    elif isinstance(path_or_bytes, (str, os.PathLike)):
        try:
            with open(path_or_bytes, "rb") as f:
                data = f.read()
        except OSError as e:
            raise FileNotFoundError(f"load: cannot read module {os.fspath(path_or_bytes)!r}: "
                                    f"{e.strerror}.") from None
    else:
        raise TypeError(f"load: expected a path or bytes; found {type(path_or_bytes).__name__}.")
    return Module(data, driver)
