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
* The event list itself, and the loop that runs it, are the component
  :mod:`panama.sim.heap` (:class:`~panama.sim.heap.EventQueue`), which has a
  pure-Python and a C implementation chosen once at import; :class:`Engine` adds the
  scheduling API on top. Use :meth:`Engine.pending` and :meth:`Engine.next_time`
  rather than ``Engine.heap`` itself (its entries differ between the two).
  Components that schedule often subclass :class:`Event` and use :meth:`Engine.schedule`;
  :meth:`Engine.push` takes any callable.
* Tracing is off by default: ``Engine(trace=callable)`` makes ``engine.trace`` a
  callable taking one flat tuple; components test ``if trace is not None`` once per
  traced action. :class:`TraceRecorder` collects records in a list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from panama.sim.heap import STALE, Event, EventQueue, StopRun, schedule_event

__all__ = ["Engine", "Event", "Timer", "TraceRecorder", "StopRun"]

_NEVER = 1 << 62  # later than any simulated time (about 53 days)
_STALE = STALE


class Engine(EventQueue):
    """The event list and the simulated clock.

    ``trace``: ``None`` or a callable receiving flat tuples ``(time_ps, event, *fields)``
    (schema in docs/simulator-network.md). The engine reads no wall clock: a driver that
    wants a progress display runs it in slices of simulated time (as
    :meth:`panama.sim.runner.Simulation.run` does).
    """

    __slots__ = ("trace",)

    def __init__(self, *, trace: Callable[[tuple], None] | None = None):
        super().__init__()
        self.trace = trace

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

    def timer(self, callback: Callable[[], Any]) -> Timer:
        """A re-armable, cancellable timer calling ``callback()``."""
        return Timer(self, callback)

    def stop(self) -> None:
        """End the current :meth:`run` after the events already due at ``now``."""
        self.push(self.now, self._raise_stop)

    @staticmethod
    def _raise_stop() -> None:
        raise StopRun

    # ------------------------------------------------------------------ running
    def run(self, until_ps: int | None = None) -> int:
        """Process events in (time, seq) order until the heap is empty, an event later than
        ``until_ps`` is next (it stays queued; ``now`` becomes ``until_ps``), or
        :meth:`stop` / :class:`StopRun`. Returns the number of events processed."""
        n = self.run_due(_NEVER if until_ps is None else until_ps)
        if until_ps is not None and self.now < until_ps:
            nxt = self.next_time()
            if nxt is None or nxt > until_ps:
                self.now = until_ps
        self.events += n
        return n


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
        self._entry_time = -1  # time of the live heap entry; -1: none (times are >= 0)
        self._token = 0

    def arm(self, time_ps: int) -> None:
        eng = self.engine
        if time_ps < eng.now:
            time_ps = eng.now
        self.when = time_ps
        if 0 <= self._entry_time <= time_ps:
            return  # the live entry comes first: on expiry it re-arms for the deadline
        self._token += 1
        self._entry_time = time_ps
        schedule_event(eng, time_ps, _TimerEntry(self, self._token))

    def cancel(self) -> None:
        self.when = None

    @property
    def armed(self) -> bool:
        return self.when is not None

    def _fire(self, entry: _TimerEntry) -> object:
        """``entry`` (one of this timer's) is due now."""
        if entry.token != self._token:
            return _STALE  # superseded entry: the engine does not let it move ``now``
        self._entry_time = -1
        if self.when is None:
            return _STALE  # cancelled
        when = self.when  # an int from here on
        eng = self.engine
        if when > eng.now:
            # Re-armed later: the entry firing now goes back in the heap for the deadline
            # (scheduling the event being fired keeps its place in the C queue: a re-key,
            # not a push and a pop).
            self._token += 1
            entry.token = self._token
            self._entry_time = when
            schedule_event(eng, when, entry)
            return _STALE  # nothing happened now
        self.when = None
        self.callback()
        return None


class _TimerEntry(Event):
    """One heap entry of a :class:`Timer` (``token`` tells a live entry from stale ones)."""

    __slots__ = ("timer", "token")

    def __init__(self, timer: Timer, token: int):
        self.t = 0
        self.seq = 0
        self.timer = timer
        self.token = token
        self._fire_cb = self.fire

    def fire(self) -> object:
        return self.timer._fire(self)


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
