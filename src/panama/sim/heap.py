"""The simulator's event queue and its run loop: one component, two implementations.

* ``heap.py`` (this file, pure Python): a heap of ``(time_ps, seq, callback)`` tuples
  for :mod:`heapq`; an :class:`Event` is stored as its ``_fire_cb`` callable.
* ``heap.pyx`` (C, with ``heap.pxd``): a C array of 16-byte ``(t, seq, slot)`` keys of
  the pending :class:`Event` objects (a plain callable is wrapped in one), whose
  ``fire()`` the loop calls as a C method.

Which one runs is chosen once, at import, with the rest of the compiled fast path
(:mod:`panama._ext`): ``setup.py`` builds ``heap.pyx`` into an extension module of this
module's name, which the import system prefers to this file; with
``PANAMA_NO_EXTENSIONS=1``, with stale extensions or without a compiler, this file runs.
Both pop entries in the same ``(time, seq)`` order, so a run gives the same results
either way (``tests/sim/test_compiled.py``).

Contract (both): ``now`` is the time of the event being processed; ``seq`` increases
with every push (ties run in the order they were scheduled); :meth:`EventQueue.run_due`
pops and runs entries up to a time limit and returns how many it ran. A callback that
did nothing (a superseded or cancelled timer entry) returns :data:`STALE`: ``now`` then
stays at the previous real event's time. :class:`StopRun` raised by a callback ends the
loop after that callback. ``schedule_event(q, t, ev)`` is ``q.schedule(t, ev)``, the name
the simulator's components call (compiled, the method's body inline in each of them).
:class:`panama.sim.engine.Engine` builds the scheduling API (``at``, ``after``, timers) on
this class.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

__all__ = ["Event", "EventQueue", "StopRun", "STALE", "IMPLEMENTATION", "schedule_event"]

IMPLEMENTATION = "python"  # "C" in heap.pyx

# Returned by an event callback that did nothing (see the module docstring).
STALE = object()


class StopRun(Exception):
    """Raised inside a callback (or via ``Engine.stop``) to end the run now."""


class Event:
    """Something the queue can schedule directly (:meth:`EventQueue.schedule`): ``fire()``
    is called when it is due. One object is pending at most once at a time, so components
    keep one pending event per :class:`Event` object. ``t`` and ``seq`` are its key in the
    C implementation; ``_fire_cb`` is the callable this one stores (``fire`` unless a
    subclass picks a more specific method)."""

    __slots__ = ("t", "seq", "_fire_cb")

    def __init__(self) -> None:
        self.t = 0
        self.seq = 0
        self._fire_cb = self.fire

    def fire(self) -> object:  # pragma: no cover - abstract
        raise NotImplementedError


class EventQueue:
    """The pending events, the clock ``now`` and the loop that runs them."""

    __slots__ = ("now", "heap", "seq", "events")

    def __init__(self) -> None:
        self.now: int = 0
        self.heap: list[tuple[int, int, Callable[[], Any]]] = []
        self.seq = 0  # tie-breaking sequence number of the last push
        self.events: int = 0  # events processed so far (all runs)

    def push(self, time_ps: int, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` at ``time_ps`` (>= now, unchecked)."""
        seq = self.seq + 1
        self.seq = seq
        heappush(self.heap, (time_ps, seq, callback))

    def schedule(self, time_ps: int, ev: Event) -> None:
        """Fire ``ev`` at ``time_ps`` (>= now, unchecked); ``ev`` must not be pending."""
        seq = self.seq + 1
        self.seq = seq
        heappush(self.heap, (time_ps, seq, ev._fire_cb))

    def pending(self) -> int:
        """Pending entries (including stale timer entries)."""
        return len(self.heap)

    def next_time(self) -> int | None:
        """Time of the earliest pending entry, or None."""
        return self.heap[0][0] if self.heap else None

    def run_due(self, limit: int) -> int:
        """Run entries in ``(time, seq)`` order while the earliest is due at or before
        ``limit`` (it stays queued otherwise), until none is left or a callback raises
        :class:`StopRun`. Returns the number of entries run."""
        heap = self.heap
        n = 0
        last = self.now  # time of the last event that did something
        try:
            while heap:
                t, seq, fn = heappop(heap)
                if t > limit:
                    heappush(heap, (t, seq, fn))
                    break
                self.now = t
                n += 1
                if fn() is STALE:
                    self.now = last
                else:
                    last = t
        except StopRun:
            pass
        return n


# ``schedule_event(q, t, ev)`` is ``q.schedule(t, ev)``. The simulator's components call
# this name: compiled, each has the method's body inline (heap.pxd); interpreted, it is the
# method itself, called as a function (no extra call).
schedule_event = EventQueue.schedule
