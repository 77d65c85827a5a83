"""Lazy buffer releases on a lossless switch: the arrival handler may admit with due
releases unsettled (``_used`` and ``_ing`` then upper bounds) where the bounds decide as
the exact values would; every observable value stays the exact one."""

from __future__ import annotations

import numpy as np
from sim_helpers import star

from panama.core.units import us
from panama.sim.engine import Engine
from panama.sim.network import KIND_OTHER, Network, NetworkConfig, SimPacket

PKT_BYTES = 1500


def burst_then_half_rate(probe_every_ps: int, read_exact: bool):
    """h1 sends a burst of 6 packets to h2 through tor0 while h0 sends 20 at half its
    line rate (one per 2.4 us at 10 Gb/s): tor0's buffer peaks at 4 packets, then drains
    to one with a release due before nearly every admission (the lazy case). A probe
    every ``probe_every_ps`` (1 ps past it) records the switch's raw ``_used`` and, if
    ``read_exact``, ``used_bytes`` and ``ingress_bytes`` (which settle first)."""
    eng = Engine()
    net = Network(eng, star(3), NetworkConfig(lossless=True), rng=np.random.default_rng(0))
    sw = net.switch("tor0")
    got: list[tuple[int, int]] = []
    net.attach("h2", lambda p: got.append((eng.now, p.seq)))
    for i in range(6):
        net.send("h1", SimPacket(KIND_OTHER, 1, 2, PKT_BYTES, seq=100 + i))
    for i in range(20):
        eng.at(us(2.4) * i, lambda i=i: net.send("h0", SimPacket(KIND_OTHER, 0, 2, PKT_BYTES, seq=i)))
    raw: list[int] = []
    exact: list[tuple[int, list[int]]] = []

    def probe() -> None:
        raw.append(sw._used)
        if read_exact:
            exact.append((sw.used_bytes, list(sw.ingress_bytes)))

    for k in range(1, 100):
        eng.at(k * probe_every_ps + 1, probe)
    eng.run()
    return net, sw, got, raw, exact


def test_lazy_releases_keep_the_exact_peak_deliveries_and_readings():
    net, sw, got, raw, _ = burst_then_half_rate(us(0.5), read_exact=False)
    net2, sw2, got2, _, exact = burst_then_half_rate(us(0.5), read_exact=True)
    # Reading the buffer (which settles) changes nothing observable.
    assert got == got2 and len(got) == 26
    assert sw.peak_used_bytes == sw2.peak_used_bytes == 4 * PKT_BYTES
    assert net.counters() == net2.counters()
    assert sw.used_bytes == 0 and all(b == 0 for b in sw.ingress_bytes)
    used = [u for u, _ in exact]
    # The exact occupancy: the burst builds up to the peak, then one packet at a time.
    assert max(used) == 4 * PKT_BYTES and PKT_BYTES in used[used.index(max(used)) :]
    assert all(u == sum(ing) for u, ing in exact)
    assert all(u % PKT_BYTES == 0 and 0 <= u <= 4 * PKT_BYTES for u in used)
    # Unsettled, the raw counter runs ahead of the exact value (never behind, never
    # past the peak): the admissions that left releases unsettled.
    assert any(r > u for r, u in zip(raw, used))
    assert all(u <= r <= sw.peak_used_bytes for r, u in zip(raw, used))
