"""The simulated network: links, output queues with ECN and drop-tail, PFC, ECMP.

Model (details and rationale in docs/simulator-network.md)
-----------------------------------------------------------
* Every undirected topology edge ``a-b`` becomes two :class:`Port` objects (``a->b`` and
  ``b->a``). A port is an output queue, a serialiser at ``rate_bps`` and a wire with
  ``delay_ps`` of propagation. FIFO and constant rate make each packet's transmission
  start and end known when it is enqueued (``busy_until``), so a port needs **no
  per-packet event** for serialisation: it keeps a *pipe* (deque of
  ``(arrival_ps, packet)``) and at most one pending engine event, the arrival of the
  pipe's head at the peer. One engine event per packet hop.
* Queue occupancy is read in the time domain: ``busy_until - now`` picoseconds of
  backlog (plus the packets held back by a PFC pause) equals the bytes not yet
  serialised, including the rest of the packet on the wire.
* ECN: DCTCP step marking on the instantaneous queue, applied when a packet is enqueued
  (as in the DCTCP paper; htsim marks at dequeue): an ECN-capable packet is marked CE if
  the backlog it joins exceeds ``K`` bytes. Default ``K = 65 x 1500 B`` scaled by
  ``rate / 10 Gbps``.
* Lossy mode (default): drop-tail per output queue at ``queue_limit_bytes``.
* Lossless mode (``lossless=True``): no per-queue limit; each switch has a shared buffer
  with per-ingress accounting. When the bytes held for an ingress exceed the PFC
  threshold (dynamic: ``alpha x (shared pool - used)``, alpha = 1/8; or static), the
  switch sends PAUSE to the upstream port (it takes effect one link delay later;
  the packet being serialised finishes, packets not yet started are held); RESUME when
  the ingress drains ``resume_offset_bytes`` below the threshold. Headroom
  ``3 x rate x delay + 2 x MTU`` per ingress is kept out of the shared pool, so the
  buffer never overflows; an overflow would be counted as ``lossless_overflow``.
* ECMP: next hops per destination precomputed from shortest paths
  (:mod:`panama.sim.routing`); a flow's packets follow one path chosen by the flow hash
  and a per-switch seeded salt.
* PANAMA packets: a switch can carry *packet hooks* per packet kind. A hooked packet is
  handed to ``hook(packet, from_node)``; the hook returns ``(neighbour_name, packet)``
  pairs to forward (optionally after a fixed processing latency), one distinct packet
  object per pair (the network mutates ``ecn`` in flight). Hooked packets are consumed
  by the hook and not charged to the switch buffer; their outputs are charged to the
  ingress of the packet that triggered them.
* Hosts deliver a packet to ``packet.deliver(packet)`` when set, else to the handler
  attached with :meth:`Network.attach`. After delivery the network holds no reference
  to the packet: receivers may reuse it (e.g. turn a data packet into its ACK).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import networkx as nx
import numpy as np

from panama.core.errors import FieldError
from panama.core.units import tx_time_ps
from panama.sim.engine import Engine
from panama.sim.lossless import LosslessPort
from panama.sim.netconfig import NetworkConfig
from panama.sim.nodes import Host, Node, PacketHook, PacketSink, Switch
from panama.sim.packet import (
    DROP_LOSSLESS_OVERFLOW,
    DROP_NO_HANDLER,
    DROP_NO_ROUTE,
    DROP_QUEUE_FULL,
    DROP_REASONS,
    KIND_ACK,
    KIND_DATA,
    KIND_OTHER,
    KIND_PANAMA,
    NUM_KINDS,
    PANAMA_OVERHEAD_BYTES,
    SimPacket,
    panama_sim_packet,
)
from panama.sim.ports import HostPort, Port
from panama.sim.routing import group_next_hops
from panama.sim.sampler import QueueSampler
from panama.sim.tally import NetworkTally

# The network's public names, wherever they are defined (this module stays the one import
# for users of the simulated network).
__all__ = [
    "SimPacket",
    "panama_sim_packet",
    "PANAMA_OVERHEAD_BYTES",
    "NetworkConfig",
    "Network",
    "Port",
    "HostPort",
    "LosslessPort",
    "Node",
    "Switch",
    "Host",
    "PacketHook",
    "QueueSampler",
    "tx_time",
    "KIND_DATA",
    "KIND_ACK",
    "KIND_PANAMA",
    "KIND_OTHER",
    "NUM_KINDS",
    "DROP_QUEUE_FULL",
    "DROP_LOSSLESS_OVERFLOW",
    "DROP_NO_ROUTE",
    "DROP_NO_HANDLER",
    "DROP_REASONS",
]


def _tier_label(kind_a: str, kind_b: str) -> str:
    order = {"host": 0, "tor": 1, "agg": 2, "spine": 3, "core": 4}
    a, b = sorted((kind_a, kind_b), key=lambda k: order.get(k, 9))
    return f"{a}-{b}"


class Network:
    """Builds hosts, switches and ports from a topology and owns the counters.

    ``topology``: a :class:`panama.core.topology.Topology` or a ``networkx.Graph`` with
    node attribute ``kind`` and edge attributes ``rate_bps`` and ``delay_ps``.
    ``rng`` seeds the per-switch ECMP salts.
    """

    def __init__(
        self,
        engine: Engine,
        topology: Any,
        config: NetworkConfig | None = None,
        *,
        rng: np.random.Generator,
    ):
        self.engine = engine
        self.config = cfg = config or NetworkConfig()
        is_graph = isinstance(topology, nx.Graph)
        graph: nx.Graph = topology if is_graph else topology.graph
        self.graph = graph
        self.topology = None if is_graph else topology
        kinds = nx.get_node_attributes(graph, "kind")
        missing = [n for n in graph.nodes if n not in kinds]
        if missing:
            raise ValueError(f"node {missing[0]!r}: missing attribute 'kind'")
        # Drops and queue-ahead as the ports and nodes report them (handed to each).
        self.tally = NetworkTally(engine)
        self._build_nodes(kinds)
        self.ports: list[Port] = []
        self._build_links(graph, cfg)
        self._set_queues(cfg)
        for h in self.hosts:
            if len(h.ports) == 1:
                h.uplink = h.ports[0]
        self._build_routes(graph, rng)
        if cfg.lossless:
            self._set_lossless(cfg)
        for p in self.ports:
            p._select_delivery()

    # ------------------------------------------------------------------ construction
    def _build_nodes(self, kinds: dict[Any, str]) -> None:
        """Hosts (in the topology's order, else natural order of their names) and switches (by name)."""
        if self.topology is not None and hasattr(self.topology, "hosts"):
            host_names = list(self.topology.hosts)
        else:
            from panama.core.topology import natural_key

            host_names = sorted((n for n, k in kinds.items() if k == "host"), key=natural_key)
        self.host_names: list[str] = host_names
        self.host_index: dict[str, int] = {h: i for i, h in enumerate(host_names)}
        self.hosts: list[Host] = [Host(self, h, i) for i, h in enumerate(host_names)]
        self.nodes: dict[str, Node] = {h.name: h for h in self.hosts}
        self.switches: list[Switch] = []
        for n in sorted((n for n, k in kinds.items() if k != "host"), key=str):
            sw = Switch(self, n, kinds[n])
            self.switches.append(sw)
            self.nodes[n] = sw

    def _build_links(self, graph: nx.Graph, cfg: NetworkConfig) -> None:
        """Two ports per link, one each way, in the order of the sorted edges."""
        for a, b, d in sorted(graph.edges(data=True), key=lambda e: (str(e[0]), str(e[1]))):
            if "rate_bps" not in d or "delay_ps" not in d:
                raise ValueError(f"link {a}-{b}: needs rate_bps and delay_ps attributes")
            na, nb = self.nodes[a], self.nodes[b]
            tier = _tier_label(na.kind, nb.kind)

            def cls(owner: Node) -> type[Port]:
                if cfg.lossless:
                    return LosslessPort
                return HostPort if isinstance(owner, Host) else Port

            pab = cls(na)(self, na, nb, d["rate_bps"], d["delay_ps"], tier)
            pba = cls(nb)(self, nb, na, d["rate_bps"], d["delay_ps"], tier)
            pab.reverse, pba.reverse = pba, pab
            for node, port in ((na, pab), (nb, pba)):
                port.index = len(node.ports)
                node.ports.append(port)
                node.port_by_name[port.peer.name] = port
            self.ports.extend((pab, pba))
        for p in self.ports:
            p.peer_index = p.reverse.index

    def _set_queues(self, cfg: NetworkConfig) -> None:
        """Queue behaviour: ECN thresholds and (lossy) drop limits.

        Host NIC queues never drop (the senders' windows bound them); they mark only
        with ``host_ecn``."""
        for p in self.ports:
            on_switch = isinstance(p.owner, Switch)
            if cfg.ecn and (on_switch or cfg.host_ecn):
                p.k_ps = p.tx_time(cfg.ecn_k_for(p.rate_bps))
            if on_switch and not cfg.lossless:
                p.limit_ps = p.tx_time(cfg.queue_limit_for(p.rate_bps))

    def _build_routes(self, graph: nx.Graph, rng: np.random.Generator) -> None:
        """ECMP salts and every node's forwarding table (``fib``: next-hop ports per
        destination host; ``fib1``: the one port, if one; ``host_count``: their length).
        Tuples, built once: compiled, an entry is one load from the table's own memory."""
        salts = rng.integers(0, 2**63 - 1, size=len(self.switches) + len(self.hosts), dtype=np.int64)
        for node, salt in zip(self.switches + self.hosts, salts.tolist(), strict=True):
            node.salt = int(salt)
        attach = {h.name: h.ports[0].peer.name for h in self.hosts if len(h.ports) == 1}
        host_group, roots, table = group_next_hops(graph, self.host_names, attach)
        fibs: dict[str, list[tuple[Port, ...]]] = {}
        for node in self.nodes.values():
            pbn = node.port_by_name
            cache: dict[tuple, tuple[Port, ...]] = {}
            per_group = []
            for hops in table[node.name]:
                t = cache.get(hops)
                if t is None:
                    t = cache[hops] = tuple(pbn[x] for x in hops)
                per_group.append(t)
            fibs[node.name] = [per_group[g] for g in host_group]
        for i, (h, g) in enumerate(zip(self.hosts, host_group)):
            root = self.nodes[roots[g]]
            if root is not h:
                fibs[root.name][i] = (root.port_by_name[h.name],)
            fibs[h.name][i] = ()
        for node in self.nodes.values():
            node.fib = tuple(fibs[node.name])
            node.fib1 = tuple(t[0] if len(t) == 1 else None for t in node.fib)
            node.host_count = len(self.hosts)

    def _set_lossless(self, cfg: NetworkConfig) -> None:
        """Lossless switches: shared buffer, PFC headroom and thresholds, release queues."""
        for sw in self.switches:
            n = len(sw.ports)
            sw.set_lossless(n)
            sw.buffer_bytes = (
                cfg.switch_buffer_bytes
                or sum(cfg.queue_limit_for(p.rate_bps) for p in sw.ports)
                or cfg.queue_limit_bytes
            )
            headroom = sum(cfg.headroom_for(p.rate_bps, p.delay_ps) for p in sw.ports)
            sw.pool_bytes = sw.buffer_bytes - headroom
            if sw.pool_bytes < cfg.mtu_bytes * n:
                raise FieldError(
                    "switch_buffer_bytes",
                    f"{sw.buffer_bytes} B at {sw.name} leaves "
                    f"{sw.pool_bytes} B after {headroom} B of PFC headroom; need at least one MTU per port",
                )
            static = cfg.pfc_static_threshold_bytes
            if static is not None and static * n + headroom > sw.buffer_bytes:
                raise FieldError(
                    "pfc_static_threshold_bytes",
                    f"{static} B x {n} ports + {headroom} B of headroom "
                    f"exceeds the {sw.buffer_bytes} B buffer of {sw.name}; lossless operation needs "
                    f"at most {max(0, (sw.buffer_bytes - headroom) // n)} B",
                )
            sw.pfc_alpha = cfg.pfc_alpha
            sw.pfc_static = cfg.pfc_static_threshold_bytes
            sw.resume_offset = (
                cfg.pfc_resume_offset_bytes if cfg.pfc_resume_offset_bytes is not None else 2 * cfg.mtu_bytes
            )

    # ------------------------------------------------------------------ access
    @property
    def drops(self) -> Counter[str]:
        """Packets dropped by the network, by reason (``tally.drops``)."""
        return self.tally.drops

    @property
    def queue_ahead(self) -> Any:
        """The attribution of tracked packets' queueing (``tally.queue_ahead``), or None."""
        return self.tally.queue_ahead

    @queue_ahead.setter
    def queue_ahead(self, value: Any) -> None:
        self.tally.queue_ahead = value

    @property
    def now(self) -> int:
        return self.engine.now

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"unknown node {name!r}") from None

    def host(self, name_or_index: str | int) -> Host:
        if isinstance(name_or_index, int):
            return self.hosts[name_or_index]
        node = self.node(name_or_index)
        if not isinstance(node, Host):
            raise KeyError(f"{name_or_index!r} is not a host")
        return node

    def switch(self, name: str) -> Switch:
        node = self.node(name)
        if not isinstance(node, Switch):
            raise KeyError(f"{name!r} is not a switch")
        return node

    def port(self, a: str, b: str) -> Port:
        """The output port from node ``a`` to its neighbour ``b``."""
        return self.node(a).port_to(b)

    def attach(self, host: str | int, handler: Callable[[SimPacket], Any] | None) -> None:
        """Deliver packets arriving at ``host`` without a ``deliver`` callback to ``handler``
        (a callable, or a :class:`~panama.sim.nodes.PacketSink`, then called in C)."""
        h = self.host(host)
        h.handler = handler
        h.sink = handler if isinstance(handler, PacketSink) else None

    def set_packet_hook(
        self, switch: str, hook: PacketHook | None, *, kinds: Sequence[int] = (KIND_PANAMA,), latency_ps: int = 0
    ) -> None:
        """Install ``hook(pkt, from_node) -> [(neighbour, pkt), ...]`` at ``switch`` for
        packets of ``kinds``; outputs leave ``latency_ps`` after the input arrived."""
        sw = self.switch(switch)
        for k in kinds:
            sw.set_hook(k, hook, latency_ps)

    def send(self, host: str | int, pkt: SimPacket) -> bool:
        """Transmit ``pkt`` from ``host`` (routed by ``pkt.dst``)."""
        return self.host(host).send(pkt)

    def path(self, src: int, dst: int, flow_hash: int = 0) -> list[Port]:
        """Ports a routed packet from host ``src`` to host ``dst`` would traverse."""
        probe = SimPacket(KIND_OTHER, src, dst, 0, flow_hash)
        node: Node = self.hosts[src]
        out: list[Port] = []
        while node is not self.hosts[dst]:
            port = node.route(probe)
            if port is None:
                raise ValueError(f"no route from {self.host_names[src]} to {self.host_names[dst]}")
            out.append(port)
            node = port.peer
            if len(out) > len(self.nodes):
                raise RuntimeError("routing loop")
        return out

    # ------------------------------------------------------------------ counters
    def hops(self) -> int:
        """Packet hops so far (packets accepted onto any link)."""
        return sum(p.tx_packets for p in self.ports)

    def counters(self) -> dict[str, Any]:
        """Network-wide counters (documented in docs/simulator-network.md)."""
        bytes_by_tier: Counter[str] = Counter()
        for p in self.ports:
            bytes_by_tier[p.tier] += p.tx_bytes
        return {
            "packet_hops": self.hops(),
            "bytes_total": sum(p.tx_bytes for p in self.ports),
            "bytes_by_tier": dict(sorted(bytes_by_tier.items())),
            "drops": {r: self.drops.get(r, 0) for r in DROP_REASONS}
            | {r: c for r, c in self.drops.items() if r not in DROP_REASONS},
            "drops_total": sum(self.drops.values()),
            "ecn_marks": sum(p.ecn_marks for p in self.ports),
            "pfc_pauses": sum(sw.pauses_sent for sw in self.switches),
            "pfc_paused_ps": sum(p.paused_ps for p in self.ports),
        }

    def port_stats(self) -> list[dict[str, Any]]:
        """One row per port with traffic: name, tier, packets, bytes, marks, drops, pauses."""
        return [
            {
                "port": p.name,
                "tier": p.tier,
                "tx_packets": p.tx_packets,
                "tx_bytes": p.tx_bytes,
                "ecn_marks": p.ecn_marks,
                "drops": p.drops,
                "pauses": p.pauses,
                "paused_ps": p.paused_ps,
            }
            for p in self.ports
            if p.tx_packets or p.drops or p.pauses
        ]

    def sample_queues(
        self, interval_ps: int, ports: Iterable[Port] | None = None, *, start_ps: int | None = None
    ) -> QueueSampler:
        """Sample the occupancy (bytes) of ``ports`` (default: every switch output port)
        every ``interval_ps``; see :class:`QueueSampler`."""
        if ports is None:
            ports = [p for p in self.ports if isinstance(p.owner, Switch)]
        return QueueSampler(self.engine, list(ports), interval_ps, start_ps=start_ps)


def tx_time(size_bytes: int, rate_bps: float) -> int:
    """Re-export of :func:`panama.core.units.tx_time_ps` for simulator users."""
    return tx_time_ps(size_bytes, rate_bps)
