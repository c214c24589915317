"""What one emitted loop iteration costs on an IREE GPU driver, by what the iteration
holds (stream phase): a queue allocation, a device-to-host readback, an in-place copy.

Two steps, as `gpu_check.py` (the GPU machine may have only `iree-base-runtime`):

    python bench/gpu_loop_costs.py prepare DIR     # where iree-base-compiler is installed
    python bench/gpu_loop_costs.py run DIR         # on the GPU machine

`prepare` compiles the loops below (StableHLO written out, running as many iterations
as an argument says) for `cuda` and `vulkan-spirv`, and prints each loop's
stream-phase counts per iteration. `run` times each module at `--iterations` with
`iree-benchmark-module` under several runtime flag sets per driver (the HAL's
allocation options) and prints microseconds per iteration, the module's time over
the iterations. Results of an H100: `bench/results/gpu_loop_costs.json`.

  alloc:    x = sin(x) * 0.9 + 0.1 on f32[64]; IREE gives each iteration's new x a
            fresh buffer (`stream.resource.alloca` awaiting the last iteration).
  inplace:  rows[i] = x on f32[1000, 64]; updated in place (a `stream.cmd.copy`),
            nothing allocated.
  readback: `alloc` with a test on x's value (a `stream.resource.load` per iteration).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


ROWS = 1000  # rows of the in-place loop's buffer: at most this many iterations
AFFINITY = 'attributes {stream.affinity = #hal.device.affinity<@__device_0>}'

_HEAD = """func.func @main(%x: tensor<64xf32>, %n: tensor<i32>) -> RESULT """ + AFFINITY + """ {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %a = stablehlo.constant dense<0.9> : tensor<64xf32>
  %b = stablehlo.constant dense<0.1> : tensor<64xf32>
"""
_SIN_BODY = """
      %s = stablehlo.sine %y : tensor<64xf32>
      %m = stablehlo.multiply %s, %a : tensor<64xf32>
      %z = stablehlo.add %m, %b : tensor<64xf32>
      %i2 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %i2, %z : tensor<i32>, tensor<64xf32>
    }
  return %r#1 : tensor<64xf32>
}
"""
LOOPS = {
    "alloc": _HEAD.replace("RESULT", "tensor<64xf32>") + """
  %r:2 = stablehlo.while(%i = %c0, %y = %x) : tensor<i32>, tensor<64xf32>
    cond {
      %q = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %q : tensor<i1>
    } do {""" + _SIN_BODY,
    "readback": _HEAD.replace("RESULT", "tensor<64xf32>") + """
  %r:2 = stablehlo.while(%i = %c0, %y = %x) : tensor<i32>, tensor<64xf32>
    cond {
      %e = stablehlo.slice %y [0:1] : (tensor<64xf32>) -> tensor<1xf32>
      %e0 = stablehlo.reshape %e : (tensor<1xf32>) -> tensor<f32>
      %t = stablehlo.constant dense<100.0> : tensor<f32>
      %p = stablehlo.compare LT, %e0, %t : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %q = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %pq = stablehlo.and %p, %q : tensor<i1>
      stablehlo.return %pq : tensor<i1>
    } do {""" + _SIN_BODY,
    "inplace": _HEAD.replace("RESULT", "tensor<1000x64xf32>") + """
  %z0 = stablehlo.constant dense<0.0> : tensor<1000x64xf32>
  %r:2 = stablehlo.while(%i = %c0, %buf = %z0) : tensor<i32>, tensor<1000x64xf32>
    cond {
      %q = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %q : tensor<i1>
    } do {
      %row = stablehlo.reshape %x : (tensor<64xf32>) -> tensor<1x64xf32>
      %u = stablehlo.dynamic_update_slice %buf, %row, %i, %c0 : (tensor<1000x64xf32>, tensor<1x64xf32>, tensor<i32>, tensor<i32>) -> tensor<1000x64xf32>
      %i2 = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %i2, %u : tensor<i32>, tensor<1000x64xf32>
    }
  return %r#1 : tensor<1000x64xf32>
}
""",
}

TARGETS = {"cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],
           "vulkan": ["--iree-hal-target-device=vulkan"]}

# driver -> runtime flag sets of iree-benchmark-module (the HAL's allocation choices)
FLAGS = {
    "cuda": {
        "default": [],
        "caching allocator": ["--device_allocator=caching"],
        "no async allocations": ["--cuda_async_allocations=false"],
        "no async + caching": ["--cuda_async_allocations=false", "--device_allocator=caching"],
        "graphs (no streams)": ["--cuda_use_streams=false"],
    },
    "vulkan": {
        "default": [],
        "caching allocator": ["--device_allocator=caching"],
    },
}


def prepare(out_dir: str) -> None:
    from iree.compiler import tools

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from whilst.lowering import loop_counts

    os.makedirs(out_dir, exist_ok=True)
    for name, text in LOOPS.items():
        base = ["--iree-input-type=stablehlo"]
        stream = tools.compile_str(text, extra_args=[*base, *TARGETS["cuda"],
                                                     "--compile-to=stream"]).decode()
        print(f"{name}: (readbacks, dispatches) per iteration {loop_counts(stream)}")
        for target, flags in TARGETS.items():
            data = tools.compile_str(text, extra_args=[*base, *flags])
            with open(os.path.join(out_dir, f"{name}.{target}.vmfb"), "wb") as f:
                f.write(data)
    print(f"wrote {len(LOOPS) * len(TARGETS)} modules to {out_dir}")


def benchmark_tool() -> str:
    found = shutil.which("iree-benchmark-module")
    if found:
        return found
    import iree._runtime_libs as libs
    return os.path.join(os.path.dirname(libs.__file__), "iree-benchmark-module")


def time_module(path: str, device: str, flags: list[str], inputs: list[str],
                repetitions: int = 20) -> float | None:
    """Seconds per call of `main` (iree-benchmark-module's real time), or None."""
    cmd = [benchmark_tool(), f"--module={path}", "--function=main", f"--device={device}",
           *[f"--input={i}" for i in inputs], f"--benchmark_min_time={repetitions}x",
           "--benchmark_format=json", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"  failed: {' '.join(cmd[1:])}: {proc.stderr.strip()[-300:]}")
        return None
    start = proc.stdout.find("{")
    runs = json.loads(proc.stdout[start:])["benchmarks"]
    real = runs[0]["real_time"]
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[runs[0]["time_unit"]]
    return real * scale


def time_module_on(path: str, device: str, flags: list[str], arrays,
                   repetitions: int = 20) -> float | None:
    """`time_module` with numpy arrays as the inputs (saved as .npy files for it)."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        inputs = []
        for k, a in enumerate(arrays):
            np.save(os.path.join(tmp, f"{k}.npy"), a)
            inputs.append("@" + os.path.join(tmp, f"{k}.npy"))
        return time_module(path, device, flags, inputs, repetitions)


def run(out_dir: str, n: int, repetitions: int, drivers) -> None:
    """Time each loop at `n` iterations, `repetitions` calls per flag set, on each of
    `drivers`."""
    inputs = ["64xf32=0.5", f"i32={n}"]
    rows = []
    for name in LOOPS:
        for driver in drivers:
            for label, flags in FLAGS[driver].items():
                t = time_module(os.path.join(out_dir, f"{name}.{driver}.vmfb"), driver, flags,
                                inputs, repetitions)
                rows.append({"loop": name, "driver": driver, "flags": label, "s_per_call": t})
                print(f"{name:9s} {driver:6s} {label:22s} "
                      f"{'-' if t is None else f'{t / n * 1e6:8.1f} us/iteration'}",
                      flush=True)
    with open(os.path.join(out_dir, "gpu_loop_costs.json"), "w") as f:
        json.dump({"iterations": n, "rows": rows}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["prepare", "run"])
    parser.add_argument("dir")
    parser.add_argument("--iterations", type=int, default=ROWS,
                        help=f"loop iterations per call when timing (at most {ROWS})")
    parser.add_argument("--repetitions", type=int, default=10,
                        help="timed calls per module and flag set (default 10)")
    parser.add_argument("--drivers", default=",".join(FLAGS),
                        help=f"drivers to time (default {','.join(FLAGS)})")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.dir)
    else:
        run(args.dir, min(args.iterations, ROWS), args.repetitions, args.drivers.split(","))


if __name__ == "__main__":
    main()
