"""Loading compiled modules and calling their functions with pytrees of numpy arrays.

Needs only `iree-base-runtime` and numpy: no JAX, no compiler.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from whilst.runtime import signature as sig
from whilst.runtime._devices import current, device, is_lost, replace_lost
from whilst.runtime._errors import LoadError
from whilst.runtime._inputs import convert, convert_untyped
from whilst.runtime._module_file import checked_module, info, parse, read_bytes
from whilst.runtime._transfer import DeviceArray, iree_runtime, raw_dtype, to_device, to_host
from whilst.runtime.targets import DRIVERS

_log = logging.getLogger("whilst.runtime")

# How many times a call runs again after its device was lost (lavapipe loses it in a
# third of the calls of some modules, new devices' too: iree_limits/vulkan_device_lost.py).
LOST_DEVICE_RETRIES = 10


class RunError(RuntimeError):
    """A compiled function failed inside the IREE runtime (an IREE status such as
    OUT_OF_RANGE or a null buffer reference), not because of its inputs."""


class Function:
    """One exported function: `fn(*args)` takes and returns the original pytrees.
    It keeps its module loaded; the module does not keep it (no reference cycle, so
    a module and its device go as soon as the last reference does)."""

    def __init__(self, module: "Module", name: str):
        self._module = module
        self.name = name
        self.signature, self._leaf_specs, self._stored, self._output_dtypes = (
            module._specs[name])

    def __repr__(self):
        if self.signature is None:
            return f"<whilst function {self.name} (no whilst signature)>"
        s = self.signature
        return (f"<whilst function {self.name}{sig.describe_tree(s['inputs'], s['input_avals'])}"
                f" -> {sig.describe_tree(s['outputs'], s['output_avals'])}>")

    def __call__(self, *args, **kwargs):
        """Call with the exported function's arguments, positionally or by the names
        `arg_names` lists; inputs follow the casting rule of `whilst.runtime._inputs`
        (a `DeviceArray` from a module loaded with the same driver is used in place).
        Returns the exported function's outputs as numpy arrays."""
        return self._call(args, kwargs, host=True)

    def on_device(self, *args, **kwargs):
        """`fn(*args)`, but its outputs stay on the device: `DeviceArray`s, which a
        later call takes without a copy and `np.asarray` copies to the host."""
        return self._call(args, kwargs, host=False)

    def _call(self, args, kwargs, host: bool):
        outs = self._module._invoke(self.name, self._flat_inputs(args, kwargs),
                                    self._output_dtypes, host)
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

    def _flat_inputs(self, args, kwargs) -> list:
        """The input leaves in order: C-ordered numpy arrays of the module's dtypes,
        or `DeviceArray`s on the module's device."""
        args = self._bind(args, kwargs)
        if self.signature is None:
            return [a if self._on_device(a, f"args[{k}]") else convert_untyped(a, f"args[{k}]")
                    for k, a in enumerate(args)]
        s = self.signature
        try:
            leaves = sig.flatten(s["inputs"], tuple(args), "args")
        except ValueError as e:
            raise ValueError(f"{self.name}: inputs do not match the module's signature "
                             f"{sig.describe_tree(s['inputs'], s['input_avals'])}: {e}") from None
        bindings: dict[str, tuple[int, str]] = {}
        flat = []
        for (path, value), aval, (dtype, shape, written), stored in zip(
                leaves, s["input_avals"], self._leaf_specs, self._stored):
            if self._on_device(value, f"{self.name}: {path}"):
                if value.dtype != dtype or raw_dtype(value.buffer_view) != stored:
                    raise ValueError(f"{self.name}: {path} is a DeviceArray of dtype "
                                     f"{value.dtype}, but the module expects {written}; "
                                     f"DeviceArrays are not converted: pass a numpy array.")
                if value.shape != shape:
                    self._check_shape(path, value.shape, aval, bindings)
                flat.append(value)
                continue
            arr = convert(value, dtype, f"{self.name}: {path}", written)
            if arr.shape != shape:  # symbolic dims never compare equal: checked below
                self._check_shape(path, arr.shape, aval, bindings)
            flat.append(arr if stored == dtype else arr.astype(stored))
        return flat

    def _on_device(self, value, path) -> bool:
        """Whether `value` is a `DeviceArray` on this module's device (a ValueError
        for one on another device)."""
        if not isinstance(value, DeviceArray):
            return False
        if value.device is not self._module.device:
            raise ValueError(f"{path} is a DeviceArray on another device than this module's "
                             f"({self._module.driver!r}); pass np.asarray(it) to copy it.")
        return True

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
      device: its `iree.runtime.HalDevice`, shared by the modules loaded with that
        driver, and released with the last of them and of their `DeviceArray`s
        (`_devices`).
      info: what the module says about itself (`ModuleInfo`: signatures, targets).
      functions: name -> `Function`.
    """

    def __init__(self, data: bytes, driver: str):
        rt = iree_runtime()
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
        self.driver, self._body = driver, body
        try:
            self._attach()
        except LoadError:
            raise
        except Exception as e:  # IREE maps its status codes to several exception types
            raise LoadError(f"driver {driver!r} found no usable device: {e}. Drivers built "
                            f"into this IREE runtime: {sorted(available)}; the module's "
                            f"targets: {targets}.") from None
        self._lock = threading.Lock()
        self._specs = {name: _function_specs(signature)
                       for name, signature in self.info.functions.items()}
        # dtype -> the dtype this module's functions take and return it as.
        self._stored_as = {np.dtype(aval["dtype"]): np.dtype(sig.stored_dtype(aval))
                           for s in self.info.functions.values() if s is not None
                           for aval in (*s["input_avals"], *s["output_avals"])}

    def _attach(self) -> None:
        """Load the module's body into a VM context on its driver's current device."""
        rt = iree_runtime()
        self._held = device(self.driver)
        self.device = self._held.device
        self._config = rt.Config(device=self.device)
        self._vm_module = parse(self._config.vm_instance, self._body)
        try:
            # A VmContext, not `rt.SystemContext`, whose bound modules and the context
            # reference each other: the device would wait for Python's cycle collector.
            self._context = rt.VmContext(
                self._config.vm_instance, [*self._config.default_vm_modules, self._vm_module])
        except Exception as e:
            raise LoadError(
                f"the module cannot run with driver {self.driver!r}: {e}. The module's "
                f"targets: {self.info.describe_targets()}. Choose the driver of one of "
                f"them, or recompile it for this device.") from None
        self._vm_functions = {name: self._vm_module.lookup_function(name)
                              for name in self.info.functions}

    def _invoke(self, name, flat, dtypes, host: bool) -> list:
        """Call `name` with the input leaves `flat`; its outputs as numpy arrays of
        `dtypes` (`host`), or as `DeviceArray`s (None: the buffers' own dtypes).

        A call whose device is lost is run again on a fresh device (`_devices`), up
        to LOST_DEVICE_RETRIES times, unless an input lives on the lost device."""
        with self._lock:
            if self.device is not current(self.driver):  # replaced after a loss
                self._attach()
            for retries_left in range(LOST_DEVICE_RETRIES, -1, -1):
                try:
                    return self._run(name, flat, dtypes, host)
                except RunError as e:
                    if (not retries_left or not is_lost(e)
                            or any(isinstance(leaf, DeviceArray) for leaf in flat)):
                        raise
                    # The cause as text: a log handler that keeps its records (pytest's)
                    # would keep the exception, its frames, this module and its device.
                    _log.warning("%s: the %s device was lost (%s); running the call again "
                                 "on a new device", name, self.driver, str(e.__cause__))
                    replace_lost(self.driver, self.device)
                    self._attach()

    def _run(self, name, flat, dtypes, host: bool) -> list:
        rt = iree_runtime()
        try:
            args = rt.VmVariantList(len(flat))
            for leaf in flat:
                args.push_ref(leaf.buffer_view if isinstance(leaf, DeviceArray)
                              else to_device(self.device, leaf))
            results = rt.VmVariantList(1)
            self._context.invoke(self._vm_functions[name], args, results)
            views = _buffer_views(rt, results)
            if dtypes is None:
                dtypes = [raw_dtype(v) for v in views]
            if host:
                return to_host(self.device, views, dtypes)
            return [DeviceArray(self._held, v, d) for v, d in zip(views, dtypes)]
        except (IndexError, RuntimeError, ValueError) as e:  # IREE status codes
            # The call's buffers go now, while their device lives: the exception's
            # traceback would keep them past a lost device's replacement, and
            # releasing them after it crashes the process.
            args = results = views = None  # noqa: F841
            raise RunError(
                f"{name}: the IREE runtime failed while running this function on "
                f"{self.driver!r}: {str(e).splitlines()[0] if str(e) else e!r}. The "
                f"inputs matched its signature, so the compiled module itself cannot "
                f"run: please report it with the program that produced it (whilst "
                f"refuses the loop forms known to fail on IREE 3.13).") from e

    def to_device(self, array) -> DeviceArray:
        """A copy of a numpy array (or number) on this module's device, for inputs
        that several calls share (stored as this module's functions take its dtype)."""
        arr = convert_untyped(array, "array")
        stored = self._stored_as.get(arr.dtype, arr.dtype)
        return DeviceArray(self._held, to_device(self.device, arr.astype(stored, copy=False)),
                           arr.dtype)

    @property
    def functions(self) -> dict[str, Function]:
        """name -> `Function`, for every function the module exports."""
        return {name: Function(self, name) for name in self._specs}

    def __getitem__(self, name) -> Function:
        if name not in self._specs:
            raise KeyError(f"no function {name!r} in this module; it exports "
                           f"{sorted(self._specs)}")
        return Function(self, name)

    def __getattr__(self, name) -> Function:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e)) from None

    def __call__(self, *args, **kwargs):
        """Call the module's only function (or `main`)."""
        if "main" in self._specs:
            return self["main"](*args, **kwargs)
        if len(self._specs) == 1:
            return self[next(iter(self._specs))](*args, **kwargs)
        raise TypeError(f"this module exports {sorted(self._specs)}; call one by name")


