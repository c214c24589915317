"""What `whilst.runtime` adds to a call on `cuda`: small programs of a folder made by
`gpu_check.py prepare`, each called from Python (numpy in and out, and device arrays
in and out) and in `iree-benchmark-module` (no Python) with the same device settings
(`whilst.runtime._devices.tool_flags`), back to back in one process with no other GPU
work between them (unlike `gpu_check.py run`, whose JAX calls share the GPU).

    python bench/gpu_call_cost.py DIR [PROGRAM ...]   # on the GPU machine
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import write_json  # noqa: E402
from gpu_loop_costs import time_module_on  # noqa: E402

PROGRAMS = ("quickstart: grad", "sample:ode_fit", "pushpop 1000", "sample:cg", "sample:lstm",
            "sample:newton")
CALLS = 30


def _median_call(call) -> float:
    call()
    call()
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(out_dir: str, programs) -> None:
    import whilst.runtime
    from whilst.runtime._devices import tool_flags

    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    rows = []
    for name in programs:
        stem = manifest[name]["stem"]
        path = os.path.join(out_dir, stem + "_cuda.vmfb")
        with np.load(os.path.join(out_dir, stem + "_in.npz")) as data:
            args = [data[f"arr_{i}"] for i in range(len(data.files))]
        with open(path, "rb") as f:
            module = whilst.runtime.load(f.read(), driver="cuda")
        on_device = [module.to_device(a) for a in args]
        row = {"program": name,
               "numpy_s": _median_call(lambda: module.main(*args)),
               "device_arrays_s": _median_call(lambda: module.main.on_device(*on_device)),
               "module_s": time_module_on(path, "cuda", tool_flags("cuda"), args, CALLS),
               "module_iree_defaults_s": time_module_on(path, "cuda", [], args, 10)}
        rows.append(row)
        print(f"{name:18s} numpy in/out {row['numpy_s'] * 1e3:7.3f} ms, device arrays "
              f"{row['device_arrays_s'] * 1e3:7.3f} ms, iree-benchmark-module "
              f"{row['module_s'] * 1e3:7.3f} ms (IREE's default settings "
              f"{row['module_iree_defaults_s'] * 1e3:7.3f} ms): "
              f"{row['numpy_s'] / row['module_s']:.2f}x", flush=True)
    write_json(os.path.join(out_dir, "gpu_call_cost.json"), {"rows": rows})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:] or PROGRAMS)
