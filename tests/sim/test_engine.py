"""Event engine: ordering, ties, timers with lazy cancellation, stop, until."""

from __future__ import annotations

import pytest

from panama.sim.engine import Engine, StopRun, TraceRecorder


def test_events_run_in_time_then_scheduling_order():
    eng = Engine()
    seen = []
    for t, name in [(30, "c"), (10, "a"), (20, "b1"), (20, "b2"), (10, "a2")]:
        eng.at(t, lambda n=name: seen.append((eng.now, n)))
    assert eng.run() == 5
    assert seen == [(10, "a"), (10, "a2"), (20, "b1"), (20, "b2"), (30, "c")]


def test_run_until_leaves_later_events_and_advances_clock():
    eng = Engine()
    seen = []
    eng.at(5, lambda: seen.append(5))
    eng.at(50, lambda: seen.append(50))
    assert eng.run(until_ps=20) == 1
    assert eng.now == 20 and seen == [5] and eng.pending() == 1
    assert eng.run(until_ps=50) == 1
    assert seen == [5, 50] and eng.now == 50


def test_scheduling_in_the_past_is_rejected():
    eng = Engine()
    eng.at(10, lambda: None)
    eng.run()
    with pytest.raises(ValueError, match="before now"):
        eng.at(5, lambda: None)


def test_stop_ends_run_after_events_due_now():
    eng = Engine()
    seen = []

    def first():
        seen.append("first")
        eng.stop()

    eng.at(10, first)
    eng.at(10, lambda: seen.append("same-time"))
    eng.at(11, lambda: seen.append("later"))
    eng.run()
    assert seen == ["first", "same-time"]
    assert eng.now == 10
    eng.run()
    assert seen[-1] == "later"


def test_stoprun_raised_in_callback_counts_the_event():
    eng = Engine()

    def boom():
        raise StopRun

    eng.at(1, boom)
    eng.at(2, lambda: None)
    assert eng.run() == 1
    assert eng.pending() == 1


def test_timer_rearm_later_reuses_entry_and_fires_once_at_deadline():
    eng = Engine()
    fired = []
    tm = eng.timer(lambda: fired.append(eng.now))
    tm.arm(100)
    assert eng.pending() == 1
    tm.arm(150)  # later: no new heap entry
    tm.arm(200)
    assert eng.pending() == 1
    eng.run()
    assert fired == [200]
    assert tm.when is None and not tm.armed


def test_timer_rearm_earlier_and_cancel():
    eng = Engine()
    fired = []
    tm = eng.timer(lambda: fired.append(eng.now))
    tm.arm(100)
    tm.arm(40)  # earlier: new entry, the old one goes stale
    eng.run(until_ps=60)
    assert fired == [40]
    tm.arm(70)
    tm.cancel()
    eng.run(until_ps=80)
    assert fired == [40]
    tm.arm(85)
    eng.run()
    # The stale entry at 100 still pops but is ignored: a run to exhaustion ends at the last real event.
    assert fired == [40, 85] and eng.now == 85 and eng.pending() == 0


def test_a_cancelled_timer_does_not_extend_a_drained_run():
    eng = Engine()
    done = []
    rto = eng.timer(lambda: done.append("timeout"))
    rto.arm(1_000_000)  # e.g. a retransmission timer
    eng.at(10, lambda: (done.append("ack"), rto.cancel()))
    eng.run()
    assert done == ["ack"] and eng.now == 10


def test_timer_rearmed_from_its_own_callback():
    eng = Engine()
    fired = []

    def cb():
        fired.append(eng.now)
        if len(fired) < 3:
            tm.arm(eng.now + 7)

    tm = eng.timer(cb)
    tm.arm(1)
    eng.run()
    assert fired == [1, 8, 15]


def test_many_events_cross_chunk_boundaries_and_are_counted():
    eng = Engine()
    n = 40_000
    count = [0]

    def tick():
        count[0] += 1
        if count[0] < n:
            eng.push(eng.now + 3, tick)

    eng.at(0, tick)
    assert eng.run() == n
    assert eng.now == 3 * (n - 1)
    assert eng.events == n


def test_trace_recorder_filters_events():
    rec = TraceRecorder({"keep"})
    rec((1, "keep", "x"))
    rec((2, "drop-me", "y"))
    assert rec.records == [(1, "keep", "x")]


def test_engine_prints_nothing(capsys):
    # The wall-clock progress display belongs to drivers (panama.sim.runner), not the engine.
    eng = Engine()
    left = [50_000]

    def tick():
        left[0] -= 1
        if left[0]:
            eng.push(eng.now + 1_000, tick)

    eng.at(0, tick)
    assert eng.run(until_ps=10**12) == 50_000
    assert capsys.readouterr().err == ""


def test_many_pending_events_keep_time_then_scheduling_order():
    # More pending events than the compiled heap's first key array holds (1,024), with
    # ties, events scheduled from events, and a run stopped and resumed in between.
    import random

    rng = random.Random(5)
    eng = Engine()
    seen = []
    expected = []

    def event(key):
        def fire():
            seen.append(key)
            if key[1] < 3_000 and rng.random() < 0.5:
                t = eng.now + rng.randrange(0, 40)
                seq = 10_000 + len(expected)
                expected.append((t, seq))
                eng.at(t, event((t, seq)))

        return fire

    for i in range(3_000):
        t = rng.randrange(0, 2_000)
        expected.append((t, i))
        eng.at(t, event((t, i)))
    assert eng.pending() == 3_000 and eng.next_time() == min(expected)[0]
    eng.run(until_ps=1_000)
    assert eng.now == 1_000 and eng.next_time() > 1_000
    eng.run()
    assert eng.pending() == 0 and eng.next_time() is None
    assert seen == sorted(expected)


def test_inside_a_callback_pending_and_next_time_see_the_others_only():
    """The C queue keeps a firing event at its root until the callback returns (and re-keys
    it in place if it schedules itself): what a callback sees is the same as with heapq's
    pop-then-run, on either implementation."""
    from panama.sim.heap import Event

    eng = Engine()
    seen = []

    class Again(Event):
        __slots__ = ("left",)

        def __init__(self):
            super().__init__()
            self.left = 2

        def fire(self):
            seen.append(("again", eng.now, eng.pending(), eng.next_time()))
            if self.left:
                self.left -= 1
                eng.schedule(eng.now + 10, self)
                seen.append(("again+", eng.pending(), eng.next_time()))

    def once():
        seen.append(("once", eng.now, eng.pending(), eng.next_time()))

    eng.schedule(5, Again())
    eng.at(12, once)
    eng.at(40, once)
    eng.run()
    assert seen == [
        ("again", 5, 2, 12),
        ("again+", 3, 12),
        ("once", 12, 2, 15),
        ("again", 15, 1, 40),
        ("again+", 2, 25),
        ("again", 25, 1, 40),
        ("once", 40, 0, None),
    ]
