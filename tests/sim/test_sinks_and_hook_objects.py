"""Host sinks and hook objects: the object forms of a host handler and a packet hook are
called like the plain callables they stand for (and a switch reaches a hook object's
ports without looking names up)."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.sim.engine import Engine
from panama.sim.network import KIND_OTHER, KIND_PANAMA, Network, NetworkConfig, SimPacket
from panama.sim.nodes import HookObject, PacketSink


class Recorder(PacketSink):
    def __init__(self):
        self.seqs = []

    def receive(self, pkt):
        self.seqs.append(pkt.seq)


class ToH1(HookObject):
    """Forwards every hooked packet to h1 (through the switch's own port)."""

    def __init__(self, switch):
        self.switch = switch
        self.calls = 0

    def run(self, pkt, from_node):
        self.calls += 1
        return [self.switch.hook_ports(("h1",))[0], pkt]


def make():
    eng = Engine()
    return eng, Network(eng, star(3), NetworkConfig(), rng=np.random.default_rng(0))


@pytest.mark.parametrize("as_sink", [True, False])
def test_a_sink_gets_what_a_plain_handler_gets(as_sink):
    eng, net = make()
    rec = Recorder()
    net.attach("h1", rec if as_sink else rec.receive)
    assert (net.host("h1").sink is rec) == as_sink
    for seq in range(5):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, 500, seq=seq))
    eng.run()
    assert rec.seqs == [0, 1, 2, 3, 4]


def test_attaching_a_plain_handler_replaces_a_sink():
    eng, net = make()
    rec, got = Recorder(), []
    net.attach("h1", rec)
    net.attach("h1", lambda p: got.append(p.seq))
    assert net.host("h1").sink is None
    net.send("h0", SimPacket(KIND_OTHER, 0, 1, 500, seq=9))
    eng.run()
    assert rec.seqs == [] and got == [9]


def test_a_hook_object_forwards_to_its_ports_and_calls_as_pairs():
    eng, net = make()
    sw = net.switch("tor0")
    hook = ToH1(sw)
    net.set_packet_hook("tor0", hook)
    rec = Recorder()
    net.attach("h1", rec)
    net.send("h0", SimPacket(KIND_PANAMA, 0, -1, 100, seq=3))  # hop-by-hop: only the hook routes it
    eng.run()
    assert hook.calls == 1 and rec.seqs == [3]
    pkt = SimPacket(KIND_PANAMA, 0, -1, 100, seq=4)
    assert hook(pkt, "h0") == [("h1", pkt)]  # the plain-hook contract, for wrappers


def test_hook_ports_names_the_missing_neighbour():
    _, net = make()
    sw = net.switch("tor0")
    assert sw.hook_ports(("h0", "h2")) == (sw.port_to("h0"), sw.port_to("h2"))
    with pytest.raises(KeyError, match="forwarded to 'nowhere', which is not a neighbour"):
        sw.hook_ports(("h0", "nowhere"))