def _function_specs(signature: dict | None) -> tuple:
    """What every call of a function with `signature` checks its inputs against and
    converts its outputs to: `(signature, per input leaf (dtype, shape, written
    form), per input leaf the dtype the module takes it as, per output its numpy
    dtype)`; the last three None without a signature (the buffers' own dtypes)."""
    if signature is None:
        return None, None, None, None
    inputs = signature["input_avals"]
    return (signature,
            [(np.dtype(a["dtype"]), tuple(a["shape"]), sig.format_aval(a)) for a in inputs],
            [np.dtype(sig.stored_dtype(a)) for a in inputs],
            [np.dtype(a["dtype"]) for a in signature["output_avals"]])


def _buffer_views(rt, results) -> list:
    """The buffer views of a VM result list, in order (nested lists flattened)."""
    views = []
    for k in range(results.size):
        ref = results.get_as_ref(k)
        view = ref.deref(rt.HalBufferView, True)
        views.extend([view] if view is not None else _buffer_views(rt, results.get_as_list(k)))
    return views


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
      OSError: the path cannot be opened (FileNotFoundError), or is not a regular
        file of at most 4 GiB.
    """
    if driver not in DRIVERS:
        raise ValueError(f"load: driver must be one of {DRIVERS}; found {driver!r}.")
    return Module(read_bytes(path_or_bytes), driver)
