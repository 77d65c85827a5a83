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
* Compiled (the fast path, ``engine.pxd``), the heap is a C array of ``(t, seq)`` keys
  of pending :class:`Event` objects (held in ``Engine.heap``, see :func:`_heap_push`)
  and the engine calls their ``fire()`` as a C method; interpreted, ``Engine.heap`` is a
  heap of ``(time_ps, seq, callback)`` tuples for ``heapq``. Use :meth:`Engine.pending`
  and :meth:`Engine.next_time` rather than ``Engine.heap`` itself. Both pop
  events in the same ``(time, seq)`` order, so a run gives the same results either way.
  Components that schedule often subclass :class:`Event` and use :meth:`Engine.schedule`;
  :meth:`Engine.push` takes any callable.
* Tracing is off by default: ``Engine(trace=callable)`` makes ``engine.trace`` a
  callable taking one flat tuple; components test ``if trace is not None`` once per
  traced action. :class:`TraceRecorder` collects records in a list.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

__all__ = ["Engine", "Event", "Timer", "TraceRecorder", "StopRun"]

_NEVER = 1 << 62  # later than any simulated time (about 53 days)

# True when this module runs as a compiled extension (see the module docstring).
_COMPILED = not __file__.endswith(".py")


class StopRun(Exception):
    """Raised inside a callback (or via :meth:`Engine.stop`) to end :meth:`Engine.run` now."""


class Event:
    """Something the engine can schedule directly (:meth:`Engine.schedule`): ``fire()`` is
    called when it is due. One object is in the heap at most once at a time (its ``t`` and
    ``seq`` are its heap key when compiled), so components keep one pending event per
    :class:`Event` object. ``_fire_cb`` is the callable the interpreted heap stores
    (``fire`` unless a subclass picks a more specific method)."""

    __slots__ = ("t", "seq", "_fire_cb")

    def __init__(self) -> None:
        self.t = 0
        self.seq = 0
        self._fire_cb = self.fire

    def fire(self) -> object:  # pragma: no cover - abstract
        raise NotImplementedError


