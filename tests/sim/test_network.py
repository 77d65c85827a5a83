"""Network layer: link timing, ECN marking, drop-tail, hooks, counters, routing."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.core.packet import CE, ECT0, NOT_ECT
from panama.core.topology import fat_tree, leaf_spine
from panama.core.units import us
from panama.sim.engine import Engine, TraceRecorder
from panama.sim.network import (
    DROP_NO_HANDLER,
    DROP_NO_ROUTE,
    DROP_QUEUE_FULL,
    KIND_OTHER,
    KIND_PANAMA,
    Network,
    NetworkConfig,
    SimPacket,
)
from panama.sim.packet import NUM_KINDS


def make(graph, config=None, seed=0, trace=None):
    eng = Engine(trace=trace)
    net = Network(eng, graph, config or NetworkConfig(), rng=np.random.default_rng(seed))
    return eng, net


def collect(net, host):
    got = []
    net.attach(host, lambda p: got.append((net.now, p.seq, p.ecn)))
    return got


def test_single_packet_store_and_forward_timing():
    eng, net = make(star(2))
    got = collect(net, "h1")
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500))
    eng.run()
    # Two hops of (1500 B at 10 Gbps = 1.2 us) + 1 us propagation.
    assert got == [(2 * (1_200_000 + 1_000_000), 0, ECT0)]


def test_back_to_back_packets_pipeline():
    eng, net = make(star(2))
    got = collect(net, "h1")
    for i in range(3):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    eng.run()
    assert [t for t, _, _ in got] == [4_400_000, 5_600_000, 6_800_000]
    assert [s for _, s, _ in got] == [0, 1, 2]


def test_ecn_marks_when_backlog_exceeds_k():
    # 10 Gbps in, 1 Gbps out: the i-th packet finds 10.8 us x i of backlog = 1350 B x i.
    cfg = NetworkConfig(ecn_k_bytes=4000, host_ecn=False)
    eng, net = make(star(2, rates={1: 1e9}), cfg)
    got = collect(net, "h1")
    for i in range(10):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    eng.run()
    marked = [s for _, s, e in got if e == CE]
    assert marked == list(range(3, 10))
    assert net.port("tor0", "h1").ecn_marks == 7
    assert net.counters()["ecn_marks"] == 7


def test_host_nic_marks_only_with_host_ecn():
    for host_ecn, want in ((False, 0), (True, 7)):
        eng, net = make(star(2), NetworkConfig(ecn_k_bytes=4000, host_ecn=host_ecn))
        got = collect(net, "h1")
        for i in range(10):  # all at t=0: packet i finds 1500 x i > 4000 bytes for i >= 3
            net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
        eng.run()
        assert net.port("h0", "tor0").ecn_marks == want
        assert [s for _, s, e in got if e == CE] == list(range(10 - want, 10))


def test_ecn_off_and_not_ect_packets_are_never_marked():
    eng, net = make(star(2, rates={1: 1e9}), NetworkConfig(ecn=False))
    got = collect(net, "h1")
    for i in range(10):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    eng.run()
    assert all(e == ECT0 for _, _, e in got)
    eng, net = make(star(2, rates={1: 1e9}), NetworkConfig(ecn_k_bytes=0))
    got = collect(net, "h1")
    for i in range(5):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i, ecn=NOT_ECT))
    eng.run()
    assert all(e == NOT_ECT for _, _, e in got) and len(got) == 5


def test_default_k_scales_with_rate():
    cfg = NetworkConfig()
    assert cfg.ecn_k_for(10e9) == 65 * 1500
    assert cfg.ecn_k_for(40e9) == 4 * 65 * 1500
    assert cfg.ecn_k_for(1e9) == round(6.5 * 1500)


def test_drop_tail_respects_queue_limit():
    cfg = NetworkConfig(queue_limit_bytes=4500)
    eng, net = make(star(2, rates={1: 1e9}), cfg)
    got = collect(net, "h1")
    port = net.port("tor0", "h1")
    peak = [0]

    def watch():
        peak[0] = max(peak[0], port.queue_bytes())
        if eng.pending():
            eng.after(100_000, watch)

    eng.at(0, watch)
    for i in range(20):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    eng.run()
    c = net.counters()
    assert c["drops"][DROP_QUEUE_FULL] == port.drops > 0
    assert len(got) + port.drops == 20
    assert peak[0] <= 4500
    seqs = [s for _, s, _ in got]
    assert seqs == sorted(seqs)


def test_packet_without_handler_is_dropped_with_reason():
    eng, net = make(star(2))
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 100))
    eng.run()
    assert net.counters()["drops"][DROP_NO_HANDLER] == 1


def test_deliver_callback_takes_precedence_over_handler():
    eng, net = make(star(2))
    via_handler, via_cb = [], []
    net.attach("h1", via_handler.append)
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 100, deliver=via_cb.append))
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 100))
    eng.run()
    assert len(via_cb) == 1 and len(via_handler) == 1


def test_packet_hook_forwards_to_named_neighbours_after_latency():
    eng, net = make(star(3))
    calls = []

    def hook(pkt, from_node):
        calls.append((net.now, from_node, pkt.inner))
        return [(h, SimPacket(KIND_PANAMA, -1, -1, 500, inner=pkt.inner + "!")) for h in ("h1", "h2")]

    net.set_packet_hook("tor0", hook, latency_ps=us(0.5))
    got1, got2 = [], []
    net.attach("h1", lambda p: got1.append((net.now, p.inner)))
    net.attach("h2", lambda p: got2.append((net.now, p.inner)))
    net.hosts[0].send(SimPacket(KIND_PANAMA, 0, -1, 1500, inner="x"))
    # An ordinary packet crossing the same switch is not hooked.
    net.send("h0", SimPacket(KIND_OTHER, 0, 2, 1500, inner="plain"))
    eng.run()
    arrive_sw = 1_200_000 + 1_000_000
    assert calls == [(arrive_sw, "h0", "x")]
    out = arrive_sw + 500_000 + 400_000 + 1_000_000  # latency + 500 B at 10 Gbps + wire
    assert got1 == [(out, "x!")]
    assert got2[0] == (out, "x!") and got2[1][1] == "plain"


def test_hook_forwarding_to_non_neighbour_raises():
    eng, net = make(star(2))
    net.set_packet_hook("tor0", lambda p, f: [("nowhere", p)])
    net.hosts[0].send(SimPacket(KIND_PANAMA, 0, -1, 100))
    with pytest.raises(KeyError, match="nowhere"):
        eng.run()


def test_switch_emit_and_host_send_to():
    eng, net = make(star(2))
    got = collect(net, "h1")
    net.switch("tor0").emit("h1", SimPacket(KIND_OTHER, -1, -1, 100, seq=7))
    eng.run()
    assert [s for _, s, _ in got] == [7]
    seen = []
    net.set_packet_hook("tor0", lambda p, f: seen.append(f), kinds=(KIND_OTHER,))
    net.hosts[1].send_to("tor0", SimPacket(KIND_OTHER, 1, -1, 100))
    eng.run()
    assert seen == ["h1"]


def test_counters_by_tier_on_fat_tree_path():
    topo = fat_tree(4)
    eng, net = make(topo)
    src, dst = topo.hosts[0], topo.hosts[-1]  # different pods
    got = collect(net, dst)
    net.send(src, SimPacket(KIND_OTHER, net.host_index[src], net.host_index[dst], 1000, flow_hash=12345))
    eng.run()
    assert len(got) == 1
    c = net.counters()
    assert c["packet_hops"] == 6
    assert c["bytes_by_tier"] == {"agg-core": 2000, "host-tor": 2000, "tor-agg": 2000}
    path = net.path(net.host_index[src], net.host_index[dst], 12345)
    assert [p.tier for p in path] == ["host-tor", "tor-agg", "agg-core", "agg-core", "tor-agg", "host-tor"]
    assert sum(p.tx_packets for p in path) == 6


def test_paths_are_shortest_in_leaf_spine():
    topo = leaf_spine(2, 2, 2)
    eng, net = make(topo)
    assert len(net.path(0, 1)) == 2  # same leaf
    assert len(net.path(0, 3)) == 4


def test_accepts_topology_or_graph_and_names_hosts_in_order():
    topo = leaf_spine(2, 2, 3)
    _, a = make(topo)
    _, b = make(topo.graph)
    assert a.host_names == b.host_names == topo.hosts
    assert a.host_index["h4"] == 4 and a.host("h4").index == 4


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="queue_limit_bytes"):
        NetworkConfig(queue_limit_bytes=10)
    with pytest.raises(ValueError, match="pfc_alpha"):
        NetworkConfig(pfc_alpha=0)
    g = star(2)
    del g.edges["h0", "tor0"]["delay_ps"]
    with pytest.raises(ValueError, match="delay_ps"):
        make(g)
    g = star(2)
    g.nodes["tor0"].pop("kind")
    with pytest.raises(ValueError, match="kind"):
        make(g)


def sampled_star():
    """Three hosts on one switch, h2's link at 1 Gb/s, sampled every us; h0 has just sent 20
    packets each to h1 and h2 (the queue towards h2 builds up)."""
    eng, net = make(star(3, rates={2: 1e9}))
    net.attach("h1", lambda p: None)
    net.attach("h2", lambda p: None)
    s = net.sample_queues(us(1))
    for i in range(20):
        net.send("h0", SimPacket(KIND_OTHER, 0, 2, 1500, seq=i))
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    return eng, net, s


def test_sampler_finds_the_busiest_queue():
    eng, net, s = sampled_star()
    eng.run()
    port, samples = s.busiest()
    assert port is net.port("tor0", "h2")
    assert max(samples) > 10_000
    st = s.stats()
    assert st["port"] == "tor0->h2" and st["p99_bytes"] <= st["max_bytes"]


def test_sampler_columns_are_each_ports_queue_at_each_sample():
    eng, net, s = sampled_star()
    expected = []
    for t in (us(3), us(7), us(12)):  # stopped between samples: the queues are still full
        eng.run(until_ps=t)
        s._sample()  # one more sample now, beside the periodic ones
        expected.append((len(s.times_ps) - 1, [p.queue_bytes() for p in s.ports]))
    samples = s.samples
    assert samples.shape == (len(s.ports), len(s.times_ps))
    assert any(max(q) > 0 for _, q in expected)
    for k, queues in expected:
        assert samples[:, k].tolist() == queues


def test_trace_records_transmissions_and_drops():
    rec = TraceRecorder()
    eng, net = make(star(2, rates={1: 1e9}), NetworkConfig(queue_limit_bytes=1500), trace=rec)
    net.attach("h1", lambda p: None)
    for i in range(4):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 1500, seq=i))
    eng.run()
    kinds = [r[1] for r in rec.records]
    assert kinds.count("tx") == 4 + (4 - kinds.count("drop"))
    assert kinds.count("drop") >= 1
    assert all(isinstance(r[0], int) for r in rec.records)


@pytest.mark.parametrize("lossless", [False, True])
def test_hooked_kinds_only_go_to_the_hook_and_a_removed_hook_lets_its_kind_be_routed(lossless):
    """The arrival handlers hand a packet to a hook by its kind's bit (Switch.hook_mask):
    other kinds, kinds outside the table and, once removed, the hook's own kind are routed."""
    eng, net = make(star(2), NetworkConfig(lossless=lossless))
    got = collect(net, "h1")
    seen = []
    net.set_packet_hook("tor0", lambda p, f: seen.append(p.seq), kinds=(KIND_OTHER + 1,))
    for seq, kind in enumerate((KIND_OTHER, KIND_OTHER + 1, NUM_KINDS, -1)):
        net.send("h0", SimPacket(kind, 0, 1, 100, seq=seq))
    eng.run()
    assert seen == [1] and sorted(s for _, s, _ in got) == [0, 2, 3]
    net.set_packet_hook("tor0", None, kinds=(KIND_OTHER + 1,))
    assert net.switch("tor0").hook_mask == 0
    net.send("h0", SimPacket(KIND_OTHER + 1, 0, 1, 100, seq=4))
    eng.run()
    assert seen == [1] and sorted(s for _, s, _ in got) == [0, 2, 3, 4]


