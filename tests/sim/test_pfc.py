"""PFC: lossless incast, pause propagation across tiers, pause/resume semantics."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.core.topology import leaf_spine
from panama.core.units import ms, us
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import KIND_OTHER, LosslessPort, Network, NetworkConfig, SimPacket


def incast(graph, cfg, senders, receiver, size_bytes=64_000, seed=0, until=ms(50)):
    rng = np.random.default_rng(seed)
    eng = Engine()
    net = Network(eng, graph, cfg, rng=rng)
    tcp = Dctcp(net, rng=rng)
    flows = [tcp.start_flow(s, receiver, size_bytes, 0) for s in senders]
    eng.run(until)
    return net, tcp, flows


def test_incast_32_to_1_with_pfc_is_lossless():
    cfg = NetworkConfig(lossless=True, switch_buffer_bytes=300_000)
    net, tcp, flows = incast(star(33), cfg, [f"h{i}" for i in range(32)], "h32")
    c = net.counters()
    assert c["drops_total"] == 0
    assert all(f.done for f in flows)
    assert sum(f.retransmits for f in flows) == 0
    assert c["pfc_pauses"] > 0 and c["pfc_paused_ps"] > 0
    sw = net.switch("tor0")
    assert 0 < sw.peak_used_bytes <= sw.buffer_bytes
    assert sw.used_bytes == 0 and all(b == 0 for b in sw.ingress_bytes)


def test_incast_without_pfc_and_small_buffer_drops_but_completes():
    cfg = NetworkConfig(lossless=False, queue_limit_bytes=30 * 1500)
    net, tcp, flows = incast(star(33), cfg, [f"h{i}" for i in range(32)], "h32")
    c = net.counters()
    assert c["drops"]["queue_full"] > 0
    assert all(f.done for f in flows)
    assert sum(f.retransmits for f in flows) > 0
    assert all(f.delivered_bytes == 64_000 for f in flows)


def test_pause_propagates_across_tiers_without_loss():
    # 12 senders on leaf0 and 3 on leaf1 into one host of leaf1, small buffers: leaf1
    # pauses the spines, the spines pause leaf0, leaf0 pauses its hosts.
    topo = leaf_spine(2, 2, 16)
    cfg = NetworkConfig(lossless=True, switch_buffer_bytes=400_000)
    senders = [f"h{i}" for i in range(12)] + ["h16", "h17", "h18"]
    net, tcp, flows = incast(topo, cfg, senders, "h31", size_bytes=50_000)
    assert net.counters()["drops_total"] == 0
    assert all(f.done for f in flows)
    paused_by = {sw.name for sw in net.switches if sw.pauses_sent}
    assert "leaf1" in paused_by and ({"spine0", "spine1"} & paused_by)
    for sw in net.switches:
        assert sw.peak_used_bytes <= sw.buffer_bytes


def test_static_threshold_mode():
    cfg = NetworkConfig(lossless=True, switch_buffer_bytes=300_000, pfc_static_threshold_bytes=6000)
    net, tcp, flows = incast(star(17), cfg, [f"h{i}" for i in range(16)], "h16")
    assert net.counters()["drops_total"] == 0 and net.counters()["pfc_pauses"] > 0
    assert all(f.done for f in flows)
    assert net.switch("tor0").pfc_threshold() == 6000


def test_dynamic_threshold_shrinks_as_buffer_fills():
    rng = np.random.default_rng(0)
    net = Network(Engine(), star(4), NetworkConfig(lossless=True, switch_buffer_bytes=200_000), rng=rng)
    sw = net.switch("tor0")
    empty = sw.pfc_threshold()
    assert empty == int(sw.pool_bytes / 8)
    sw.used_bytes = sw.pool_bytes // 2
    assert sw.pfc_threshold() == int((sw.pool_bytes - sw.pool_bytes // 2) / 8)


def test_buffer_too_small_for_headroom_is_rejected():
    with pytest.raises(ValueError, match="switch_buffer_bytes"):
        Network(
            Engine(), star(33), NetworkConfig(lossless=True, switch_buffer_bytes=100_000), rng=np.random.default_rng(0)
        )


def test_pause_holds_unstarted_packets_and_resume_sends_them():
    rng = np.random.default_rng(0)
    eng = Engine()
    net = Network(eng, star(2), NetworkConfig(lossless=True), rng=rng)
    got = []
    net.attach("h1", lambda p: got.append((eng.now, p.seq)))
    nic = net.port("h0", "tor0")
    assert isinstance(nic, LosslessPort)
    for i in range(3):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))  # start at 0, 1.2, 2.4 us
    eng.at(us(0.6), nic.pause)  # packet 0 is on the wire and finishes; 1 and 2 wait
    eng.at(us(10), nic.resume)
    eng.run()
    assert got == [(4_400_000, 0), (14_400_000, 1), (15_600_000, 2)]
    assert nic.pauses == 1 and nic.paused_ps == us(10) - us(0.6)
    assert nic.tx_packets == 3


def test_hooks_in_a_lossless_network_charge_outputs_and_release_them():
    rng = np.random.default_rng(0)
    eng = Engine()
    net = Network(eng, star(3), NetworkConfig(lossless=True), rng=rng)
    got = {"h1": [], "h2": []}
    for h in got:
        net.attach(h, lambda p, h=h: got[h].append((eng.now, p.inner)))

    def hook(pkt, from_node):
        return [(h, SimPacket(KIND_OTHER + 1, -1, -1, 1500, inner=(from_node, pkt.seq))) for h in ("h1", "h2")]

    net.set_packet_hook("tor0", hook, kinds=(KIND_OTHER + 1,), latency_ps=us(1))
    for i in range(5):
        net.hosts[0].send(SimPacket(KIND_OTHER + 1, 0, -1, 1500, seq=i))
        net.send("h0", SimPacket(KIND_OTHER, 0, 2, 1500, seq=100 + i, inner="plain"))
    eng.run()
    assert [x for _, x in got["h1"]] == [("h0", i) for i in range(5)]
    assert sorted(x for _, x in got["h2"] if x != "plain") == [("h0", i) for i in range(5)]
    assert sum(1 for _, x in got["h2"] if x == "plain") == 5
    sw = net.switch("tor0")
    assert sw.used_bytes == 0 and all(b == 0 for b in sw.ingress_bytes)
    assert sw.peak_used_bytes >= 3000


def test_static_threshold_that_could_overflow_is_rejected():
    with pytest.raises(ValueError, match="pfc_static_threshold_bytes"):
        Network(
            Engine(),
            star(9),
            NetworkConfig(lossless=True, switch_buffer_bytes=200_000, pfc_static_threshold_bytes=30_000),
            rng=np.random.default_rng(0),
        )


@pytest.mark.parametrize("seed", [0, 1])
def test_random_traffic_on_small_buffers_is_lossless(seed):
    rng = np.random.default_rng(seed)
    topo = leaf_spine(3, 2, 4)
    eng = Engine()
    net = Network(eng, topo, NetworkConfig(lossless=True, switch_buffer_bytes=90_000), rng=rng)
    tcp = Dctcp(net, rng=rng)
    flows = []
    for _ in range(40):
        a, b = rng.choice(len(topo.hosts), size=2, replace=False)
        flows.append(
            tcp.start_flow(
                topo.hosts[a], topo.hosts[b], int(rng.integers(1_000, 100_000)), int(rng.integers(0, us(100)))
            )
        )
    eng.run(ms(100))
    c = net.counters()
    assert c["drops_total"] == 0 and c["pfc_pauses"] > 0
    assert all(f.done for f in flows) and sum(f.timeouts for f in flows) == 0
    assert all(sw.peak_used_bytes <= sw.buffer_bytes for sw in net.switches)
