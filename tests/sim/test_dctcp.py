"""DCTCP flows: bottleneck sharing, ECN response, FCT, loss recovery."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.core.units import ms, us
from panama.sim.dctcp import Dctcp, DctcpConfig, goodput_bps, jain
from panama.sim.engine import Engine
from panama.sim.network import KIND_DATA, Network, NetworkConfig


def setup(graph, cfg=None, tcp_cfg=None, seed=0):
    rng = np.random.default_rng(seed)
    eng = Engine()
    net = Network(eng, graph, cfg or NetworkConfig(), rng=rng)
    return eng, net, Dctcp(net, tcp_cfg, rng=rng)


def test_long_flows_fill_the_bottleneck_fairly_with_queue_near_k():
    n = 4
    eng, net, tcp = setup(star(n + 1, delay_ps=us(10)))
    flows = [tcp.start_flow(f"h{i}", f"h{n}", None, us(i)) for i in range(n)]
    bottleneck = net.port("tor0", f"h{n}")
    eng.run(ms(2))  # slow start and the first cuts
    before = [f.delivered_bytes for f in flows]
    sampler = net.sample_queues(us(5), [bottleneck])
    eng.run(ms(10))
    window = ms(8)
    gp = [(f.delivered_bytes - b) * 8e12 / window for f, b in zip(flows, before)]
    assert sum(gp) >= 0.95 * 10e9
    assert jain(gp) >= 0.99
    k_pkts = NetworkConfig().ecn_k_for(10e9) / 1500
    st = sampler.stats(bottleneck)
    assert 0.6 * k_pkts <= st["mean_pkts"] <= 1.4 * k_pkts
    limit_pkts = NetworkConfig().queue_limit_bytes / 1500
    assert st["p99_pkts"] <= 0.5 * limit_pkts
    assert net.counters()["drops_total"] == 0
    assert net.counters()["ecn_marks"] > 0
    assert all(f.timeouts == 0 and f.retransmits == 0 for f in flows)
    assert all(0 < f.alpha < 1 for f in flows)


def test_without_ecn_the_queue_grows_to_the_buffer():
    # Control for the test above: plain NewReno-style behaviour fills the buffer and drops.
    n = 4
    eng, net, tcp = setup(star(n + 1, delay_ps=us(10)), NetworkConfig(ecn=False, queue_limit_bytes=100 * 1500))
    for i in range(n):
        tcp.start_flow(f"h{i}", f"h{n}", None)
    eng.run(ms(10))
    assert net.counters()["drops_total"] > 0


def test_host_ecn_bounds_a_flow_limited_by_its_own_nic():
    # All links 10 Gbps: the sender's NIC is the bottleneck. Without host marking the
    # window and the NIC queue grow without bound; with it the NIC queue stays near K.
    peaks = {}
    for host_ecn in (False, True):
        eng, net, tcp = setup(star(2, delay_ps=us(10)), NetworkConfig(host_ecn=host_ecn))
        f = tcp.start_flow("h0", "h1", None)
        nic = net.port("h0", "tor0")
        s = net.sample_queues(us(5), [nic])
        eng.run(ms(4))
        late = [q for t, q in zip(s.times_ps, s.samples[0]) if t >= ms(1)]  # after slow start
        peaks[host_ecn] = (max(late) / 1500, f.cwnd, nic.ecn_marks)
        assert goodput_bps(f, ms(4)) > 0.9 * 10e9 * 1460 / 1500
    k = NetworkConfig().ecn_k_for(10e9) / 1500
    assert peaks[False][2] == 0 and peaks[False][0] > 5 * k
    assert peaks[True][2] > 0 and peaks[True][0] < 2.5 * k and peaks[True][1] < peaks[False][1] / 3


def test_one_segment_flow_completes_in_exactly_the_ideal_time():
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    done = []
    f = tcp.start_flow("h0", "h1", 1000, us(3), on_complete=done.append)
    eng.run()
    assert done == [f] and f.done
    assert f.fct_ps == f.ideal_fct_ps
    # data: 1040 B x 2 hops at 10 Gbps + 2 us; ACK: 64 B x 2 hops + 2 us
    assert f.ideal_fct_ps == 2 * 1040 * 800 + 2 * 64 * 800 + 4_000_000
    assert f.slowdown == 1.0
    assert f.start_ps == us(3) and f.finish_ps == us(3) + f.fct_ps


def test_ideal_fct_serialises_the_bytes_at_the_bottleneck_and_a_segment_elsewhere():
    # h0 -> tor0 at 10 Gb/s, tor0 -> h1 at 1 Gb/s: the bottleneck is the second hop.
    eng, net, tcp = setup(star(2, delay_ps=us(1), rates={1: 1e9}))
    cfg = tcp.config
    size = 50_000
    wire = size + -(-size // cfg.mss_bytes) * cfg.header_bytes
    seg = cfg.mss_bytes + cfg.header_bytes
    up, down = net.port("h0", "tor0"), net.port("tor0", "h1")
    assert down.ps_per_byte > up.ps_per_byte
    expected = wire * down.ps_per_byte + seg * up.ps_per_byte
    expected += sum(2 * p.delay_ps + cfg.ack_bytes * p.reverse.ps_per_byte for p in (up, down))
    assert tcp.ideal_fct(0, 1, size) == expected


def test_flow_fct_ideal_when_window_covers_bdp_and_slow_start_otherwise():
    # 1 us links: BDP (about 4 segments) < initial window, so the flow runs at line rate.
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    f = tcp.start_flow("h0", "h1", 200_000, 0)
    eng.run()
    assert f.done and f.retransmits == 0
    assert f.slowdown == pytest.approx(1.0, abs=1e-9)
    # 10 us links: BDP about 33 segments, slow start costs a few RTTs.
    eng, net, tcp = setup(star(2, delay_ps=us(10)))
    g = tcp.start_flow("h0", "h1", 200_000, 0)
    eng.run()
    assert g.done and 1.2 < g.slowdown < 2.5
    assert g.delivered_bytes == 200_000 and g.acked_bytes == 200_000
    row = f.record()
    assert row["src"] == "h0" and row["dst"] == "h1" and row["fct_ps"] == f.fct_ps


def test_zero_byte_flow_sends_one_empty_segment():
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    f = tcp.start_flow("h0", "h1", 0)
    eng.run()
    assert f.done and f.delivered_bytes == 0


def drop_once(net, seqs):
    """Hook at the switch dropping the data segments in ``seqs`` once each."""
    todo = set(seqs)

    def hook(pkt, from_node):
        if pkt.seq in todo:
            todo.discard(pkt.seq)
            return None
        return [(net.host_names[pkt.dst], pkt)]

    net.set_packet_hook("tor0", hook, kinds=(KIND_DATA,))


def test_single_loss_is_repaired_by_fast_retransmit():
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    drop_once(net, {20})
    f = tcp.start_flow("h0", "h1", 100 * 1460)
    eng.run()
    assert f.done
    assert f.fast_retransmits == 1 and f.timeouts == 0 and f.retransmits == 1
    assert f.delivered_bytes == 100 * 1460


def test_two_losses_in_one_window_use_newreno_partial_acks():
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    drop_once(net, {20, 24})
    f = tcp.start_flow("h0", "h1", 100 * 1460)
    eng.run()
    assert f.done and f.timeouts == 0 and f.fast_retransmits == 1 and f.retransmits == 2


def test_tail_loss_is_repaired_by_rto_with_backoff_reset():
    cfg = DctcpConfig(min_rto_ps=us(200), initial_rto_ps=us(200))
    eng, net, tcp = setup(star(2, delay_ps=us(1)), tcp_cfg=cfg)
    drop_once(net, {9})
    f = tcp.start_flow("h0", "h1", 10 * 1460)
    eng.run()
    assert f.done and f.timeouts == 1 and f.retransmits == 1
    assert f.fct_ps >= us(200)
    assert f.backoff == 1


def test_lost_retransmission_backs_off():
    cfg = DctcpConfig(min_rto_ps=us(100), initial_rto_ps=us(100))
    eng, net, tcp = setup(star(2, delay_ps=us(1)), tcp_cfg=cfg)
    attempts = []

    def hook(pkt, from_node):
        if pkt.seq == 0 and len(attempts) < 3:
            attempts.append(net.now)
            return None
        return [(net.host_names[pkt.dst], pkt)]

    net.set_packet_hook("tor0", hook, kinds=(KIND_DATA,))
    f = tcp.start_flow("h0", "h1", 1460)
    eng.run()
    assert f.done and f.timeouts == 3
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert gaps[1] >= 2 * gaps[0] - us(1)  # exponential back-off


def test_on_complete_hooks_and_summary():
    seen = []
    rng = np.random.default_rng(0)
    eng = Engine()
    net = Network(eng, star(3, delay_ps=us(1)), rng=rng)
    tcp = Dctcp(net, rng=rng, on_complete=lambda f: seen.append(("stack", f.id)))
    tcp.start_flow("h0", "h2", 5000, on_complete=lambda f: seen.append(("flow", f.id)))
    tcp.start_flow("h1", "h2", 5000, us(1))
    eng.run()
    assert seen[:2] == [("flow", 0), ("stack", 0)] and ("stack", 1) in seen
    s = tcp.summary()
    assert s["flows"] == s["completed"] == 2 and s["slowdown_mean"] >= 1.0
    assert len(tcp.fct_table()) == 2 and tcp.active == 0


def test_goodput_and_jain_helpers():
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0]) == pytest.approx(0.5)
    eng, net, tcp = setup(star(2, delay_ps=us(1)))
    f = tcp.start_flow("h0", "h1", 14600)
    eng.run()
    assert goodput_bps(f, ms(1)) == pytest.approx(14600 * 8 / 1e-3)


def test_bad_flow_arguments_name_the_field():
    eng, net, tcp = setup(star(2, delay_ps=us(10)))
    with pytest.raises(ValueError, match="src/dst"):
        tcp.start_flow("h0", "h0", 100)
    with pytest.raises(ValueError, match="size_bytes"):
        tcp.start_flow("h0", "h1", -1)
    with pytest.raises(KeyError):
        tcp.start_flow("h0", "nope", 100)
    with pytest.raises(ValueError, match="min_rto_ps"):
        DctcpConfig(min_rto_ps=0)
    with pytest.raises(ValueError, match="g"):
        DctcpConfig(g=2.0)
