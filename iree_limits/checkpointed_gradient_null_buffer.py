"""IREE 3.13 (VM register allocation): a branch that passes one buffer to several
block arguments, where one occurrence shares its register with its block argument,
MOVEs another occurrence out of that register, and the block reads a null buffer
(iree-org/iree#24753, fixed by the open PR iree-org/iree#24781).

diffrax's default gradient (its own checkpointed loops, `RecursiveCheckpointAdjoint`)
of a short solve meets it: `jax.grad` of `sum(y(1))`, dy/dt = -r y by Euler steps of
0.1, `max_steps=4` (the solve stops at its bound). Its module compiles, and every call
fails:

    command_buffer_validation.c:196: OUT_OF_RANGE; indirect buffer reference slot 0 is
    out range of the declared binding capacity of the command buffer 0; while invoking
    native function hal.command_buffer.copy_buffer

(the HAL reads a null buffer as a slot of a binding table the command buffer does
not have). `iree-dump-module --output=disassembly --bytecode_offsets` shows it: the
branch into the solve's outer loop reads `%r13->%r0, ..., %R13->%r23` (`%R`: moved),
the loop's block argument that stays in `%r13` is read by the failing copy, and the
loop's back edge writes it (`%R39->%r13`). JAX's own export compiled by iree-compile
alone fails alike, under every flag set whilst tries and under `--iree-opt-level=O0`,
`--iree-stream-partitioning-favor=debug`, `--iree-vm-target-optimize-for-stack-size`.
whilst compiles to the VM program, gives each repeated ref operand of a branch a value
of its own, and compiles on from there (`whilst/lowering/_iree_vm_branches.py`).
Prints

    max_steps=4 whilst: -0.9652   JAX: -0.9652
    max_steps=4 jax.export + iree-compile: failed: ... indirect buffer reference slot 0 ...

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
    fn = gradient(4)
    got = failed(lambda: whilst.compile(fn, Y0, RATE, cache=False).load().main(Y0, RATE))
    print(f"max_steps=4 whilst: {got}   JAX: {jax.jit(fn)(Y0, RATE)}")
    print(f"max_steps=4 jax.export + iree-compile: {failed(lambda: plain_iree(fn))}")
