"""Loading compiled modules and calling their functions with pytrees of numpy arrays.

Needs only `iree-base-runtime` and numpy: no JAX, no compiler.
"""
from __future__ import annotations

import threading

import numpy as np

from whilst.runtime import signature as sig
from whilst.runtime._errors import LoadError
from whilst.runtime._inputs import convert, convert_untyped
from whilst.runtime._module_file import checked_module, info, parse, read_bytes
from whilst.runtime.targets import DRIVERS


def _iree():
    import iree.runtime as rt
    return rt


class RunError(RuntimeError):
    """A compiled function failed inside the IREE runtime (an IREE status such as
    OUT_OF_RANGE or a null buffer reference), not because of its inputs."""


class Function:
    """One exported function: `fn(*args)` takes and returns the original pytrees."""

    def __init__(self, module: "Module", name: str, signature: dict | None):
        self._module = module
        self.name = name
        self.signature = signature
        # Per input leaf, what every call checks against: (dtype, shape, written form).
        self._leaf_specs = None if signature is None else [
            (np.dtype(aval["dtype"]), tuple(aval["shape"]), sig.format_aval(aval))
            for aval in signature["input_avals"]]

    def __repr__(self):
        if self.signature is None:
            return f"<whilst function {self.name} (no whilst signature)>"
        s = self.signature
        return (f"<whilst function {self.name}{sig.describe_tree(s['inputs'], s['input_avals'])}"
                f" -> {sig.describe_tree(s['outputs'], s['output_avals'])}>")

    def __call__(self, *args, **kwargs):
        """Call with the exported function's arguments, positionally or by the names
        `arg_names` lists; inputs follow the casting rule of `whilst.runtime._inputs`."""
        flat = self._flatten_inputs(self._bind(args, kwargs))
        outs = self._module._invoke(self.name, flat)
        outs = [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]
        if self.signature is None:
            return outs[0] if len(outs) == 1 else outs
        return sig.unflatten(self.signature["outputs"], outs)

    @property
    def arg_names(self) -> list[str] | None:
        """The exported function's argument names, when the module records them."""
        return None if self.signature is None else self.signature.get("arg_names")

    def _bind(self, args, kwargs) -> tuple:
        if not kwargs:
            return args
        names = self.arg_names
        if names is None:
            raise TypeError(f"{self.name}: this module records no argument names; pass the "
                            f"arguments by position.")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"{self.name}: no argument named {unknown[0]!r}; its arguments "
                            f"are {names}.")
        twice = [n for n in names[:len(args)] if n in kwargs]
        if twice:
            raise TypeError(f"{self.name}: argument {twice[0]!r} given by position and by "
                            f"name.")
        missing = [n for n in names[len(args):] if n not in kwargs]
        if missing:
            raise TypeError(f"{self.name}: missing argument(s) {missing}; its arguments are "
                            f"{names}.")
        return (*args, *(kwargs[n] for n in names[len(args):]))

    def _flatten_inputs(self, args):
        if self.signature is None:
            return [convert_untyped(a, f"args[{k}]") for k, a in enumerate(args)]
        s = self.signature
        try:
            leaves = sig.flatten(s["inputs"], tuple(args), "args")
        except ValueError as e:
            raise ValueError(f"{self.name}: inputs do not match the module's signature "
                             f"{sig.describe_tree(s['inputs'], s['input_avals'])}: {e}") from None
        bindings: dict[str, tuple[int, str]] = {}
        flat = []
        for (path, value), aval, (dtype, shape, written) in zip(leaves, s["input_avals"],
                                                                self._leaf_specs):
            arr = convert(value, dtype, f"{self.name}: {path}", written)
            if arr.shape != shape:  # symbolic dims never compare equal: checked below
                self._check_shape(path, arr.shape, aval, bindings)
            flat.append(arr)
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

    Safe to call from several threads: calls into one module are serialised
    by a lock (an IREE VM context is not re-entrant); load the module once per
    thread to run calls in parallel.

    Attributes:
      driver: the runtime driver the module runs on.
      info: what the module says about itself (`ModuleInfo`: signatures, targets).
      functions: name -> `Function`.
    """

    def __init__(self, data: bytes, driver: str):
        rt = _iree()
        body = checked_module(data)
        self.info = info(data, parse(rt.VmInstance(), body))
        targets = self.info.describe_targets()
        if self.info.drivers is not None and driver not in self.info.drivers:
            raise LoadError(
                f"the module was compiled for {targets}; it cannot run with driver "
                f"{driver!r}. Load it with driver={self.info.drivers[0]!r}, or recompile it "
                f"for this device's target (`whilst compile --target`).")
        available = rt.query_available_drivers()
        if driver not in available:
            raise LoadError(f"driver {driver!r} is not built into this IREE runtime; its "
                            f"drivers: {sorted(available)}. The module's targets: {targets}.")
        try:
            self._config = rt.Config(driver)
        except Exception as e:  # IREE maps its status codes to several exception types
            raise LoadError(f"driver {driver!r} found no usable device: {e}. Drivers built "
                            f"into this IREE runtime: {sorted(available)}; the module's "
                            f"targets: {targets}.") from None
        self._vm_module = parse(self._config.vm_instance, body)
        try:
            self._context = rt.SystemContext(vm_modules=[self._vm_module], config=self._config)
        except Exception as e:
            raise LoadError(
                f"the module cannot run with driver {driver!r}: {e}. The module's targets: "
                f"{targets}. Choose the driver of one of them, or recompile it for this "
                f"device.") from None
        self.driver = driver
        self._lock = threading.Lock()
        bound = self._context.modules[self._vm_module.name]
        self.functions = {name: Function(self, name, signature)
                          for name, signature in self.info.functions.items()}
        self._calls = {name: bound[name] for name in self.functions}

    def _invoke(self, name, flat):
        with self._lock:
            try:
                out = self._calls[name](*flat)
            except (IndexError, RuntimeError, ValueError) as e:  # IREE status codes
                raise RunError(
                    f"{name}: the IREE runtime failed while running this function on "
                    f"{self.driver!r}: {str(e).splitlines()[0] if str(e) else e!r}. The "
                    f"inputs matched its signature, so the compiled module itself cannot "
                    f"run: please report it with the program that produced it (whilst "
                    f"refuses the loop forms known to fail on IREE 3.13).") from e
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

    def __call__(self, *args, **kwargs):
        """Call the module's only function (or `main`)."""
        if "main" in self.functions:
            return self.functions["main"](*args, **kwargs)
        if len(self.functions) == 1:
            return next(iter(self.functions.values()))(*args, **kwargs)
        raise TypeError(f"this module exports {sorted(self.functions)}; call one by name")


def load(path_or_bytes, driver: str = "local-sync") -> Module:
    """Load a compiled module from a `.vmfb` path or its bytes.

    Args:
      path_or_bytes: a path (str or os.PathLike) or the module's bytes.
      driver: "local-sync" (default), "local-task", "cuda", "vulkan" or "hip".

    Returns:
      A `Module` whose functions take and return the pytrees they were exported with.

    Raises:
      LoadError: the module is truncated or corrupted, or cannot run with
        `driver` (the message lists the available drivers and the module's targets).
      FileNotFoundError: the path cannot be read.
    """
    if driver not in DRIVERS:
        raise ValueError(f"load: driver must be one of {DRIVERS}; found {driver!r}.")
    return Module(read_bytes(path_or_bytes), driver)
