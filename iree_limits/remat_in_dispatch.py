"""IREE 3.13 (llvm-cpu): a gradient While of whilst's (unrolled, reading its rows)
placed whole in a dispatch region keeps iree-compile busy for minutes in
`RematerializeParallelOpsPass` (llvm-cpu's codegen configuration), which fuses every
elementwise producer into each of its users, copies of copies, where no dispatch
boundary stops it. The forward While of the same program compiles in a few seconds
that way (`whilst/lowering/_iree_loops_in_dispatch.py`, which leaves gradient and
linear Whiles on the host; `compile_module` stops that flag set's iree-compile after
LOOPS_IN_DISPATCH_SECONDS).

    python iree_limits/remat_in_dispatch.py [--seconds 60]

prints, for the forward and the gradient While each alone in a dispatch,
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
from whilst.lowering import flag_sets, has_loops_in_dispatch, prepare
from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_loops_in_dispatch import _into_dispatch


def loss(y, rate):
    """sum(y) after 10 Euler steps of dy/dt = -rate y sin(y), at most 16 steps stored."""
    return jnp.sum(whilst.while_loop(
        lambda i, y: i < 10, lambda i, y: (i + 1, y - 0.1 * rate * y * jnp.sin(y)),
        [0, y], maximum_iterations=16)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    seconds = parser.parse_args().seconds
    text = prepare([whilst.export(jax.grad(loss, argnums=1), np.ones(2, np.float32),
                                  np.float32(0.7))])
    flags = next(f for f in flag_sets(("llvm-cpu",), loops_in_dispatch=True)
                 if has_loops_in_dispatch(f))
    for role in ("forward", "gradient"):
        with ir.Context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            (loop,) = ops_where(module, lambda op: op.name == "stablehlo.while" and str(
                op.attributes["whilst.role"]) == f'"{role}"')
            _into_dispatch(loop)
            source = module.operation.get_asm(enable_debug_info=False)
        with core.TempFileSaver.implicit() as saver:
            command = core.build_compile_command_line(
                "-", saver, core.CompilerOptions(extra_args=flags))
        start = time.perf_counter()
        try:
            subprocess.run(command, input=source.encode(), capture_output=True, check=True,
                           timeout=seconds)
            print(f"{role} While in a dispatch: compiled in "
                  f"{time.perf_counter() - start:.1f} s")
        except subprocess.TimeoutExpired:
            print(f"{role} While in a dispatch: still compiling after {seconds:.0f} s")


if __name__ == "__main__":
    main()
