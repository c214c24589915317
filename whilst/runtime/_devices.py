"""The IREE device that runs whilst modules for each driver: one per driver and process,
shared by every module loaded for it (as `iree.runtime`'s own cached devices are).

On `cuda`, IREE 3.13's defaults cost every loop iteration dearly
(`bench/gpu_loop_costs.py` measures them):
  * a readback (a loop test, a position computed on the device) goes through a
    host-visible staging buffer, which the CUDA HAL allocates with
    `cuMemAllocManaged` and frees again each time: IREE's caching allocator
    (`allocators=["caching"]`) keeps freed buffers for reuse instead;
  * with queue-ordered allocations (`--cuda_async_allocations`, on by default) each
    `stream.resource.alloca` of a loop iteration goes to CUDA's memory pools; off,
    it is served by that cache too, faster, and without the pools' failing
    `cuMemFreeAsync` ("CUDA_ERROR_INVALID_VALUE ... hal.device.queue.dealloca").
The flag is read when a driver is created, so whilst creates its own `cuda` driver
with it off and sets it back to IREE's default afterwards. `tool_flags` gives the same
settings as flags of IREE's tools (`iree-run-module`, `iree-benchmark-module`).

A device that IREE reports lost (`VK_ERROR_DEVICE_LOST`: IREE 3.13's Vulkan driver
signals a timeline value that lavapipe's timeline has already passed,
iree_limits/vulkan_device_lost.py) fails every later call; `replace_lost` gives the
driver a fresh device, and each module moves to it on its next call (`_loader`,
which runs the lost call again there).

A device lives while something holds its `Held` (a loaded module, a `DeviceArray`),
not for the whole process: on lavapipe each IREE 3.13 Vulkan device keeps two threads
spinning on the CPU from its creation to its release, idle or not
(iree_limits/vulkan_idle_spin.py), so whilst lets it go with its last holder.
"""
from __future__ import annotations

import threading
import weakref

# driver -> (runtime flags while its driver is created, the flags that restore
# IREE's defaults, allocator specs of its devices)
_SETTINGS = {
    "cuda": (["--cuda_async_allocations=false"], ["--cuda_async_allocations=true"],
             ["caching"]),
}


class Held:
    """`device`, a driver's `iree.runtime.HalDevice`, for as long as something
    references this object: the modules loaded on it and their `DeviceArray`s do."""
    __slots__ = ("device", "__weakref__")

    def __init__(self, device):
        self.device = device


_devices: dict = {}   # driver -> weakref to the `Held` of its current device
_lock = threading.Lock()


def tool_flags(driver: str) -> list[str]:
    """The flags that give IREE's command-line tools whilst's settings for `driver`."""
    if driver not in _SETTINGS:
        return []
    during, _, allocators = _SETTINGS[driver]
    return [*during, *(f"--device_allocator={spec}" for spec in allocators)]


def is_lost(error: Exception) -> bool:
    """Whether an IREE error says that its device was lost: `VK_ERROR_DEVICE_LOST`,
    or IREE's status for it, DATA_LOSS (a fence that a lost device never signals
    reports that alone)."""
    return "DEVICE_LOST" in str(error) or "DATA_LOSS" in str(error)


def replace_lost(driver: str, lost) -> None:
    """Forget `lost` as `driver`'s device (if it still is), so that `device(driver)`
    creates a new one."""
    with _lock:
        if current(driver) is lost:
            del _devices[driver]


def current(driver: str):
    """`driver`'s device now (None where nothing holds one)."""
    held = _live(driver)
    return None if held is None else held.device


def _live(driver: str) -> Held | None:
    """The `Held` of `driver`'s device while something holds it, else None."""
    ref = _devices.get(driver)
    return None if ref is None else ref()


def device(driver: str) -> Held:
    """The `Held` of the `iree.runtime.HalDevice` whilst runs modules on with
    `driver`: the one something holds now, else a new device's (an exception from
    IREE if the driver finds no device)."""
    import iree.runtime as rt

    with _lock:
        held = _live(driver)
        if held is None:
            if driver in _SETTINGS:
                during, after, allocators = _SETTINGS[driver]
                rt.flags.parse_flags(*during)
                try:  # not `rt.get_driver`, which may return a driver made without them
                    hal_driver = rt._binding.create_hal_driver(driver)
                finally:
                    rt.flags.parse_flags(*after)
                held = Held(hal_driver.create_default_device(allocators=allocators))
            else:  # a device of its own: `rt.get_device`'s is shared, and stays lost
                held = Held(rt.get_driver(driver).create_default_device())
            _devices[driver] = weakref.ref(held)
        return held
