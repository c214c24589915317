"""IREE 3.13 (llvm-cpu): a loop placed whole in a dispatch region whose body shares
values among many ops keeps iree-compile busy for minutes. llvm-cpu's codegen
(`RematerializeParallelOpsPass`, then `LLVMCPUTileAndFuseProducerConsumer`) fuses
every elementwise producer into each of its users, copies of copies, where no
dispatch boundary stops it, and an unrolled or vmapped body grows exponentially so.

`whilst/lowering/_iree_loops_in_dispatch.py` keeps each value that stands for more
than `SHARED_FUSION_LIMIT` fused ops and has several users apart from that fusion
(`_shared_values_materialized`): a vmapped Collatz loop then compiles in seconds.
A gradient While of whilst's (unrolled, reading its rows) still runs away at that
limit, so in gradient and linear Whiles every shared value is kept apart
(`REVERSE_SHARED_FUSION_LIMIT`, 0), and `compile_module` stops that flag set's
iree-compile after LOOPS_IN_DISPATCH_SECONDS.

    python iree_limits/remat_in_dispatch.py [--seconds 60]

prints, for each loop alone in a dispatch, without the workaround and at each
limit, "compiled in N s" or "still compiling after N s".
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
        in_dispatch._into_dispatch(loop, 0)
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
    limits = in_dispatch.SHARED_FUSION_LIMIT, in_dispatch.REVERSE_SHARED_FUSION_LIMIT
    tries = [("without the workaround", float("inf")), *[
        (f"values past {limit} fused ops kept apart", limit) for limit in sorted(set(limits))]]
    for name, (exported, role) in programs.items():
        text = prepare([exported])
        for label, value in tries:
            in_dispatch.SHARED_FUSION_LIMIT = in_dispatch.REVERSE_SHARED_FUSION_LIMIT = value
            try:
                print(f"{name} in a dispatch, {label}: "
                      f"{compile_seconds(text, role, flags, seconds)}", flush=True)
            finally:
                in_dispatch.SHARED_FUSION_LIMIT, in_dispatch.REVERSE_SHARED_FUSION_LIMIT = limits


if __name__ == "__main__":
    main()
