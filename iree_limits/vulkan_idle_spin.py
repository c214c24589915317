"""IREE 3.13 on lavapipe (Mesa 22.3's software Vulkan driver): a Vulkan device keeps
two of its threads spinning on the CPU from its creation until it is released, with
no module loaded and no work submitted. Each calls into lavapipe's `vkWaitSemaphores`
in a loop of `clock_gettime` (Mesa waits for any of several emulated timeline
semaphores by polling them: `__vk_sync_wait_many`, "there's nothing better we can do
than spin"). Lowering those threads' priority is no way out: they see the device's
work complete, and calls took 4x as long at nice 19.

On the 2-core development machine (2026-11-29) one pytest worker that had loaded
Vulkan modules earlier held two such devices for the rest of the suite: their four
threads had used 1264 of the worker's 1354 s of CPU 18 minutes in.

whilst's workaround (`whilst/runtime/_devices.py`): a device lives only while a loaded
module or a `DeviceArray` holds it, and is released with the last of them.

    python iree_limits/vulkan_idle_spin.py

prints the CPU seconds the process used in one idle second without a Vulkan device,
with one, and after releasing it ("0.00 s" with one once IREE or Mesa is fixed).
"""
import os
import resource
import time


def idle_cpu_seconds(seconds: float = 1.0) -> float:
    """CPU seconds this process uses while its main thread sleeps `seconds`."""
    def used():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    start = used()
    time.sleep(seconds)
    return used() - start


def main() -> None:
    import iree.runtime as rt

    driver = rt.get_driver("vulkan")
    print(f"no device: {idle_cpu_seconds():.2f} s CPU in 1 s idle, "
          f"{len(os.listdir('/proc/self/task'))} threads")
    device = driver.create_default_device()
    print(f"one device: {idle_cpu_seconds():.2f} s CPU in 1 s idle, "
          f"{len(os.listdir('/proc/self/task'))} threads")
    del device
    print(f"released: {idle_cpu_seconds():.2f} s CPU in 1 s idle, "
          f"{len(os.listdir('/proc/self/task'))} threads")


if __name__ == "__main__":
    main()
