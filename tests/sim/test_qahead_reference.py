"""QueueAhead against a plain reference: the attribution's caches (a source per callback,
the kinds of the last two callbacks met, int64 rows) must charge exactly what a walk that
classifies every packet ahead afresh charges, on queues where flows interleave (windows,
ACK trains, bulk, ring, PANAMA bursts), lossy and lossless (PFC pauses)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sim_helpers import star

from panama.core.units import us
from panama.sim.dctcp import Dctcp, DctcpConfig
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig, SimPacket
from panama.sim.packet import FLAG_TRACKED, KIND_ACK, KIND_DATA, KIND_PANAMA
from panama.sim.qahead import KINDS, QueueAhead

SHORT = 100_000
OWN, SHORT_K, BULK, RING, PANAMA, OTHER = range(len(KINDS))


class ReferenceQueueAhead:
    """The attribution written plainly: every packet ahead classified from its callback."""

    def __init__(self, ports: Any, background: Any, short_bytes: int):
        self.background = background
        self.short_bytes = short_bytes
        dirs: dict[str, int] = {}
        self.dir = {id(p): dirs.setdefault(f"{p.owner.kind}->{p.peer.kind}", len(dirs)) for p in ports}
        self.directions = list(dirs)
        self.rows: dict[int, list[int]] = {}
        self.hops: dict[int, int] = {}
        self.paused_adds = 0

    def kind(self, q: Any, own: Any) -> int:
        if q.kind == KIND_PANAMA:
            return PANAMA
        if q.kind not in (KIND_DATA, KIND_ACK):
            return OTHER
        f = getattr(q.deliver, "__self__", None)
        if f is None:
            return OTHER
        if f is own:
            return OWN
        if f.stack is not self.background:
            return RING
        return SHORT_K if f.size_bytes is not None and f.size_bytes < self.short_bytes else BULK

    def add(self, port: Any, pkt: Any, now: int) -> None:
        own = pkt.deliver.__self__
        row = self.rows.setdefault(own.id, [0] * (len(self.directions) * len(KINDS)))
        self.hops[own.id] = self.hops.get(own.id, 0) + 1
        base = self.dir[id(port)] * len(KINDS)
        ppb = port.ps_per_byte
        if port.paused:
            self.paused_adds += 1
            for q, _ in list(port.waiting)[:-1]:
                row[base + self.kind(q, own)] += q.size_bytes * ppb
        pipe = port.pipe
        ahead = [pipe.at(i) for i in range(len(pipe) - (1 if port.paused else 2), -1, -1)]
        for q in ahead:
            end = q.arrive_ps - port.delay_ps
            if end <= now:
                break
            row[base + self.kind(q, own)] += min(q.size_bytes * ppb, end - now)


def run(lossless: bool, reference: bool) -> Any:
    """Flows of every kind into h3 (1 Gb/s, the bottleneck) and back: short tracked flows
    started while bulk, ring and PANAMA traffic queue ahead of them."""
    eng = Engine()
    net = Network(
        eng, star(4, rates={3: 1e9}), NetworkConfig(lossless=lossless, ecn=False), rng=np.random.default_rng(0)
    )
    net.attach("h3", lambda p: None)
    tcp = Dctcp(net, DctcpConfig(), rng=np.random.default_rng(1))
    ring = Dctcp(net, DctcpConfig(), rng=np.random.default_rng(2))
    qa = (ReferenceQueueAhead if reference else QueueAhead)(net.ports, tcp, SHORT)
    net.queue_ahead = qa
    for i in range(40):
        net.send("h0", SimPacket(KIND_PANAMA, 0, 3, 1500, seq=i))
    tcp.start_flow("h0", "h3", 300_000)
    tcp.start_flow("h3", "h1", 150_000, start_ps=us(5))
    ring.start_flow("h1", "h3", 60_000, start_ps=us(10))
    rng = np.random.default_rng(3)
    for k in range(24):
        src, dst = ("h1", "h3") if k % 3 else ("h3", "h2")
        f = tcp.start_flow(src, dst, int(rng.integers(1_000, 40_000)), start_ps=us(2 + 7 * k))
        f.data_flags = FLAG_TRACKED
    eng.run()
    return qa


@pytest.mark.parametrize("lossless", [False, True])
def test_the_attribution_charges_what_a_plain_walk_charges(lossless):
    got, want = run(lossless, reference=False), run(lossless, reference=True)
    assert got.directions == want.directions
    assert list(got.rows.items()) == list(want.rows.items())
    assert list(got.hops.items()) == list(want.hops.items())
    assert len(want.rows) == 24
    assert (want.paused_adds > 0) == lossless  # lossless: tracked packets held behind a pause
    assert all(type(fid) is int and all(type(x) is int for x in row) for fid, row in got.rows.items())
    assert all(got.flow_ps(fid) == row for fid, row in want.rows.items())
    kinds_seen = {j for row in want.rows.values() for i, v in enumerate(row) if v for j in [i % len(KINDS)]}
    assert kinds_seen == {OWN, SHORT_K, BULK, RING, PANAMA}


def test_rows_and_flow_ps_are_copies():
    qa = run(False, reference=False)
    fid, row = next(iter(qa.rows.items()))
    row[0] += 1
    qa.flow_ps(fid)[0] += 1
    assert qa.rows[fid][0] == row[0] - 1 == qa.flow_ps(fid)[0]
