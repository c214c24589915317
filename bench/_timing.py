"""Timing and memory measurement shared by the bench/ scripts.

`measure` takes the wall-clock median of repeated calls after warm-up, running
the variants of one comparison in rounds in this process, so that drift on a
noisy machine hits all of them alike. `table` prints the figures with ratios.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import random
import statistics
import time
from typing import Any, Callable


@dataclasses.dataclass
class Timing:
    """Wall-clock seconds of each timed call (warm-up calls excluded)."""
    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.1 = 10%)."""
        if len(self.samples) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / self.median


def blocking(fn: Callable, *args) -> Callable[[], Any]:
    """A zero-argument call of `fn(*args)` that waits for JAX's asynchronous results."""
    import jax
    return lambda: jax.block_until_ready(fn(*args))


def measure(calls: dict[str, Callable[[], Any]], *, warmup: int = 2, budget_s: float = 3.0,
            min_repeats: int = 5, max_repeats: int = 2000) -> dict[str, Timing]:
    """Median-ready timings of each zero-argument call, measured interleaved.

    Each call runs `warmup` times first (JIT compilation, caches); the last
    warm-up sets the number of rounds so that all rounds take about `budget_s`,
    between `min_repeats` and `max_repeats`. Each round calls every variant
    twice in a row and times the second call: a JAX CPU call made after other
    work pays for waking XLA:CPU's worker thread (measured on the 2-core
    machine, 2026-11-24: a 0.1 ms gradient took 0.13 ms after 0.4 ms of IREE
    calls, 0.33 ms after 40 ms, 5 ms after one 90 ms IREE call), which a program
    called in a loop does not. The variants' order is shuffled each round
    (seeded): in a fixed order each variant always follows the same one, and
    grad_tanh.py part 2's variants timed two identical programs at 1.36x and
    1.21x of a third, against 1.28x and 1.27x shuffled (one process, 2026-11-25).
    """
    estimate = 0.0
    for fn in calls.values():
        for _ in range(warmup):
            t = time.perf_counter()
            fn()
            last = time.perf_counter() - t
        estimate += 2 * last
    repeats = int(min(max_repeats, max(min_repeats, budget_s / max(estimate, 1e-9))))
    samples = {name: [] for name in calls}
    order, rng = list(calls.items()), random.Random(0)
    for _ in range(repeats):
        rng.shuffle(order)
        for name, fn in order:
            fn()
            t = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t)
    return {name: Timing(s) for name, s in samples.items()}


def peak_rss_delta(fn: Callable[[], Any]) -> int | None:
    """Bytes by which one call of `fn` raises the process's peak resident memory
    above its resident memory before the call (Linux; None where the peak cannot
    be reset). Counts every allocation of the call, inputs and outputs included."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (peak RSS) to the current RSS
    except OSError:
        return None
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) * 1024


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def jax_temp_bytes(compiled) -> int:
    """XLA's temporary buffer bytes of a compiled JAX program (`jit(f).lower(...).compile()`)."""
    return int(compiled.memory_analysis().temp_size_in_bytes)


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    """Print (and return) a fixed-width table; cells are printed with str()."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title] + ["  ".join(c.rjust(w) if i else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(row, widths)))
                       for row in cells]
    lines.insert(2, "  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def machine() -> dict[str, Any]:
    """The machine the figures come from: cores, CPU model, library versions."""
    import jax
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "jax": jax.__version__,
            "iree": importlib.metadata.version("iree-base-runtime")}


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    print(f"wrote {path}")
