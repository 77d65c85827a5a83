"""Per-hop attribution of short-flow queueing (panama.sim.qahead) on hand-built cases whose
queueing is computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.core.units import PS_PER_US, us
from panama.sim.dctcp import Dctcp, DctcpConfig
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig, SimPacket
from panama.sim.packet import FLAG_TRACKED, KIND_PANAMA
from panama.sim.qahead import KINDS, QueueAhead, short_flow_queueing

MTU = 1500
PS_PER_BYTE_10G = 800  # 8e12 / 10e9
PS_PER_BYTE_1G = 8000


def setup(lossless: bool = False):
    """h0, h1, h2 on one switch; h2's link at 1 Gb/s, the others 10 Gb/s, 1 µs per link."""
    eng = Engine()
    cfg = NetworkConfig(lossless=lossless, ecn=False)
    net = Network(eng, star(3, rates={2: 1e9}), cfg, rng=np.random.default_rng(0))
    net.attach("h2", lambda p: None)
    tcp = Dctcp(net, DctcpConfig(), rng=np.random.default_rng(1))
    qa = QueueAhead(net.ports, tcp, 100_000)
    net.queue_ahead = qa
    return eng, net, tcp, qa


def cells(qa: QueueAhead, flow_id: int) -> dict[str, int]:
    row = qa.flow_ps(flow_id)
    n = len(KINDS)
    return {
        f"{d}/{k}": row[i * n + j] for i, d in enumerate(qa.directions) for j, k in enumerate(KINDS) if row[i * n + j]
    }


@pytest.mark.parametrize("lossless", [False, True])
def test_a_one_packet_flow_waits_behind_a_known_panama_burst(lossless):
    """h0 bursts N MTU-sized aggregation packets to h2 at t=0; at 20 µs h1 starts a
    one-packet tracked flow to h2. At the switch the burst drains at 1 Gb/s (12 µs a
    packet) from 2.2 µs on (one 10 Gb/s serialisation + 1 µs), so the flow's packet,
    arriving at 20 µs + its own serialisation + 1 µs, waits the rest of the burst's
    drain, all of it behind PANAMA traffic, on the tor->host hop; nothing else queues
    (the ACK's path is empty)."""
    n = 8
    eng, net, tcp, qa = setup(lossless)
    for i in range(n):
        net.send("h0", SimPacket(KIND_PANAMA, 0, 2, MTU, seq=i))
    flow = tcp.start_flow("h1", "h2", 1000, start_ps=us(20))
    flow.data_flags = FLAG_TRACKED
    eng.run()
    assert flow.finish_ps is not None
    size = 1000 + DctcpConfig().header_bytes
    burst_end = us(1) + MTU * PS_PER_BYTE_10G + n * MTU * PS_PER_BYTE_1G
    arrive = us(20) + size * PS_PER_BYTE_10G + us(1)
    assert cells(qa, flow.id) == {"tor->host/panama": burst_end - arrive}
    assert qa.hops[flow.id] == 4  # data: h1->tor, tor->h2; ACK: h2->tor, tor->h1


def test_a_flow_queues_behind_its_own_window_hop_by_hop():
    """A 3-segment flow from h1 to h2 with nothing else in the network: at its 10 Gb/s NIC
    segment k waits k full serialisations (0 + 1 + 2 = 3 x tx); at the 1 Gb/s last hop
    (10 x tx a segment) segment 1 arrives tx after segment 0 and waits 9 tx, segment 2
    waits 8 tx + 10 tx: 27 x tx, all of it ``own``."""
    eng, net, tcp, qa = setup()
    cfg = DctcpConfig()
    flow = tcp.start_flow("h1", "h2", 3 * cfg.mss_bytes)
    flow.data_flags = FLAG_TRACKED
    eng.run()
    tx = (cfg.mss_bytes + cfg.header_bytes) * PS_PER_BYTE_10G
    assert cells(qa, flow.id) == {"host->tor/own": 3 * tx, "tor->host/own": 27 * tx}


def test_untracked_flows_cost_nothing_and_kinds_are_told_apart():
    """A bulk background flow, a ring-stack flow and a short flow share h2's 1 Gb/s link: the
    short one sees ``bulk`` and ``ring`` ahead; untracked flows get no accumulators."""
    eng, net, tcp, qa = setup()
    ring = Dctcp(net, DctcpConfig(), rng=np.random.default_rng(2))
    big = tcp.start_flow("h0", "h2", 200_000)
    other = ring.start_flow("h1", "h2", 50_000)
    short = tcp.start_flow("h1", "h2", 5_000, start_ps=us(30))
    short.data_flags = FLAG_TRACKED
    eng.run()
    got = cells(qa, short.id)
    assert got.get("tor->host/bulk", 0) > 0 and got.get("tor->host/ring", 0) > 0
    assert set(qa.rows) == {short.id} and big.id not in qa.rows and other.id not in qa.rows
    rows = [
        {"kind": "background", "flow_id": f.id, "size_bytes": f.size_bytes, "fct_us": f.fct_ps / PS_PER_US}
        for f in (big, short)
    ]
    buckets = (("b", "2-10KB", 2_000, 10_000),)
    (entry,) = short_flow_queueing(qa, rows, buckets, PS_PER_US)
    assert entry["flows"] == 1
    total = sum(got.values()) / PS_PER_US
    assert entry["all"]["queueing_mean_us"] == pytest.approx(total)
    assert sum(v["share"] for v in entry["all"]["by_kind"].values()) == pytest.approx(1.0)
    assert entry["tail"]["flows"] == 1
