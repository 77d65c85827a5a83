"""Discrete-event engine over integer picoseconds.

Contract
--------
* Time is an ``int`` number of picoseconds (``panama.core.units``); ``Engine.now`` is
  the time of the event being processed. Nothing reads a wall clock except the
  optional progress display.
* The event list is a heap of ``(time_ps, seq, callback)`` tuples; ``seq`` increases
  with every push, so events at equal times run in the order they were scheduled and a
  run is deterministic. Callbacks take no arguments (bound methods made once per
  component, never per packet).
* Cancellation is lazy: :class:`Timer` keeps at most one live heap entry and ignores
  stale ones; a component that only ever moves its deadline later (retransmission
  timers) costs one heap push per expiry, not one per re-arm.
* Components keep at most one pending event each (ports, pipes, timers), so the heap
  stays about as large as the number of busy components.
* Randomness is never drawn here; components receive a seeded
  ``numpy.random.Generator`` from their owner.
* Tracing is off by default: ``Engine(trace=callable)`` makes ``engine.trace`` a
  callable taking one flat tuple; components test ``if trace is not None`` once per
  traced action. :class:`TraceRecorder` collects records in a list.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from functools import partial
from heapq import heappop, heappush
from typing import Any

from panama.core.units import PS_PER_MS

__all__ = ["Engine", "Timer", "TraceRecorder", "StopRun"]

_CHUNK = 1 << 14  # events between progress / wall-clock checks


class StopRun(Exception):
    """Raised inside a callback (or via :meth:`Engine.stop`) to end :meth:`Engine.run` now."""


class Engine:
    """The event list and the simulated clock.

    ``progress``: ``None`` (default) shows a status line on stderr every
    ``progress_every_s`` wall seconds once a run has lasted ``progress_after_s``;
    ``False`` never; ``True`` is the same as ``None``. ``trace``: ``None`` or a callable receiving flat tuples
    ``(time_ps, event, *fields)`` (schema in docs/simulator-network.md).
    """

    __slots__ = ("now", "heap", "counter", "trace", "progress", "progress_after_s", "progress_every_s", "events")

    def __init__(
        self,
        *,
        trace: Callable[[tuple], None] | None = None,
        progress: bool | None = None,
        progress_after_s: float = 3.0,
        progress_every_s: float = 2.0,
    ):
        self.now: int = 0
        self.heap: list[tuple[int, int, Callable[[], Any]]] = []
        # Tie-breaking sequence numbers: ``next(counter)``. Hot components push
        # ``(time, next(counter), callback)`` onto ``heap`` directly (same as push()).
        self.counter = itertools.count()
        self.trace = trace
        self.progress = progress
        self.progress_after_s = progress_after_s
        self.progress_every_s = progress_every_s
        self.events: int = 0  # events processed so far (all runs)

    # ------------------------------------------------------------------ scheduling
    def at(self, time_ps: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` at absolute time ``time_ps`` (>= now). No cancellation: use
        :class:`Timer` for events that may be withdrawn."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        heappush(self.heap, (time_ps, next(self.counter), callback))

    def after(self, delay_ps: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` ``delay_ps`` (>= 0) after now."""
        self.at(self.now + delay_ps, callback)

    def push(self, time_ps: int, callback: Callable[[], Any]) -> None:
        """Unchecked :meth:`at` for hot paths of components that know ``time_ps >= now``."""
        heappush(self.heap, (time_ps, next(self.counter), callback))

    def timer(self, callback: Callable[[], Any]) -> Timer:
        """A re-armable, cancellable timer calling ``callback()``."""
        return Timer(self, callback)

    def stop(self) -> None:
        """End the current :meth:`run` after the events already due at ``now``."""
        self.push(self.now, self._raise_stop)

    @staticmethod
    def _raise_stop() -> None:
        raise StopRun

    def pending(self) -> int:
        """Heap entries (including stale timer entries)."""
        return len(self.heap)

    def next_time(self) -> int | None:
        return self.heap[0][0] if self.heap else None

    # ------------------------------------------------------------------ running
    def run(self, until_ps: int | None = None) -> int:
        """Process events in (time, seq) order until the heap is empty, an event later than
        ``until_ps`` is next (it stays queued; ``now`` becomes ``until_ps``), or
        :meth:`stop` / :class:`StopRun`. Returns the number of events processed."""
        heap = self.heap
        pop = heappop
        push = heappush
        limit = until_ps if until_ps is not None else (1 << 62)
        rng = range(_CHUNK)
        n = 0
        i = -1
        last = self.now  # time of the last event that did something (stale timer entries do not)
        wall0 = time.monotonic()
        status = None if self.progress is False else _Status(self, until_ps, wall0)
        try:
            while True:
                for i in rng:
                    if not heap:
                        raise _Drained
                    t, seq, fn = pop(heap)
                    if t > limit:
                        push(heap, (t, seq, fn))
                        raise _Drained
                    self.now = t
                    if fn() is _STALE:
                        self.now = last
                    else:
                        last = t
                n += _CHUNK
                i = -1
                if status is not None:
                    status.tick(n)
        except _Drained:
            done = n + i  # event ``i`` of this chunk was not processed
        except StopRun:
            done = n + i + 1
        if until_ps is not None and self.now < until_ps and (not heap or heap[0][0] > until_ps):
            self.now = until_ps
        if status is not None:
            status.close()
        self.events += done
        return done


