"""Whether the loops being traced or lowered are exported for a GPU target.

On a GPU each emitted loop iteration is a command submission that the host waits for
(IREE 3.13's cuda and vulkan drivers: tens of microseconds, `bench/gpu_loop_costs.py`,
against about 2 on a CPU), while work that keeps a CPU core busy that long takes the
GPU a small fraction of it: GPU exports aim for GPU_SCALE times the work per emitted
iteration (`_unroll`) and select over arrays GPU_SCALE times larger where CPU exports
index (`_onehot`). `whilst.export` sets it from its targets.
"""
from __future__ import annotations

import contextlib
import contextvars

# How much more work per emitted iteration, and how much larger the arrays selected
# over, a GPU export takes than a CPU export. More unrolling makes iree-compile 3.13
# form dispatches with more buffers than its GPU runtimes bind (the tanh gradient of
# bench/iree_vs_jax.py unrolled 64 times: 65 bindings on cuda, where 16 are allowed).
GPU_SCALE = 64

_gpu_export = contextvars.ContextVar("whilst_gpu_export", default=False)


@contextlib.contextmanager
def exporting_for_gpu(gpu: bool):
    """Within the block, loops traced and lowered are shaped for a GPU target when
    `gpu` holds."""
    token = _gpu_export.set(gpu)
    try:
        yield
    finally:
        _gpu_export.reset(token)


def for_gpu() -> bool:
    """Whether the loops being traced or lowered are exported for a GPU target."""
    return _gpu_export.get()


def scaled(cpu_amount: int) -> int:
    """`cpu_amount` of work or of elements or bytes selected over, as much as the
    export being traced takes."""
    return cpu_amount * GPU_SCALE if for_gpu() else cpu_amount
