"""IREE 3.13 (llvm-cpu): iree-compile's time grows by about 35 ms of CPU per
`hal.executable` (dispatch kernel) in the module, above a floor of 0.4-0.6 s
for a one-dispatch module, whatever each kernel holds (the times measured, and
what they make of the samples' compiles: README.md).

Each executable runs its own configuration and code-generation pipeline, built
per executable, so every pattern-based pass in it (canonicalizers, ...)
rebuilds its pattern set: `perf` puts about a fifth of the time in
`FrozenRewritePatternSet` construction and `Canonicalizer::initialize`. LLVM's
own code generation is a small part (`--mlir-timing`:
SerializeTargetExecutablesPass 0.26 s of 3.1 s for the ODE sample's 76
executables). No flag of iree-compile changes the slope (tried: LLVM loop
unrolling / vectorization off, `--iree-llvmcpu-mlir-opt-level=O0`,
`--iree-opt-level`, ukernels off, debug symbols off, explicit CPU instead of
`host`; `--iree-hal-link-executables=false` is 4x slower; threads do not help
on 2 busy cores).

The module below is a chain of N steps `x <- x * sum(x) + c_k` on f32[64]:
with IREE's default fusion each step is one executable.

    python iree_limits/compile_time_per_executable.py [N ...]
"""
import resource
import statistics
import sys
import time

from iree.compiler import tools

FLAGS = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
         "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
T = "tensor<64xf32>"


def chain(n: int) -> str:
    lines = [f"func.func @main(%x0: {T}) -> {T} {{",
             "  %z = stablehlo.constant dense<0.0> : tensor<f32>"]
    for k in range(n):
        lines += [f"  %s{k} = stablehlo.reduce(%x{k} init: %z) applies stablehlo.add "
                  f"across dimensions = [0] : ({T}, tensor<f32>) -> tensor<f32>",
                  f"  %b{k} = stablehlo.broadcast_in_dim %s{k}, dims = [] : "
                  f"(tensor<f32>) -> {T}",
                  f"  %c{k} = stablehlo.constant dense<{k + 1}.5> : {T}",
                  f"  %m{k} = stablehlo.multiply %x{k}, %b{k} : {T}",
                  f"  %x{k + 1} = stablehlo.add %m{k}, %c{k} : {T}"]
    lines += [f"  return %x{n} : {T}", "}"]
    return "\n".join(lines)


def executables(text: str) -> int:
    sources = tools.compile_str(text, extra_args=[*FLAGS, "--compile-to=executable-sources"])
    return sources.decode().count("\n  hal.executable ")


def cpu_seconds(text: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one iree-compile."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    tools.compile_str(text, extra_args=FLAGS)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1, 8, 16, 32, 64]
    for n in sizes:
        text = chain(n)
        runs = [cpu_seconds(text) for _ in range(3)]
        print(f"N={n:3d}: {executables(text):3d} executables, "
              f"wall {statistics.median(r[0] for r in runs):.2f} s, "
              f"CPU {statistics.median(r[1] for r in runs):.2f} s", flush=True)


if __name__ == "__main__":
    main()
