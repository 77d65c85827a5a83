"""Discrete-event engine over integer picoseconds.

Contract
--------
* Time is an ``int`` number of picoseconds (``panama.core.units``); ``Engine.now`` is
  the time of the event being processed. Nothing here reads a wall clock.
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

from collections.abc import Callable
from functools import partial
from heapq import heappop, heappush
from typing import Any

__all__ = ["Engine", "Timer", "TraceRecorder", "StopRun"]

_NEVER = 1 << 62  # later than any simulated time (about 53 days)


class StopRun(Exception):
    """Raised inside a callback (or via :meth:`Engine.stop`) to end :meth:`Engine.run` now."""


class Engine:
    """The event list and the simulated clock.

    ``trace``: ``None`` or a callable receiving flat tuples ``(time_ps, event, *fields)``
    (schema in docs/simulator-network.md). The engine reads no wall clock: a driver that
    wants a progress display runs it in slices of simulated time (as
    :meth:`panama.sim.runner.Simulation.run` does).
    """

    __slots__ = ("now", "heap", "seq", "trace", "events")

    def __init__(self, *, trace: Callable[[tuple], None] | None = None):
        self.now: int = 0
        self.heap: list[tuple[int, int, Callable[[], Any]]] = []
        # Tie-breaking sequence number of the last push (every push goes through push()).
        self.seq = 0
        self.trace = trace
        self.events: int = 0  # events processed so far (all runs)

    # ------------------------------------------------------------------ scheduling
    def at(self, time_ps: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` at absolute time ``time_ps`` (>= now). No cancellation: use
        :class:`Timer` for events that may be withdrawn."""
        if time_ps < self.now:
            raise ValueError(f"cannot schedule at {time_ps} ps, before now={self.now} ps")
        self.push(time_ps, callback)

    def after(self, delay_ps: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` ``delay_ps`` (>= 0) after now."""
        self.at(self.now + delay_ps, callback)

    def push(self, time_ps: int, callback: Callable[[], Any]) -> None:
        """Unchecked :meth:`at` for hot paths of components that know ``time_ps >= now``."""
        seq = self.seq + 1
        self.seq = seq
        heappush(self.heap, (time_ps, seq, callback))

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
        limit = _NEVER if until_ps is None else until_ps
        n = 0
        last = self.now  # time of the last event that did something (stale timer entries do not)
        try:
            while heap:
                t, seq, fn = heappop(heap)
                if t > limit:
                    heappush(heap, (t, seq, fn))
                    break
                self.now = t
                n += 1
                if fn() is _STALE:
                    self.now = last
                else:
                    last = t
        except StopRun:
            pass
        if until_ps is not None and self.now < until_ps and (not heap or heap[0][0] > until_ps):
            self.now = until_ps
        self.events += n
        return n


# Returned by an event callback that did nothing (a superseded or cancelled timer entry):
# :meth:`Engine.run` then leaves ``now`` at the previous event's time, so a run that drains
# the heap ends at its last real event, not at a withdrawn deadline.
_STALE = object()


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
