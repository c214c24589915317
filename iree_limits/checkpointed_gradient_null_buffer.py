"""IREE 3.13 (llvm-cpu, local-sync): diffrax's default gradient (its own checkpointed
loops, `RecursiveCheckpointAdjoint`) of a short solve compiles, and every call fails:

    command_buffer_validation.c:196: OUT_OF_RANGE; indirect buffer reference slot 0 is
    out range of the declared binding capacity of the command buffer 0; while invoking
    native function hal.command_buffer.copy_buffer

A `copy_buffer` in `main` is given a null buffer, which the HAL reads as a slot of a
binding table the command buffer does not have. `jax.grad` of `sum(y(1))`, dy/dt =
-r y by Euler steps of 0.1, `max_steps=4` (the solve stops at its bound): whilst's
module fails, and so does JAX's own export (`jax.export`, no whilst preparation)
compiled by iree-compile alone, with every flag set whilst tries and with
`--iree-opt-level=O0`, `--iree-stream-partitioning-favor=debug` or
`--iree-stream-resource-alias-mutable-bindings=false`. `max_steps` of 3, 4 and 8
fail, 2, 16 and 64 run; so do `DirectAdjoint` at 64 with Tsit5 on Lotka-Volterra
(16 runs), and equinox's checkpointed loops alone (`kind="checkpointed"`, any
`checkpoints`) run. Not reduced further, and not worked around: whilst's runtime
reports that the compiled module cannot run (`whilst.runtime.RunError`). Prints

    max_steps=4 whilst: failed: ... indirect buffer reference slot 0 ...   JAX: -0.9652
    max_steps=4 jax.export + iree-compile: failed: ... indirect buffer reference slot 0 ...
    max_steps=16 whilst: -1.5612   JAX: -1.5612

    EQX_ON_ERROR=nan python iree_limits/checkpointed_gradient_null_buffer.py
"""
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")

import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from iree.compiler import tools  # noqa: E402
from iree import runtime as rt  # noqa: E402

import whilst  # noqa: E402
from whilst.lowering import flag_sets  # noqa: E402

Y0, RATE = np.array([1.0, 2.0], np.float32), np.float32(0.7)


def gradient(max_steps):
    def loss(y0, r):
        return jnp.sum(diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, r: -r * y), diffrax.Euler(), 0.0, 1.0, 0.1, y0,
            args=r, saveat=diffrax.SaveAt(t1=True), max_steps=max_steps).ys)
    return jax.grad(loss, argnums=1)


def failed(call):
    try:
        return call()
    except Exception as e:   # noqa: BLE001 - printed
        return f"failed: {str(e).splitlines()[0][:160]}"


def plain_iree(fn):
    text = jax.export.export(jax.jit(fn))(Y0, RATE).mlir_module()
    vmfb = tools.compile_str(text, extra_args=list(flag_sets(["llvm-cpu"], "host")[0]))
    context = rt.SystemContext(config=rt.Config("local-sync"))
    module = rt.VmModule.copy_buffer(context.instance, vmfb)
    context.add_vm_module(module)
    return context.modules[module.name].main(Y0, RATE).to_host()


if __name__ == "__main__":
    for steps in (4, 16):
        fn = gradient(steps)
        got = failed(lambda: whilst.compile(fn, Y0, RATE, cache=False).load().main(Y0, RATE))
        print(f"max_steps={steps} whilst: {got}   JAX: {jax.jit(fn)(Y0, RATE)}")
        if steps == 4:
            print(f"max_steps={steps} jax.export + iree-compile: {failed(lambda: plain_iree(fn))}")