class _Call(Event):
    """A plain callable as a heap entry (compiled heap only)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]):
        self.t = 0
        self.seq = 0
        self.fn = fn
        self._fire_cb = fn

    def fire(self) -> object:
        return self.fn()


def _heap_push(eng: Engine, ev: Event) -> None:
    """Push ``ev`` (key ``(ev.t, ev.seq)``) on the compiled heap of ``eng``.

    The compiled heap is a C array of ``(t, seq, slot)`` keys, 16 bytes each
    (``eng._keys``, ``eng._n`` of them; engine.pxd); ``slot`` is the event's position in
    ``eng.heap``, a list that only owns the pending events (visible to the garbage
    collector) and whose free positions are reused (``eng._vacant``). Sifting moves keys
    in contiguous memory and never touches the events themselves."""
    if ev.seq >> _SEQ_BITS:  # noqa: F821 - engine.pxd
        raise OverflowError("engine: more than 2**40 events scheduled in one run")
    n = eng._n
    if n >= eng._kcap:
        eng._grow_keys()
    heap = eng.heap
    if eng._nfree:
        eng._nfree -= 1
        slot = eng._vacant[eng._nfree]
        heap[slot] = ev
    else:
        slot = len(heap)
        if slot >> _SLOT_BITS:  # noqa: F821 - engine.pxd
            raise OverflowError("engine: more than 2**24 events pending")
        heap.append(ev)
    keys = eng._keys
    k = _key(ev.t, ev.seq, slot)  # noqa: F821 - engine.pxd: (t, seq, slot) as one 128-bit integer
    pos = n
    while pos > 0:
        up = (pos - 1) >> 1
        if keys[up].k < k:
            break
        keys[pos] = keys[up]
        pos = up
    keys[pos].k = k
    eng._n = n + 1


def _heap_pop(eng: Engine) -> Event:
    """Pop the smallest :class:`Event` of the non-empty compiled heap of ``eng``."""
    keys = eng._keys
    heap = eng.heap
    slot = _key_slot(keys[0].k)  # noqa: F821 - engine.pxd
    top = _event_at(heap, slot)  # noqa: F821 - engine.pxd: no type test (only Events are pushed)
    heap[slot] = None
    eng._vacant[eng._nfree] = slot
    eng._nfree += 1
    n = eng._n - 1
    eng._n = n
    if not n:
        return top
    k = keys[n].k
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        ck = keys[child].k
        if child + 1 < n and keys[child + 1].k < ck:
            child += 1
            ck = keys[child].k
        if k < ck:
            break
        keys[pos] = keys[child]
        pos = child
    keys[pos].k = k
    _prefetch_event(heap, _key_slot(keys[0].k))  # noqa: F821 - engine.pxd
    return top


class Engine:
    """The event list and the simulated clock.

    ``trace``: ``None`` or a callable receiving flat tuples ``(time_ps, event, *fields)``
    (schema in docs/simulator-network.md). The engine reads no wall clock: a driver that
    wants a progress display runs it in slices of simulated time (as
    :meth:`panama.sim.runner.Simulation.run` does).
    """

    __slots__ = ("now", "heap", "seq", "trace", "events", "_kcap", "_n", "_nfree")

    def __init__(self, *, trace: Callable[[tuple], None] | None = None):
        self.now: int = 0
        self.heap: list[tuple[int, int, Callable[[], Any]]] = []
        # Tie-breaking sequence number of the last push (every push goes through push()).
        self.seq = 0
        self.trace = trace
        self.events: int = 0  # events processed so far (all runs)
        # Compiled heap (see _heap_push): capacity of the C arrays ``_keys`` (the heap's
        # keys, ``_n`` of them) and ``_vacant`` (``_nfree`` free positions of ``heap``).
        self._kcap = 0
        self._n = 0
        self._nfree = 0

    def _grow_keys(self) -> None:
        """Compiled heap only: double the key array (``PyMem_Realloc``, from engine.pxd)."""
        cap = self._kcap * 2 if self._kcap else 1024
        self._keys = _realloc_keys(self._keys, cap)  # noqa: F821 - defined in engine.pxd
        self._vacant = _realloc_slots(self._vacant, cap)  # noqa: F821 - defined in engine.pxd
        self._kcap = cap

    def __dealloc__(self) -> None:  # compiled only (a no-op method when interpreted)
        _free_keys(self._keys, self._vacant)  # noqa: F821 - defined in engine.pxd

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
        if _COMPILED:
            ev = _Call(callback)
            ev.t = time_ps
            ev.seq = seq
            _heap_push(self, ev)
        else:
            heappush(self.heap, (time_ps, seq, callback))

    def schedule(self, time_ps: int, ev: Event) -> None:
        """Fire ``ev`` at ``time_ps`` (>= now, unchecked); ``ev`` must not be pending."""
        seq = self.seq + 1
        self.seq = seq
        if _COMPILED:
            ev.t = time_ps
            ev.seq = seq
            _heap_push(self, ev)
        else:
            heappush(self.heap, (time_ps, seq, ev._fire_cb))

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
        return self._n if _COMPILED else len(self.heap)

    def next_time(self) -> int | None:
        """Time of the earliest pending heap entry, or None."""
        if _COMPILED:
            return _key_t(self._keys[0].k) if self._n else None  # noqa: F821 - engine.pxd
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
            if _COMPILED:
                while self._n:
                    t = _key_t(self._keys[0].k)  # noqa: F821 - engine.pxd
                    if t > limit:
                        break
                    ev = _heap_pop(self)
                    self.now = t
                    n += 1
                    if ev.fire() is _STALE:
                        self.now = last
                    else:
                        last = t
            else:
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
        if until_ps is not None and self.now < until_ps:
            nxt = self.next_time()
            if nxt is None or nxt > until_ps:
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
        eng.schedule(time_ps, _TimerEntry(self, self._token))

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
            eng.schedule(when, _TimerEntry(self, self._token))
            return _STALE  # re-armed later: nothing happened now
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
        return self.timer._fire(self.token)


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
