"""PSwitch adapter: accelerator hook, wire sizes, ECN hand-over, processing latency, bypass."""

from __future__ import annotations

import numpy as np
import pytest

from panama.core.packet import CE, ECT0, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet
from panama.core.topology import parse_topology
from panama.core.transport import WorkerTransport
from panama.core.units import tx_time_ps, us
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import KIND_PANAMA, Network, NetworkConfig, SimPacket
from panama.sim.panama_host import PanamaHost, PanamaWorker
from panama.sim.pswitch import PSwitchFabric, panama_wire_bytes, wrap


def build(latency_ps: int = 0, memory: int = 64):
    eng = Engine()
    topo = parse_topology("leaf-spine:leaves=1,spines=1,hosts_per_leaf=2")
    net = Network(eng, topo, NetworkConfig(lossless=True), rng=np.random.default_rng(0))
    fab = PSwitchFabric(net, memory, latency_ps=latency_ps)
    fab.accelerators["leaf0"].install_tree(7, 0, ("h0", "h1"), None)
    return eng, net, fab


def workers(eng, net, elems_done):
    out = []
    for rank, h in enumerate(("h0", "h1")):
        tr = WorkerTransport(7, rank, [0])
        w = PanamaWorker(eng, net, PanamaHost(net, h), "leaf0", tr, on_done=lambda w: elems_done.append(eng.now))
        out.append(w)
    return out


def test_wire_size_is_ip_udp_header_payload():
    assert panama_wire_bytes(361) == 1500
    assert panama_wire_bytes(0) == 56
    p = Packet(1, 0, 0, 1, 10, ecn=CE)
    sp = wrap(p, src=3)
    assert sp.size_bytes == 96 and sp.kind == KIND_PANAMA and sp.inner is p and sp.ecn == CE and sp.dst == -1


@pytest.mark.parametrize("latency_ns", [0, 500, 2000])
def test_one_packet_allreduce_timing_includes_processing_latency(latency_ns):
    eng, net, fab = build(latency_ps=latency_ns * 1000)
    done: list[int] = []
    ws = workers(eng, net, done)
    for w in ws:
        w.start(361)
    eng.run()
    hop = tx_time_ps(1500, 10e9) + us(1)
    assert done == [2 * hop + latency_ns * 1000] * 2
    # Results are 1500-byte packets on the ToR's host ports.
    for h in ("h0", "h1"):
        port = net.port("leaf0", h)
        assert (port.tx_packets, port.tx_bytes) == (1, 1500)
    assert fab.accelerators["leaf0"].results_out == 1


def test_partial_last_packet_and_byte_counts():
    eng, net, fab = build()
    done: list[int] = []
    ws = workers(eng, net, done)
    for w in ws:
        w.start(1000)  # 361 + 361 + 278 floats
    eng.run()
    assert len(done) == 2
    expected = 3 * 56 + 4 * 1000
    closing_ack = 56  # header only, one per tree when the allreduce completes
    for w in ws:
        assert w.bytes_out == expected + closing_ack
        assert net.port(w.host.name, "leaf0").tx_bytes == expected + closing_ack
        assert net.port("leaf0", w.host.name).tx_bytes == expected


def test_ce_on_the_wire_reaches_the_accelerator_and_becomes_ece():
    eng, net, fab = build()
    acc = fab.accelerators["leaf0"]
    hook = net.switch("leaf0").hooks[KIND_PANAMA]
    a = wrap(Packet(7, 0, 0, 1, 4))
    a.ecn = CE  # marked by a queue on the way: only the wire packet knows
    assert hook(a, "h0") is None
    assert a.inner.ecn == CE
    out = hook(wrap(Packet(7, 0, 0, 1, 4)), "h1")
    assert sorted(to for to, _ in out) == ["h0", "h1"]
    for _, sp in out:
        assert sp.kind == KIND_PANAMA and sp.size_bytes == panama_wire_bytes(4)
        assert sp.inner.flags == FLAG_RESULT | FLAG_ECE and sp.ecn == ECT0 == sp.inner.ecn
    assert acc.contributions == 2


def test_other_traffic_bypasses_accelerators():
    eng, net, fab = build()
    tcp = Dctcp(net, rng=np.random.default_rng(1))
    flow = tcp.start_flow("h0", "h1", 50_000)
    eng.run()
    assert flow.done
    assert sum(a.contributions for a in fab.accelerators.values()) == 0
    assert fab.drops()["unknown_job"] == 0


def test_unknown_job_packet_is_dropped_by_accelerator_and_counted():
    eng, net, fab = build()
    hook = net.switch("leaf0").hooks[KIND_PANAMA]
    assert hook(wrap(Packet(99, 0, 0, 1, 4)), "h0") is None
    assert fab.stats()["drops"]["unknown_job"] == 1
    stray = SimPacket(KIND_PANAMA, -1, -1, 60, inner=Packet(5, 0, 0, 1, 1, flags=FLAG_RESULT))
    disp = PanamaHost(net, "h0")
    disp.receive(stray)
    assert disp.unknown_job == 1


def _ports_out(out) -> list[str]:
    return [port.peer.name for port in out[0::2]]


def test_hook_ports_by_tree_and_direction_stay_right_across_a_retransmission_and_a_new_tree():
    """The hook finds a tree's destination ports by the identity of the accelerator's tuple:
    a retransmission answered to its sender alone (a one-off tuple), a later regular result,
    a partial up and the same (job, tree) installed again with other children each get
    their own ports."""
    eng = Engine()
    topo = parse_topology("leaf-spine:leaves=2,spines=1,hosts_per_leaf=2")
    net = Network(eng, topo, NetworkConfig(lossless=True), rng=np.random.default_rng(0))
    fab = PSwitchFabric(net, 64)
    acc = fab.accelerators["spine0"]
    hook = net.switch("spine0").hooks[KIND_PANAMA]
    acc.install_tree(7, 1, ("leaf0", "leaf1"), None)

    def up(seq: int, flags: int = 0) -> Packet:
        return Packet(7, 1, seq, 0, 4, flags=flags, ack=0)

    assert hook.run(wrap(up(0)), "leaf0") is None
    assert _ports_out(hook.run(wrap(up(0)), "leaf1")) == ["leaf0", "leaf1"]
    # leaf0 retransmits seq 0 (it missed the result): the answer goes back to leaf0 alone.
    assert _ports_out(hook.run(wrap(up(0, FLAG_RETRANSMIT)), "leaf0")) == ["leaf0"]
    hook.run(wrap(up(1)), "leaf0")
    assert _ports_out(hook.run(wrap(up(1)), "leaf1")) == ["leaf0", "leaf1"]
    # The same (job, tree) installed again with one child: its result goes to that child
    # only (a table keyed by (job, tree) alone would repeat the old tree's two ports).
    acc.remove_tree(7, 1)
    acc.install_tree(7, 1, ("leaf1",), None)
    assert _ports_out(hook.run(wrap(up(0)), "leaf1")) == ["leaf1"]
    # Partials go up: the parent's port, in the slot of the other direction.
    leaf1 = fab.accelerators["leaf1"]
    leaf1.install_tree(7, 1, ("h2",), "spine0")
    assert _ports_out(net.switch("leaf1").hooks[KIND_PANAMA].run(wrap(up(0)), "h2")) == ["spine0"]
