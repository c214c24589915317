"""What the samples share: timing each stage, and timing a call on IREE and on JAX."""
import contextlib
import time

import jax


class Stages:
    """Wall-clock seconds per named stage: `with stages("IREE compile"): ...`."""

    def __init__(self):
        self.seconds = {}

    @contextlib.contextmanager
    def __call__(self, name):
        start = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - start

    def print(self):
        for name, seconds in self.seconds.items():
            print(f"  {name:<44} {seconds * 1e3:9.1f} ms")


def best_time(fn, *args, repeat=5):
    """Seconds of the fastest of `repeat` calls of `fn(*args)`, after one warm-up
    call (which compiles, for a jitted JAX function)."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def print_speed(what, iree_seconds, jax_seconds):
    print(f"  {what:<44} IREE {iree_seconds * 1e3:8.3f} ms   "
          f"JAX (jit, CPU) {jax_seconds * 1e3:8.3f} ms")


def save_figure(fig, path):
    """Write a matplotlib figure as a PNG and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"  figure: {path}")


def run_main(doc, run, check, small, figure, small_help):
    """The samples' command line: `check(run(**small))` with `--small`, else
    `check(run())`; with `--figures DIR`, `run` also draws its figure into
    `DIR/figure` (replacing it). Without it nothing is written: the README's
    figures in samples/figures change only with `--figures samples/figures`."""
    import argparse
    import os

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--small", action="store_true", help=small_help)
    parser.add_argument("--figures", metavar="DIR",
                        help=f"draw the figure as DIR/{figure} (none by default; the README's "
                             f"are in samples/figures)")
    args = parser.parse_args()
    path = None
    if args.figures:
        os.makedirs(args.figures, exist_ok=True)
        path = os.path.join(args.figures, figure)
    check(run(**(small if args.small else {}), figure=path))
