"""The event queue (either implementation) against a reference: a seeded random mix of
events, far and near, that fire in exact ``(time, seq)`` order.

The C queue keeps entries due far ahead (about 17 us or more) in a second heap and moves
them to the near one when they come first; the mix crosses that boundary both ways, with
ties between a far entry pushed early and near ones pushed later at the same time,
events that schedule themselves again (near or far) while they fire, plain callables,
timers with stale entries, and runs cut into slices with pushes between them. Events are
scheduled through ``EventQueue.schedule`` and through ``schedule_event``, alike.
"""

from __future__ import annotations

import random

import pytest

from panama.sim.engine import Engine
from panama.sim.heap import Event, schedule_event

_FAR = 1 << 24  # the C queue's boundary (heap.pyx, _FAR_PS)
_DELAYS = (0, 1, 7, 300, 5_000, 1_000_000, _FAR - 1, _FAR, _FAR + 1, 3 * _FAR, 200_000_000)


class _Model:
    """What the engine should do: each entry a label ``(t, n)`` (``n`` counts this test's
    scheduling calls, in the engine's seq order); pops in sorted label order."""

    def __init__(self, eng: Engine, rng: random.Random):
        self.eng = eng
        self.rng = rng
        self.n = 0
        self.pending: set[tuple[int, int]] = set()
        self.fired: list[tuple[int, int]] = []
        self.checks = 0

    def label(self, t: int) -> tuple[int, int]:
        self.n += 1
        lab = (t, self.n)
        self.pending.add(lab)
        return lab

    def fire(self, lab: tuple[int, int]) -> None:
        assert self.eng.now == lab[0]
        self.pending.remove(lab)
        self.fired.append(lab)
        self.check()

    def check(self) -> None:
        # The engine's count also has the timers' entries: compare the earliest only
        # when no timer entry can be earlier (there are none in this part of the run).
        if not self.timers_live and self.rng.random() < 0.2:
            self.checks += 1
            assert self.eng.pending() == len(self.pending)
            nxt = min(self.pending)[0] if self.pending else None
            assert self.eng.next_time() == nxt

    timers_live = False

    def delay(self) -> int:
        d = self.rng.choice(_DELAYS)
        return d + self.rng.randrange(3) if d else 0


class _Again(Event):
    """Fires, records, and sometimes schedules itself again (keeping its slot in C)."""

    __slots__ = ("model", "lab", "left")

    def __init__(self, model: _Model, left: int):
        super().__init__()
        self.model = model
        self.left = left
        self.lab = None

    def put(self, t: int) -> None:
        self.lab = self.model.label(t)
        # Both entry points: the method, and the function the components call (compiled,
        # the method's body inline in them; here, from Python, the C function itself).
        if self.model.rng.random() < 0.5:
            self.model.eng.schedule(t, self)
        else:
            schedule_event(self.model.eng, t, self)

    def fire(self):
        m = self.model
        m.fire(self.lab)
        if self.left:
            self.left -= 1
            self.put(m.eng.now + m.delay())
            m.check()
        r = m.rng.random()
        if r < 0.3:
            t = m.eng.now + m.delay()
            lab = m.label(t)
            m.eng.at(t, lambda: m.fire(lab))
        elif r < 0.4:
            _Again(m, m.rng.randrange(4)).put(m.eng.now + m.delay())


def _mix(seed: int, timers: bool) -> _Model:
    rng = random.Random(seed)
    eng = Engine()
    m = _Model(eng, rng)
    m.timers_live = timers
    # Ties across the boundary: an entry far ahead, then near ones at the same time.
    tie = 2 * _FAR + 5
    for _ in range(3):
        lab = m.label(tie)
        eng.at(tie, lambda lab=lab: m.fire(lab))
    for _ in range(400):
        _Again(m, rng.randrange(6)).put(rng.choice((0, 10, 1_000, _FAR, 5 * _FAR)) + rng.randrange(50))
    if timers:  # stale entries (re-armed later or earlier, cancelled) among the others
        for _ in range(60):
            tm = eng.timer(lambda: None)
            tm.arm(rng.randrange(4 * _FAR))
            tm.arm(rng.randrange(4 * _FAR))
            if rng.random() < 0.3:
                tm.cancel()
    end = 0
    while m.pending:
        end += rng.choice((1_000, _FAR // 3, 4 * _FAR))
        eng.run(until_ps=end)
        assert eng.now == end or not m.pending
        if rng.random() < 0.5:  # between slices: near the clock
            t = eng.now + rng.choice((0, 1, 7_000, _FAR + 3))
            lab = m.label(t)
            eng.at(t, lambda lab=lab: m.fire(lab))
        if rng.random() < 0.3:  # and one tied with the far ties
            lab = m.label(max(tie, eng.now))
            eng.at(lab[0], lambda lab=lab: m.fire(lab))
    eng.run()
    return m


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("timers", [False, True])
def test_random_mix_fires_in_time_then_scheduling_order(seed, timers):
    m = _mix(seed, timers)
    assert len(m.fired) > 2_000
    assert m.fired == sorted(m.fired)
    assert not m.pending and m.eng.pending() == 0 and m.eng.next_time() is None
    if not timers:
        assert m.checks > 100


def test_a_far_entry_comes_before_a_later_pushed_near_one_at_the_same_time():
    eng = Engine()
    seen = []
    t = 3 * _FAR
    eng.at(t, lambda: seen.append("far"))  # pushed at 0: far ahead
    eng.at(t - 10, lambda: eng.at(t, lambda: seen.append("near")))  # pushed 10 ps ahead
    eng.at(t + _FAR, lambda: seen.append("later"))
    assert eng.pending() == 3 and eng.next_time() == t - 10
    eng.run()
    assert seen == ["far", "near", "later"] and eng.now == t + _FAR


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 17, 21, 22, 85, 86, 200])
def test_small_and_ragged_heaps_re_key_their_root_in_order(n):
    """``n`` events that each schedule themselves again while they fire (the C queue
    re-keys its root: a sift through full groups of four siblings, then a partial one)
    and a plain callable now and then: pops in exact (time, seq) order for heap sizes at
    and around the group boundaries (1 + 4 + 16 + 64 ...)."""
    rng = random.Random(n)
    eng = Engine()
    m = _Model(eng, rng)
    for _ in range(n):
        _Again(m, rng.randrange(40)).put(rng.randrange(2_000))
    eng.run()
    assert len(m.fired) >= n
    assert m.fired == sorted(m.fired)
    assert not m.pending and eng.pending() == 0


def test_an_entry_pushed_behind_the_latest_stale_one_still_comes_first():
    """A stale entry (it returns STALE) does not move ``now``, though the C queue's wheel
    moves past it: an entry pushed afterwards between ``now`` and the stale entry's time
    (here between two ``run_due`` calls) fires before every later one, in (time, seq)
    order, on both implementations."""
    from panama.sim.heap import STALE

    eng = Engine()
    seen = []
    eng.at(100, lambda: seen.append(100))
    eng.at(12_000, lambda: STALE)  # a cancelled timer's entry, say
    for t in (50_000, 50_000, 3 * _FAR):
        eng.at(t, lambda t=t: seen.append(t))
    assert eng.run_due(20_000) == 2 and eng.now == 100
    for t in (500, 12_000, 50_000):
        eng.at(t, lambda t=t: seen.append(-t))  # behind the stale entry, then among the rest
    assert eng.pending() == 6 and eng.next_time() == 500
    eng.run()
    assert seen == [100, -500, -12_000, 50_000, 50_000, -50_000, 3 * _FAR]
    assert eng.pending() == 0 and eng.next_time() is None
