"""The worker's clock (``now_ps``) counts from the process's start, not the machine's boot:
the compiled transport takes times as signed 64-bit picoseconds (about 106 days), and a
machine's uptime can be longer."""

from __future__ import annotations

from panama.runtime.net import udp

DAY_NS = 86_400 * 10**9
INT64_MAX = 2**63 - 1


def test_now_ps_counts_from_the_process_start(monkeypatch):
    monkeypatch.setattr(udp.time, "monotonic_ns", lambda: udp._CLOCK_ORIGIN_NS + 5)
    assert udp.now_ps() == 5_000


def test_now_ps_fits_64_bits_on_a_machine_up_for_200_days(monkeypatch):
    booted_200_days_ago = 200 * DAY_NS  # CLOCK_MONOTONIC counts from the boot
    monkeypatch.setattr(udp, "_CLOCK_ORIGIN_NS", booted_200_days_ago - 10**9)  # the process began 1 s ago
    monkeypatch.setattr(udp.time, "monotonic_ns", lambda: booted_200_days_ago)
    assert booted_200_days_ago * 1000 > INT64_MAX  # the boot-based clock would not fit
    assert udp.now_ps() == 10**12
