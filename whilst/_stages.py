"""Long work in named, timed stages, reported as it happens: to an optional hook
`progress(label, seconds, done)` and to the `whilst` logger at INFO level.

The hook is called when a stage starts (`seconds` 0.0, `done` False), when its label
changes while it runs (a fallback: `done` False, the seconds so far) and when it
finishes (`done` True, its duration). Like any library's, the `whilst` logger prints
nothing unless the application configures logging, e.g.
`logging.basicConfig(level=logging.INFO)`.
"""
from __future__ import annotations

import contextlib
import logging
import time

logger = logging.getLogger("whilst")
logger.addHandler(logging.NullHandler())


class Stage:
    """A running stage; `label` says what it does."""

    def __init__(self, stages: Stages, label: str):
        self.label = label
        self.started = time.perf_counter()
        self._stages = stages

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def relabel(self, label: str) -> None:
        """Say that the stage now does `label` (reported at once)."""
        self.label = label
        self._stages.report(label, self.seconds, False)


class Stages:
    """Runs named stages (`with stages(label) as stage: ...`) and reports them (see the
    module doc); `done` lists `(label, seconds)` of those that finished."""

    def __init__(self, progress=None):
        self.done: list[tuple[str, float]] = []
        self._progress = progress

    @contextlib.contextmanager
    def __call__(self, label: str):
        stage = Stage(self, label)
        self.report(label, 0.0, False)
        try:
            yield stage
        except BaseException:
            logger.info("%s: failed after %.3f s", stage.label, stage.seconds)
            raise
        self.record(stage.label, stage.seconds)

    def record(self, label: str, seconds: float) -> None:
        """A stage that finished (timed by the caller)."""
        self.done.append((label, seconds))
        self.report(label, seconds, True)

    def report(self, label: str, seconds: float, done: bool) -> None:
        if done:
            logger.info("%s: done in %.3f s", label, seconds)
        else:
            logger.info("%s: running (%.1f s)", label, seconds)
        if self._progress is not None:
            self._progress(label, seconds, done)
