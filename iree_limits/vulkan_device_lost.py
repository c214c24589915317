"""IREE 3.13 on lavapipe (Mesa 22.3's software Vulkan driver): the gradient of two
nested checkpointed loops (the corpus program `checkpoint_nested`,
tests/iree/test_iree_corpus.py), compiled for vulkan-spirv and called again and again
on the `vulkan` driver, loses the device after a few calls on a loaded machine:
`VK_ERROR_DEVICE_LOST` from `vkSignalSemaphore` (in `hal.fence.await` or
`hal.device.queue.alloca`), `vkWaitSemaphores` or `vkGetSemaphoreCounterValue`. Every
later call on that device fails the same way, whatever module it belongs to.

The cause, found with `MESA_VK_ABORT_ON_DEVICE_LOSS=1` under gdb: an IREE runtime thread
calls `vkSignalSemaphore` (Mesa's `vk_common_SignalSemaphore`) with a value that the
timeline has already reached, and Mesa's emulated timeline (`vk_sync_timeline.c`) marks
the device lost: "Timeline values must only ever strictly increase." So IREE's Vulkan
queue signals from the host a timeline value that the device has signalled too, a race
that load makes likely.

On the 2-core development machine loaded 4-13 by other jobs (2026-11-27) it lost the
device at call 6 and 8 of two runs, about once in 10-40 calls; the same loop over four
other corpus programs (`grad_nested`, `grad_of_grad_nested`, `checkpoint_grad_n5`,
`collatz`) ran 79 rounds without a loss. Each call's result equals `jax.grad` of the
unrolled loops.

On the same machine idle (2026-11-30) a third of the calls lost the device (16 of 60,
55 of 120), new devices' first calls included, sometimes several in a row.

whilst's workaround (`whilst/runtime/_devices.py`): a lost device is replaced and the
call runs again on the new one, with a warning, up to `LOST_DEVICE_RETRIES` times
(`whilst/runtime/_loader.py`). The failed call's buffers go before the device is
replaced: released after it (held by the exception's traceback), they crashed the
process in the next garbage collection. This script counts those warnings:

    python iree_limits/vulkan_device_lost.py [CALLS]

prints how many of CALLS calls lost the device ("0 device losses" once IREE is fixed).
"""
import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np

import whilst


def nested(x, a):
    def outer(i, x):
        y = whilst.while_loop(lambda j, y: j < i + 1, lambda j, y: (j + 1, jnp.sin(y) * a + x),
                              [0, x], checkpoints=2)[1]
        return i + 1, y * 0.9
    return whilst.while_loop(lambda i, x: i < 4, outer, [0, x], checkpoints=2)[1]


def nested_unrolled(x, a):
    for i in range(4):
        y = x
        for _ in range(i + 1):
            y = jnp.sin(y) * a + x
        x = y * 0.9
    return x


def main(calls: int) -> None:
    x, a = np.float32(0.6), np.float32(0.7)
    grad = jax.grad(nested, (0, 1))
    module = whilst.compile(grad, x, a, target="vulkan-spirv").load("vulkan")
    want = np.asarray(jax.grad(nested_unrolled, (0, 1))(x, a))
    losses = []

    class Losses(logging.Handler):
        def emit(self, record):
            losses.append(record.getMessage())

    logging.getLogger("whilst.runtime").addHandler(Losses())
    for _ in range(calls):
        np.testing.assert_allclose(np.asarray(module(x, a)), want, rtol=1e-4)
    print(f"{len(losses)} device losses in {calls} calls")
    for message in losses[:3]:
        print(message.splitlines()[0])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
