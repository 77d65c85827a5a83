"""Congestion control with hand-built result sequences."""

import pytest

from panama.core.cc import DctcpOr, DctcpPath, Fixed, NoControl, make_cc


def test_registry_and_unknown_name():
    assert isinstance(make_cc("dctcp"), DctcpOr)
    assert isinstance(make_cc("fixed", initial_window=8), Fixed)
    assert isinstance(make_cc("none"), NoControl)
    with pytest.raises(ValueError, match="unknown congestion control 'cubic'"):
        make_cc("cubic")


def test_dctcp_slow_start_then_cut_by_alpha_half():
    cc = DctcpOr(initial_window=2, initial_alpha=1.0)
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
    cc = DctcpOr(initial_window=20, initial_alpha=1.0)
    seq = 0
    for _ in range(400):  # windows of 20 results
        end = seq + 20
        while seq < end:
            cc.on_result(seq, seq % 4 == 0, 20, snd_nxt=end)  # 25% marked
            seq += 1
    assert cc.alpha == pytest.approx(0.25, abs=0.03)


def test_window_clamped_to_cap_and_timeout_resets():
    cc = DctcpOr(initial_window=50)
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


def test_dctcp_or_is_the_source_reaction_and_keeps_its_earlier_name():
    assert make_cc("dctcp-or").name == "dctcp-or" and type(make_cc("dctcp")) is type(make_cc("dctcp-or"))
    assert isinstance(make_cc("dctcp-path"), DctcpPath)


def test_dctcp_path_holds_the_path_window_while_the_echo_is_quiet():
    cc = DctcpPath(initial_window=10)
    cc.limit_to_cap(500)
    cc.limit_to_path(20)
    assert cc.window == 20 and cc.floor == 20 and cc.ceiling == 20 and cc.alpha == 0
    seq = 0
    for _ in range(300):  # unmarked, or marked more rarely than g: additive increase stops at the path window
        cc.on_result(seq, seq % 40 == 7, 500, snd_nxt=seq + cc.window)
        seq += 1
        assert cc.window == 20
    assert cc.alpha < cc.g


def test_dctcp_path_competes_like_dctcp_above_the_path_window_and_never_drops_below_it():
    cc = DctcpPath()
    cc.limit_to_cap(500)
    cc.limit_to_path(20)
    seq, windows = 0, []
    for _ in range(2000):  # one result in 12 marked: queues at K that the tree did not build alone
        cc.on_result(seq, seq % 12 == 0, 500, snd_nxt=seq + cc.window)
        seq += 1
        windows.append(cc.window)
        assert cc.window >= 20
    assert cc.alpha > cc.g and max(windows) > 20  # grows above the path window, cut back by DCTCP
    assert min(windows[1000:]) < max(windows[1000:])
    for _ in range(2000):  # the marks stop: alpha decays below g, the window returns to the path window
        cc.on_result(seq, False, 500, snd_nxt=seq + cc.window)
        seq += 1
    assert cc.window == 20
    cc.on_result(seq, False, 6, snd_nxt=seq + 6)  # the accelerators' cap still wins
    assert cc.window == 6


def test_dctcp_path_floor_share_lets_the_echo_cut_below_the_path_window():
    cc = DctcpPath(floor_share=0.5)
    cc.limit_to_path(20)
    for seq in range(400):
        cc.on_result(seq, True, 500, snd_nxt=seq + cc.window)
        assert 10 <= cc.window
    assert cc.window == 10


def test_dctcp_path_without_a_path_window_is_dctcp():
    a, b = DctcpOr(initial_window=4, initial_alpha=0.0), DctcpPath(initial_window=4)
    for seq in range(300):
        ece = seq % 7 == 3
        a.on_result(seq, ece, 300, snd_nxt=seq + a.window)
        b.on_result(seq, ece, 300, snd_nxt=seq + b.window)
        assert (a.cwnd, a.alpha) == (b.cwnd, b.alpha)


def test_dctcp_path_refuses_bad_settings():
    with pytest.raises(ValueError, match="floor_share"):
        DctcpPath(floor_share=1.5)
    with pytest.raises(ValueError, match="path window"):
        DctcpPath().limit_to_path(0)
