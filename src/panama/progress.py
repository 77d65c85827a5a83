"""Progress reporting for long work, shared by every layer above the core.

:class:`Throttle` says when it is time to report again (at most every ``interval_s``,
never before ``first_after_s``); :class:`StatusLine` rewrites one status line in place
on a stream (stderr by default) with it and ends the line on :meth:`StatusLine.close`.
Sweeps over many runs use ``tqdm`` bars instead (``panama.experiments.sweep``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["StatusLine", "Throttle"]


class Throttle:
    """``ready()`` is True at most every ``interval_s`` seconds of ``clock``, and not before
    ``first_after_s`` seconds after construction."""

    def __init__(self, interval_s: float, *, first_after_s: float = 0.0, clock: Callable[[], float] = time.monotonic):
        if interval_s < 0 or first_after_s < 0:
            raise ValueError(f"interval_s and first_after_s must be >= 0, got {interval_s}, {first_after_s}")
        self.interval_s = interval_s
        self.first_after_s = first_after_s
        self.clock = clock
        self.start = clock()
        self.last = self.start if first_after_s == 0 else None

    def elapsed(self) -> float:
        return self.clock() - self.start

    def ready(self) -> bool:
        now = self.clock()
        if now - self.start < self.first_after_s:
            return False
        if self.last is not None and now - self.last < self.interval_s:
            return False
        self.last = now
        return True


class StatusLine:
    """One status line rewritten in place (``\\r``) at most every ``interval_s`` once the work
    has lasted ``first_after_s``; :meth:`close` ends it with a newline if it was shown."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        first_after_s: float = 2.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.throttle = Throttle(interval_s, first_after_s=first_after_s, clock=clock)
        self.stream = stream
        self.shown = False

    def update(self, text: Callable[[float], str]) -> None:
        """Show ``text(elapsed_s)`` if it is time to (the text is only built then)."""
        if not self.throttle.ready():
            return
        self.shown = True
        print("\r" + text(self.throttle.elapsed()), end="", file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=self.stream or sys.stderr, flush=True)
            self.shown = False
