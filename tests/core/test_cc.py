"""Congestion control with hand-built result sequences."""

import pytest

from panama.core.cc import Dctcp, Fixed, NoControl, make_cc


def test_registry_and_unknown_name():
    assert isinstance(make_cc("dctcp"), Dctcp)
    assert isinstance(make_cc("fixed", initial_window=8), Fixed)
    assert isinstance(make_cc("none"), NoControl)
    with pytest.raises(ValueError, match="unknown congestion control 'cubic'"):
        make_cc("cubic")


def test_dctcp_slow_start_then_cut_by_alpha_half():
    cc = Dctcp(initial_window=2, initial_alpha=1.0)
    seq = 0
    for _ in range(20):
        cc.on_result(seq, False, 1000, snd_nxt=seq + int(cc.cwnd))
        seq += 1
    grown = cc.cwnd
    assert grown > 10
    # the first echo cuts at once by alpha / 2 ...
    end = seq + int(cc.cwnd)
    cc.on_result(seq, True, 1000, snd_nxt=end)
    seq += 1
    cut = grown * (1 - cc.alpha / 2)
    assert 0.5 < cc.alpha <= 1 and cc.cwnd == pytest.approx(cut)
    assert cc.ssthresh == cc.cwnd
    # ... and further echoes of the same window of data do not cut again
    while seq < end:
        cc.on_result(seq, True, 1000, snd_nxt=end + 10)
        seq += 1
    assert cut < cc.cwnd < cut + 2
    # the next window's first echo cuts again
    before = cc.cwnd
    cc.on_result(end + 10, True, 1000, snd_nxt=end + 30)
    assert cc.cwnd == pytest.approx(before * (1 - cc.alpha / 2))


def test_dctcp_alpha_tracks_marked_fraction():
    cc = Dctcp(initial_window=20, initial_alpha=1.0)
    seq = 0
    for _ in range(400):  # windows of 20 results
        end = seq + 20
        while seq < end:
            cc.on_result(seq, seq % 4 == 0, 20, snd_nxt=end)  # 25% marked
            seq += 1
    assert cc.alpha == pytest.approx(0.25, abs=0.03)


def test_window_clamped_to_cap_and_timeout_resets():
    cc = Dctcp(initial_window=50)
    cc.on_result(0, False, 7, snd_nxt=1)
    assert cc.window == 7
    cc.on_timeout()
    assert cc.window == 1
    fixed = Fixed(initial_window=64)
    fixed.on_result(0, True, 16, snd_nxt=1)
    assert fixed.window == 16
    none = NoControl()
    none.on_result(0, True, 300, snd_nxt=1)
    assert none.window == 300
