"""PSwitches in the simulator: a network switch plus a core :class:`Accelerator`.

Contract
--------
Every switch of the :class:`~panama.sim.network.Network` gets one
:class:`panama.core.accelerator.Accelerator` (``store_payloads=False``: sizes only),
attached as the switch's packet hook for ``KIND_PANAMA`` packets. The hook is a thin
adapter and holds no protocol logic:

* copy the ECN codepoint the network may have set on the wire packet (CE) into the
  core packet's ``ecn`` field;
* hand the core packet to ``Accelerator.receive(packet, from_node)``, ``from_node``
  being the topology name of the neighbour it came from (a host or a switch, exactly
  the names the controller put into the tree entries);
* for every returned ``(destinations, packet)`` pair, wrap the packet into one wire
  packet of :func:`panama_wire_bytes` per destination and let the switch forward each
  through its port towards that neighbour (the ports of each destination tuple looked up
  once, :meth:`Switch.hook_ports`) after the configured processing latency (FIFO per
  switch). The
  copies share the core packet, as a switch's multicast replicates one buffer; every
  receiver sets the core packet's ``ecn`` from its own wire copy before using it.

Non-PANAMA packets never reach the hook: they are routed by the switch (ECMP) as usual.
The controller's plans are applied with :func:`panama.core.controller.install` /
``uninstall`` on :attr:`PSwitchFabric.accelerators`.
"""

from __future__ import annotations

from collections.abc import Iterable

from panama.core.accelerator import DROP_REASONS, Accelerator
from panama.core.codec import DEFAULT_PAYLOAD_ELEMS, IP_UDP_OVERHEAD_BYTES, wire_size
from panama.core.packet import FLAG_RESULT, Packet
from panama.sim.network import Network
from panama.sim.nodes import HookObject, Switch
from panama.sim.packet import KIND_PANAMA, PANAMA_OVERHEAD_BYTES, SimPacket, panama_sim_packet

__all__ = ["PSwitchFabric", "PanamaHook", "panama_wire_bytes", "wrap"]


def panama_wire_bytes(count: int) -> int:
    """IP packet size of a PANAMA packet with ``count`` floats: 20 IP + 8 UDP + 28 header + 4 * count."""
    return IP_UDP_OVERHEAD_BYTES + wire_size(count)


def wrap(packet: Packet, src: int = -1) -> SimPacket:
    """A wire packet carrying ``packet`` (hop-by-hop, ``dst`` -1, ECN from the core packet)."""
    return panama_sim_packet(packet, src)


class PanamaHook(HookObject):
    """The ``KIND_PANAMA`` packet hook of one switch around its accelerator (see the
    module docstring): ``run(spkt, from_node)`` returns ``[port, packet, ...]``."""

    __slots__ = ("acc", "switch", "_ports", "_recent")

    def __init__(self, acc: Accelerator, switch: Switch):
        self.acc = acc
        self.switch = switch
        # The accelerator's destination tuples (a tree's children, its parent, a
        # retransmission's sender) -> the switch's ports towards them, resolved once each.
        self._ports: dict[tuple, tuple] = {}
        # (destinations, ports) last used for a packet of a (job, tree) and direction (the
        # slot: the job's low 5 bits, the tree's low 3, one bit for results, see run): a
        # tree's children and its parent are one tuple object each for as long as the tree
        # is installed, found here by identity without hashing the tuple (a tuple's hash is
        # not cached: hashing and comparing its names took 15 % of the hook's instructions,
        # the accelerator's included).
        self._recent: list[tuple | None] = [None] * (32 * 8 * 2)

    def run(self, spkt: SimPacket, from_node: str):
        """The hook's work (a C method when compiled, ``pswitch.pxd``)."""
        pkt = spkt.inner
        ecn = spkt.ecn
        if ecn != pkt.ecn:
            pkt.ecn = ecn
        # The class's method, called directly (compiled: no per-instance override check).
        out = Accelerator.receive(self.acc, pkt, from_node)
        if not out:
            return None
        res = None
        for destinations, p in out:
            # Results go down to children, everything else up to the parent: the slot of
            # the (job, tree, direction); a miss (another tuple: a retransmission's sender,
            # a tree installed again) looks the tuple up by value and takes the slot.
            at = (p.job_id & 31) << 4 | (p.tree_id & 7) << 1 | (p.flags & FLAG_RESULT)
            hit = self._recent[at]
            if hit is not None and hit[0] is destinations:
                ports = hit[1]
            else:
                ports = self._ports.get(destinations)
                if ports is None:
                    ports = self._ports[destinations] = self.switch.hook_ports(destinations)
                self._recent[at] = (destinations, ports)
            size = PANAMA_OVERHEAD_BYTES + 4 * p.count
            for port in ports:
                if res is None:
                    # The network hands the input packet over to the hook: reuse it for
                    # the first copy (one allocation less per hop), in a list made whole
                    # (most hooks emit one packet: no appends).
                    spkt.src = -1
                    spkt.size_bytes = size
                    spkt.ecn = p.ecn
                    spkt.inner = p
                    res = [port, spkt]
                else:
                    res.append(port)
                    res.append(panama_sim_packet(p, -1))
        return res