@pytest.mark.parametrize("lossless", [False, True])
def test_a_packet_without_a_destination_and_no_hook_is_dropped_as_no_route(lossless):
    """dst -1 (a hop-by-hop packet, here where no switch hooks its kind) has no route:
    dropped at the first switch and counted, on both arrival handlers."""
    eng, net = make(star(2), NetworkConfig(lossless=lossless))
    got = collect(net, "h1")
    net.send("h0", SimPacket(KIND_PANAMA, 0, -1, 100))
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 100, seq=7))
    eng.run()
    assert net.counters()["drops"][DROP_NO_ROUTE] == 1
    assert [s for _, s, _ in got] == [7]


@pytest.mark.parametrize("lossless", [False, True])
@pytest.mark.parametrize("dst", [2, 1 << 40, -2])
def test_a_destination_outside_the_tables_is_an_error_naming_the_switch(lossless, dst):
    """A hand-made packet whose dst is no host index (nor -1) stops the run with an
    IndexError from the switch that met it, on every forwarding path (both arrival handlers,
    the generic receive, a host's route): no path reads past its tables or routes by a
    negative index."""
    eng, net = make(star(2), NetworkConfig(lossless=lossless))
    net.send("h0", SimPacket(KIND_OTHER, 0, dst, 100))
    with pytest.raises(IndexError, match=rf"tor0: packet destination {dst} is not a host index \(0\.\.1\) or -1"):
        eng.run()
    tor = net.switch("tor0")
    with pytest.raises(IndexError, match="tor0: packet destination"):
        tor.receive(SimPacket(KIND_OTHER, 0, dst, 100), 0)
    with pytest.raises(IndexError, match="tor0: packet destination"):
        tor.route(SimPacket(KIND_OTHER, 0, dst, 100))
    assert tor.route(SimPacket(KIND_OTHER, 0, -1, 100)) is None
