"""Arrays in and out of a compiled function's call: numpy to device buffers and back,
and results left on the device (`DeviceArray`).

`iree.runtime`'s own results (`iree.runtime.DeviceArray.to_host`) copy a device buffer
to the host by importing a fresh numpy array as a host allocation: Vulkan refuses that
unless the array is 4096-byte aligned ("host allocation import pointer does not
satisfy Vulkan minImportedHostPointerAlignment 4096"), and on CUDA it pins the array's
pages on every call. whilst instead copies each result that the host cannot map into a
staging buffer from the device's allocator (which reuses freed buffers on GPUs,
`_devices`) and reads it there: one queue copy per result, one wait per call.
"""
from __future__ import annotations

import functools

import numpy as np


@functools.cache
def iree_runtime():
    """`iree.runtime`, imported on first use (whilst imports without it)."""
    import iree.runtime as rt
    return rt


@functools.cache
def _element_type(dtype: np.dtype):
    """IREE's element type of the numpy `dtype`."""
    return iree_runtime().array_interop.map_dtype_to_element_type(dtype)


@functools.cache
def _dtype(element_type) -> np.dtype:
    """The numpy dtype of IREE's `element_type`."""
    return np.dtype(iree_runtime().HalElementType.map_to_dtype(element_type))


@functools.cache
def _mapping_bits() -> tuple[int, int]:
    """The memory type and usage bits of a buffer the host can map."""
    rt = iree_runtime()
    return int(rt.MemoryType.HOST_VISIBLE), int(rt.BufferUsage.MAPPING_SCOPED)


class DeviceArray:
    """A function's result left on its device (`Function.on_device`).

    Pass it to a function of any module loaded with the same driver and it is used
    in place (no copy); `np.asarray(a)` or `a.to_host()` copies it to the host.
    """

    def __init__(self, held, buffer_view, dtype: np.dtype):
        # Set first, so released first: IREE's buffers do not keep their device
        # alive, and this array may hold the last reference to it (`held`, a
        # `_devices.Held`, which keeps the device for its modules' later loads).
        self.buffer_view = buffer_view
        self._held = held
        self.device = held.device
        self.dtype = np.dtype(dtype)
        self.shape = tuple(buffer_view.shape)

    def to_host(self) -> np.ndarray:
        """The array's contents as a numpy array (a copy)."""
        return to_host(self.device, [self.buffer_view], [self.dtype])[0]

    def __array__(self, dtype=None, copy=None):
        host = self.to_host()
        return host if dtype is None else host.astype(dtype)

    def __repr__(self):
        dims = ",".join(map(str, self.shape))
        return f"<whilst DeviceArray {self.dtype.name}[{dims}]>"


def to_device(device, array: np.ndarray):
    """A device-local buffer view holding a copy of the C-ordered `array`."""
    rt = iree_runtime()
    return device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
        device=device, buffer=array, element_type=_element_type(array.dtype))


def to_host(device, buffer_views, dtypes) -> list[np.ndarray]:
    """Numpy arrays of `dtypes` holding the contents of `buffer_views`: mapped where
    the host can map the buffer, else copied through staging buffers."""
    rt = iree_runtime()
    arrays, pending = [None] * len(buffer_views), []
    for k, view in enumerate(buffer_views):
        buffer = view.get_buffer()
        if buffer.byte_length() == 0:
            arrays[k] = np.empty(tuple(view.shape), dtypes[k])
        elif _mappable(buffer):  # copied: the mapping does not keep the buffer alive
            mapped = view.map().asarray(tuple(view.shape), raw_dtype(view))
            arrays[k] = np.array(mapped, dtype=dtypes[k], copy=True)
        else:
            pending.append(k)
    if pending:
        semaphore = device.create_semaphore(0)
        staging = {}
        for step, k in enumerate(pending):
            source = buffer_views[k].get_buffer()
            staging[k] = device.allocator.allocate_buffer(
                memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
                allowed_usage=rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED,
                allocation_size=source.byte_length())
            device.queue_copy(source, staging[k],
                              wait_semaphores=rt.HalFence.create_at(semaphore, step),
                              signal_semaphores=rt.HalFence.create_at(semaphore, step + 1))
        rt.HalFence.create_at(semaphore, len(pending)).wait()
        for k in pending:
            view = buffer_views[k]
            mapped = staging[k].map().asarray(tuple(view.shape), raw_dtype(view))
            arrays[k] = np.array(mapped, dtype=dtypes[k], copy=True)
    return arrays


def _mappable(buffer) -> bool:
    host_visible, mapping = _mapping_bits()
    return buffer.memory_type() & host_visible and buffer.allowed_usage() & mapping


def raw_dtype(view) -> np.dtype:
    """The numpy dtype of a buffer view's elements, as IREE stores them."""
    return _dtype(view.element_type)