class PSwitchFabric:
    """One accelerator per switch of ``net``, installed as the switches' PANAMA hook.

    ``packet_memory``: slots per accelerator; ``latency_ps``: per-packet processing
    latency (the time between a packet's arrival and the departure of what it
    triggers). ``accelerators`` maps switch names to accelerators (what
    ``panama.core.controller.install`` takes).
    """

    def __init__(
        self,
        net: Network,
        packet_memory: int,
        *,
        latency_ps: int = 0,
        payload_elems: int = DEFAULT_PAYLOAD_ELEMS,
        switches: Iterable[str] | None = None,
        reserve_shares: int = 0,
    ):
        self.net = net
        self.latency_ps = int(latency_ps)
        all_switches = net.switches  # a local (see Accelerator._release)
        names = list(switches) if switches is not None else [sw.name for sw in all_switches]
        self.accelerators: dict[str, Accelerator] = {}
        for name in names:
            acc = Accelerator(
                packet_memory,
                payload_elems,
                name=name,
                store_payloads=False,
                copy_payloads=False,
                reserve_shares=reserve_shares,
            )
            self.accelerators[name] = acc
            net.set_packet_hook(
                name, self._make_hook(acc, net.switch(name)), kinds=(KIND_PANAMA,), latency_ps=self.latency_ps
            )
        self.packets_in = 0

    @staticmethod
    def _make_hook(acc: Accelerator, switch: Switch) -> PanamaHook:
        return PanamaHook(acc, switch)

    # ------------------------------------------------------------------ reporting
    def check_invariants(self) -> None:
        """Run every accelerator's memory-accounting check (AssertionError on failure)."""
        for acc in self.accelerators.values():
            acc.check_invariants()

    def drops(self) -> dict[str, int]:
        """Accelerator drops summed over switches, by reason (every reason listed)."""
        total = {r: 0 for r in DROP_REASONS}
        for acc in self.accelerators.values():
            drops = acc.drops  # a local (see Accelerator._release)
            for r, c in drops.items():
                total[r] = total.get(r, 0) + c
        return total

    def stats(self) -> dict:
        """Totals over accelerators plus the peak slot use of the fullest one."""
        accs = list(self.accelerators.values())
        peak = max(accs, key=lambda a: (a.peak_used_slots, a.name)) if accs else None
        return {
            "contributions": sum(a.contributions for a in accs),
            "partials_out": sum(a.partials_out for a in accs),
            "results_out": sum(a.results_out for a in accs),
            "retransmits_answered": sum(a.retransmits_answered for a in accs),
            "peak_used_slots": peak.peak_used_slots if peak else 0,
            "peak_switch": str(peak.name) if peak and peak.peak_used_slots else None,
            "packet_memory_slots": accs[0].packet_memory if accs else 0,
            "drops": self.drops(),
            "drops_total": sum(self.drops().values()),
        }