class _Drained(Exception):
    pass


# Returned by an event callback that did nothing (a superseded or cancelled timer entry):
# :meth:`Engine.run` then leaves ``now`` at the previous event's time, so a run that drains
# the heap ends at its last real event, not at a withdrawn deadline.
_STALE = object()


class _Status:
    """Periodic one-line status on stderr for long runs (after ``progress_after_s``)."""

    __slots__ = ("engine", "until", "wall0", "last", "shown")

    def __init__(self, engine: Engine, until: int | None, wall0: float):
        self.engine = engine
        self.until = until
        self.wall0 = wall0
        self.last = wall0
        self.shown = False

    def tick(self, n: int) -> None:
        w = time.monotonic()
        eng = self.engine
        if w - self.wall0 < eng.progress_after_s or (self.shown and w - self.last < eng.progress_every_s):
            return
        self.last = w
        self.shown = True
        now_ms = self.engine.now / PS_PER_MS
        if self.until:
            pct = 100.0 * self.engine.now / self.until
            where = f"{now_ms:.3f}/{self.until / PS_PER_MS:.3f} ms ({pct:.0f}%)"
        else:
            where = f"{now_ms:.3f} ms"
        rate = n / (w - self.wall0)
        print(f"\r[sim] t={where} events={n:,} ({rate / 1e3:.0f}k ev/s, {w - self.wall0:.0f}s)",
              end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)


class Timer:
    """A re-armable timer with at most one live heap entry (lazy cancellation).

    ``arm(t)`` sets the deadline to ``t``; if the live entry is due no later than ``t`` it
    is reused (on expiry the timer re-pushes itself at the later deadline), otherwise a
    new entry is pushed and the old one becomes stale. ``cancel()`` clears the deadline.
    ``when`` is the current deadline or ``None``. Stale and cancelled entries still pop
    (and count as processed events) but do not move the engine's ``now``.
    """

    __slots__ = ("engine", "callback", "when", "_entry_time", "_token")

    def __init__(self, engine: Engine, callback: Callable[[], Any]):
        self.engine = engine
        self.callback = callback
        self.when: int | None = None
        self._entry_time: int | None = None
        self._token = 0

    def arm(self, time_ps: int) -> None:
        eng = self.engine
        if time_ps < eng.now:
            time_ps = eng.now
        self.when = time_ps
        et = self._entry_time
        if et is not None and et <= time_ps:
            return
        self._token += 1
        self._entry_time = time_ps
        eng.push(time_ps, partial(self._fire, self._token))

    def cancel(self) -> None:
        self.when = None

    @property
    def armed(self) -> bool:
        return self.when is not None

    def _fire(self, token: int) -> object:
        if token != self._token:
            return _STALE  # superseded entry: the engine does not let it move ``now``
        self._entry_time = None
        when = self.when
        if when is None:
            return _STALE  # cancelled
        eng = self.engine
        if when > eng.now:
            self._token += 1
            self._entry_time = when
            eng.push(when, partial(self._fire, self._token))
            return _STALE  # re-armed later: nothing happened now
        self.when = None
        self.callback()
        return None


class TraceRecorder:
    """Collects trace tuples; pass ``recorder`` as ``Engine(trace=recorder)``.

    ``events``: optional set of event names to keep (others are ignored)."""

    __slots__ = ("records", "events")

    def __init__(self, events: set[str] | None = None):
        self.records: list[tuple] = []
        self.events = events

    def __call__(self, record: tuple) -> None:
        if self.events is None or record[1] in self.events:
            self.records.append(record)
