"""The command's progress on stderr, the way pip and huggingface_hub show theirs.

On a terminal: one live line with the running stage and its elapsed time, rewritten
in place (`\\r`) a few times a second, cut to the terminal's width and erased when
the stage ends (the command then prints the stage's result line). Elsewhere (a pipe,
a file, a CI log, or TERM=dumb): one plain line when a stage that `announce`s itself
starts or changes what it does, and nothing rewritten.
"""
from __future__ import annotations

import os
import threading
import time

_ERASE = "\r\x1b[K"


class ProgressLine:
    """Use as `with ProgressLine(stream, prefix, announce) as line:` and pass `line` as a
    `progress(label, seconds, done)` hook (`whilst._stages`)."""

    def __init__(self, stream, prefix: str, announce=lambda label: True, interval: float = 0.2):
        self._stream = stream
        self._prefix = prefix
        self._announce = announce
        self._interval = interval
        self._live = _is_terminal(stream)
        self._lock = threading.Lock()
        self._running: tuple[str, float] | None = None    # (label, perf_counter at start)
        self._drawn = False
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self._live:
            self._thread = threading.Thread(target=self._redraw_until_stopped, daemon=True,
                                            name="whilst-progress")
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._running = None
            self._erase()

    def __call__(self, label: str, seconds: float, done: bool) -> None:
        with self._lock:
            if done:
                self._running = None
                self._erase()
                return
            self._running = (label, time.perf_counter() - seconds)
            if self._live:
                self._draw()
            elif self._announce(label):
                self._stream.write(f"{self._prefix}: {label} ...\n")
                self._stream.flush()

    def _redraw_until_stopped(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                if self._running is not None:
                    self._draw()

    def _draw(self) -> None:
        label, started = self._running
        elapsed = f" {time.perf_counter() - started:7.1f} s"
        shown = f"{label:<58}"
        room = _width(self._stream) - 1 - len(elapsed) - 2
        if len(shown) > room:       # a wrapped line could not be rewritten in place
            shown = label[:max(room - 3, 0)] + "..."
        self._stream.write(f"{_ERASE}  {shown}{elapsed}")
        self._stream.flush()
        self._drawn = True

    def _erase(self) -> None:
        if self._drawn:
            self._stream.write(_ERASE)
            self._stream.flush()
            self._drawn = False


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):     # no isatty, or a closed stream
        return False


def _width(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80
