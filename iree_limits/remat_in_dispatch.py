"""IREE 3.13 (llvm-cpu): a loop placed whole in a dispatch region whose body shares
values among many ops keeps iree-compile busy for minutes. llvm-cpu's codegen
(`RematerializeParallelOpsPass`, then `LLVMCPUTileAndFuseProducerConsumer`) fuses
every elementwise producer into each of its users, copies of copies, where no
dispatch boundary stops it, and an unrolled or vmapped body grows exponentially so.

`whilst/lowering/_iree_loops_in_dispatch.py` keeps each value that stands for more
than `SHARED_FUSION_LIMIT` fused ops and has several users apart from that fusion
(`_shared_values_materialized`): a vmapped Collatz loop then compiles in seconds.
A gradient While of whilst's (unrolled, reading its rows) still runs away with the
workaround, so gradient and linear Whiles stay on the host (`_fits`), and
`compile_module` stops that flag set's iree-compile after LOOPS_IN_DISPATCH_SECONDS.

    python iree_limits/remat_in_dispatch.py [--seconds 60]

prints, for each loop alone in a dispatch, with and without the workaround,
"compiled in N s" or "still compiling after N s".
"""
import argparse
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np
from iree.compiler import ir
from iree.compiler.tools import core

import whilst
import whilst.lowering._iree_loops_in_dispatch as in_dispatch
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare
from whilst.lowering._ir_walk import ops_where


def collatz_steps(n):
    """Steps of each n to reach 1, vmapped (whilst unrolls its body)."""
    return jax.vmap(lambda n: whilst.while_loop(
        lambda n, s: n != 1, lambda n, s: (jnp.where(n % 2 == 0, n // 2, 3 * n + 1), s + 1),
        [n, 0])[1])(n)


def loss(y, rate):
    """sum(y) after 10 Euler steps of dy/dt = -rate y sin(y), at most 16 steps stored."""
    return jnp.sum(whilst.while_loop(
        lambda i, y: i < 10, lambda i, y: (i + 1, y - 0.1 * rate * y * jnp.sin(y)),
        [0, y], maximum_iterations=16)[1])


def compile_seconds(text, role, flags, seconds) -> str:
    """iree-compile of `text` with its `role` While alone in a dispatch."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        (loop,) = ops_where(module, lambda op: op.name == "stablehlo.while" and str(
            op.attributes["whilst.role"]) == f'"{role}"')
        in_dispatch._into_dispatch(loop)
        source = module.operation.get_asm(enable_debug_info=False)
    with core.TempFileSaver.implicit() as saver:
        command = core.build_compile_command_line(
            "-", saver, core.CompilerOptions(extra_args=flags))
    start = time.perf_counter()
    try:
        subprocess.run(command, input=source.encode(), capture_output=True, check=True,
                       timeout=seconds)
        return f"compiled in {time.perf_counter() - start:.1f} s"
    except subprocess.TimeoutExpired:
        return f"still compiling after {seconds:.0f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    seconds = parser.parse_args().seconds
    flags = next(f for f in flag_sets(("llvm-cpu",)) if has_loops_in_dispatch(f))
    programs = {
        "vmapped Collatz forward While": (
            whilst.export(collatz_steps, np.array([1, 6, 27, 97, 7], np.int32)), "forward"),
        "Euler gradient While": (whilst.export(jax.grad(loss, argnums=1),
                                               np.ones(2, np.float32), np.float32(0.7)),
                                 "gradient")}
    limit = in_dispatch.SHARED_FUSION_LIMIT
    for name, (exported, role) in programs.items():
        text = prepare([exported])
        for label, value in [("without the workaround", float("inf")),
                             ("with the workaround", limit)]:
            in_dispatch.SHARED_FUSION_LIMIT = value
            print(f"{name} in a dispatch, {label}: "
                  f"{compile_seconds(text, role, flags, seconds)}", flush=True)
        in_dispatch.SHARED_FUSION_LIMIT = limit


if __name__ == "__main__":
    main()
