"""The shared progress helper: throttled reports and a status line rewritten in place."""

import io

import pytest

from panama.progress import StatusLine, Throttle


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_throttle_waits_for_first_after_then_reports_every_interval():
    clock = FakeClock()
    th = Throttle(1.0, first_after_s=2.0, clock=clock)
    seen = []
    for k in range(60):
        clock.t = k * 0.1
        if th.ready():
            seen.append(round(clock.t, 1))
    assert seen == [2.0, 3.0, 4.0, 5.0]
    with pytest.raises(ValueError):
        Throttle(-1.0)


def test_status_line_rewrites_in_place_and_ends_the_line():
    clock, out = FakeClock(), io.StringIO()
    line = StatusLine(interval_s=1.0, first_after_s=0.5, stream=out, clock=clock)
    built = []
    for t in (0.1, 0.6, 0.9, 1.7):
        clock.t = t
        line.update(lambda e: built.append(e) or f"at {e:.1f}")
    assert built == [0.6, 1.7]  # the text is only built when shown
    line.close()
    assert out.getvalue() == "\rat 0.6\rat 1.7\n"
    quiet = StatusLine(stream=io.StringIO(), clock=FakeClock())
    quiet.close()  # never shown: no newline
    assert quiet.stream.getvalue() == ""
