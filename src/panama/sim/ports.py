"""Ports of the simulated network: output queue, serialiser and wire of one direction of
a link, with ECN marking, drop-tail and the arrival handlers of lossy networks.

Contract: a :class:`Port` accepts a packet with :meth:`Port.send` (False: dropped,
counted by the network), fixes its transmission slot in FIFO order and, when its arrival
time at the peer comes, hands it over with the arrival handler chosen for the peer by
:meth:`Port._select_delivery` (a host's ``deliver`` callback or handler, a switch's ECMP
forwarding inlined with the next port's ``send``). :class:`HostPort` is the NIC of a
host in a lossy network. The ports of lossless (PFC) networks are in
:mod:`panama.sim.lossless`; hosts and switches in :mod:`panama.sim.nodes`;
:class:`panama.sim.network.Network` builds them all from a topology (the model:
docs/simulator-network.md).

The simulator's hot path: compiled with ``ports.pxd`` when the fast path is built,
interpreted otherwise (same source, same results).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

try:
    import cython  # the compiled build's directive below (a no-op interpreted)
except ImportError:  # interpreted, without Cython installed
    from panama.core import _cython_shim as cython

from panama.core.packet import CE
from panama.sim.fifos import PacketPipe, ReleaseRings
from panama.sim.heap import Event, schedule_event
from panama.sim.nodes import Host, Switch
from panama.sim.packet import DROP_NO_ROUTE, DROP_QUEUE_FULL, FLAG_TRACKED, NUM_KINDS, SimPacket
from panama.sim.routing import ecmp_index

if TYPE_CHECKING:
    from panama.sim.network import Network
    from panama.sim.nodes import Node

__all__ = ["Port", "HostPort"]

_BITS_PS = 8_000_000_000_000  # bits * ps per second (8 * PS_PER_S)
_NEVER = 1 << 62
_CE = CE  # a C constant when compiled
_TRACKED = FLAG_TRACKED  # a packet whose queueing is attributed (panama.sim.qahead)
_NUM_KINDS = NUM_KINDS

# Arrival handlers of a port (Port._mode), chosen by the kind of its peer.
_GENERIC = 0
_HOST = 1
_SWITCH = 2
_HOST_CHECKED = 3
_SWITCH_LOSSLESS = 4


class Port(Event):
    """Output queue + serialiser + wire from ``owner`` to ``peer`` (one direction).

    The pipe holds the packets accepted and not yet arrived, each with its arrival time
    at the peer in ``arrive_ps``. The port is itself the engine event of its pipe's head
    arrival (:meth:`fire` runs the arrival handler chosen for the peer); ``release`` holds
    the buffer releases of a lossless switch's port, which the switch settles.

    Serialisation takes ``size_bytes x ps_per_byte`` with ``ps_per_byte =
    ceil(8e12 / rate_bps)``: exact for every rate dividing 8 Tbit/s (1, 2.5, 10, 25, 40,
    50, 100, 200, 400 Gbps); other rates are rounded down by less than one part in
    ``ps_per_byte``.

    Counters: ``tx_packets``/``tx_bytes`` (accepted for transmission: one packet hop
    each), ``ecn_marks``, ``drops``, ``pauses`` (PAUSE frames received),
    ``paused_ps`` (time spent paused, updated at resume).
    """

    __slots__ = (
        "owner",
        "peer",
        "peer_switch",
        "peer_host",
        "index",
        "peer_index",
        "reverse",
        "name",
        "tier",
        "rate_bps",
        "ps_per_byte",
        "delay_ps",
        "busy_until",
        "pipe",
        "armed",
        "paused",
        "paused_since",
        "waiting",
        "waiting_ps",
        "limit_ps",
        "k_ps",
        "release",
        "_eng",
        "_trace",
        "_mode",
        "net",
        "tally",
        "tx_packets",
        "tx_bytes",
        "ecn_marks",
        "drops",
        "pauses",
        "paused_ps",
    )

    def __init__(self, net: Network, owner: Node, peer: Node, rate_bps: float, delay_ps: int, tier: str):
        self.t = 0
        self.seq = 0
        self.net = net
        self.tally = net.tally
        eng = net.engine
        self._eng = eng
        self._trace = eng.trace
        self.owner = owner
        self.peer = peer
        # The same node, typed (ports.pxd), for the arrival handlers; fixed, as ``peer``.
        self.peer_switch: Switch | None = peer if isinstance(peer, Switch) else None
        self.peer_host: Host | None = peer if isinstance(peer, Host) else None
        self.index = -1
        self.peer_index = -1
        self.reverse: Port | None = None
        self.name = f"{owner.name}->{peer.name}"
        self.tier = tier
        self.rate_bps = float(rate_bps)
        if not self.rate_bps >= 1:
            raise ValueError(f"link {owner.name}-{peer.name}: rate_bps must be >= 1, got {rate_bps!r}")
        self.ps_per_byte = -(-_BITS_PS // int(rate_bps))
        self.delay_ps = int(delay_ps)
        self.busy_until = 0
        self.pipe = PacketPipe()  # in flight, in arrival order (``arrive_ps``)
        self.armed = False
        self.paused = False
        self.paused_since = 0
        self.waiting: deque[tuple[SimPacket, int]] = deque()
        self.waiting_ps = 0
        self.limit_ps = _NEVER
        self.k_ps = _NEVER
        self.release: ReleaseRings | None = None  # see enable_release
        self._mode = _GENERIC
        self._fire_cb = self._deliver
        self.tx_packets = 0
        self.tx_bytes = 0
        self.ecn_marks = 0
        self.drops = 0
        self.pauses = 0
        self.paused_ps = 0

    def __repr__(self) -> str:
        return f"Port({self.name}, {self.rate_bps / 1e9:g} Gbps, {self.delay_ps} ps)"

    def enable_release(self, rings: ReleaseRings) -> None:
        """Queue the ``(end_ps, size, in_idx)`` of every packet whose transmission has not
        ended in ring ``index`` of ``rings``, the owner's, which frees the shared buffer
        then (lossless switch ports; :class:`panama.sim.lossless.LosslessPort`)."""
        self.release = rings

    def _select_delivery(self) -> None:
        """Pick the arrival handler specialised for the peer (called once the network is built)."""
        peer = self.peer
        if self.net.config.lossless:
            # Pauses can take packets back from a pipe under a pending event.
            if isinstance(peer, Host):
                self._mode = _HOST_CHECKED
                self._fire_cb = self._deliver_host_checked
            elif isinstance(peer, Switch):
                self._mode = _SWITCH_LOSSLESS
                self._fire_cb = self._deliver_switch_lossless
        elif isinstance(peer, Host):
            self._mode = _HOST
            self._fire_cb = self._deliver_host
        elif isinstance(peer, Switch):
            self._mode = _SWITCH
            self._fire_cb = self._deliver_switch

    def fire(self) -> None:
        """The pipe's head is due at the peer: run the arrival handler of :meth:`_select_delivery`.

        The compiled queue calls this (the interpreted one calls ``_fire_cb``). The lossy
        handlers, which no subclass overrides, are called through the class: a direct C
        call when compiled, without the method table and the check for a Python override."""
        mode = self._mode
        if mode == _SWITCH:
            Port._deliver_switch(self)
        elif mode == _HOST:
            Port._deliver_host(self)
        elif mode == _SWITCH_LOSSLESS:
            self._deliver_switch_lossless()
        elif mode == _HOST_CHECKED:
            self._deliver_host_checked()
        else:
            self._deliver()

    # ------------------------------------------------------------------ queries
    def tx_time(self, size_bytes: int) -> int:
        """Serialisation time of ``size_bytes`` on this port (ps)."""
        return size_bytes * self.ps_per_byte

    def backlog_ps(self) -> int:
        """Transmission time of everything queued (incl. the rest of the packet on the wire)."""
        b = self.busy_until - self._eng.now
        return (b if b > 0 else 0) + self.waiting_ps

    def queue_bytes(self) -> int:
        """Bytes not yet serialised (instantaneous queue occupancy)."""
        return self.backlog_ps() // self.ps_per_byte

    # ------------------------------------------------------------------ data path
    def send(self, pkt: SimPacket, in_idx: int = -1) -> bool:
        """Enqueue ``pkt`` (arrived on ingress ``in_idx`` of the owner; -1: local).
        Returns False if it was dropped."""
        now = self._eng.now
        size = pkt.size_bytes
        tx = size * self.ps_per_byte
        bu = self.busy_until
        if bu < now:
            bu = now
        backlog = bu - now
        if backlog + tx > self.limit_ps:
            self.tally.drop(self, pkt, DROP_QUEUE_FULL)
            return False
        self._transmit(pkt, now, bu, tx)
        return True

    def _transmit(self, pkt: SimPacket, now: int, bu: int, tx: int) -> None:
        """The tail of every send of an accepted packet, the wire free from ``bu`` (>= now)
        for ``tx`` ps: mark ECN-capable packets CE above ``k_ps`` of backlog, count, queue
        in the pipe with the arrival time, attribute queueing (``tally.ahead``), arm."""
        backlog = bu - now
        if backlog > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        end = bu + tx
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += pkt.size_bytes
        arrive = end + self.delay_ps
        pkt.arrive_ps = arrive
        self.pipe.push(arrive, pkt)
        if pkt.flags & _TRACKED:
            self.tally.ahead(self, pkt, now)
        if not self.armed:
            self.armed = True
            schedule_event(self._eng, arrive, self)
        if self._trace is not None:
            self._trace_packet(now, "tx", pkt, backlog)

    def _trace_packet(self, now: int, what: str, pkt: SimPacket, backlog_ps: int) -> None:
        """One record to the packet trace (``panama simulate --trace``)."""
        self._trace(
            (
                now,
                what,
                self.owner.name,
                self.peer.name,
                pkt.kind,
                pkt.src,
                pkt.dst,
                pkt.seq,
                pkt.size_bytes,
                backlog_ps // self.ps_per_byte,
            )
        )

    def _head_due(self, now: int) -> bool:
        """Whether the pipe's head arrives by ``now``; if not, the port is re-armed for the
        head's arrival, or disarmed when the pipe is empty (the step every arrival loop
        takes between packets)."""
        t = self.pipe.head_time()
        if t < 0:
            self.armed = False
            return False
        if t > now:
            schedule_event(self._eng, t, self)
            return False
        return True

    def _deliver(self) -> None:
        """Generic arrival: hand due packets to ``peer.receive``."""
        pipe = self.pipe
        now = self._eng.now
        peer = self.peer  # untyped (ports.pxd): ``receive`` is looked up as a Python attribute
        recv = peer.receive
        idx = self.peer_index
        while self._head_due(now):
            recv(pipe.pop_head(), idx)

    def _deliver_host(self) -> None:
        """Arrival at a host: ``pkt.deliver(pkt)`` or the host's handler.

        Only used in lossy networks, where the pipe's head is always due when the event
        fires (nothing but arrivals ever removes packets from a pipe)."""
        pipe = self.pipe
        while True:
            pkt = pipe.pop_packet()
            d = pkt.deliver
            if d is not None:
                d(pkt)
            else:
                host = self.peer_host
                host.receive_unbound(pkt)
            if not self._head_due(self._eng.now):
                return

    # Every index here is in range (dst is checked against the tables' length first).
    @cython.wraparound(False)
    def _deliver_switch(self) -> None:
        """Arrival at a lossy switch: ECMP forwarding and the next port's :meth:`send`
        inlined (the hot path of the simulator); hooked kinds go to their hook."""
        # Long: one function so that the compiled path keeps every local in C across the
        # whole burst of arrivals (a call per step would cost the simulator its hot loop).
        sw = self.peer_switch
        mask = sw.hook_mask  # bit k: kind k has a hook (sw.hooked[k])
        pipe = self.pipe
        now = self._eng.now
        fib1 = sw.fib1
        while True:
            # The head is due: nothing but arrivals removes packets from a lossy pipe.
            pkt = pipe.pop_packet()
            kind = pkt.kind
            if mask and 0 <= kind < _NUM_KINDS and mask >> kind & 1:
                sw._run_hook(pkt, self.peer_index, sw.hooked[kind])
                if not self._head_due(now):
                    return
                continue
            dst = pkt.dst
            if 0 <= dst < sw.host_count:
                out = fib1[dst]
                if out is None:
                    ports = sw.fib[dst]
                    n = len(ports)
                    if n:
                        out = ports[ecmp_index(pkt.flow_hash, sw.salt, n)]
                    else:
                        self.tally.drop(None, pkt, DROP_NO_ROUTE, node=sw)
            else:
                out = None
                sw.drop_unroutable(pkt)
            if out is not None:
                # --- Port.send(out, pkt), inlined but for its tail (_transmit) ---
                size = pkt.size_bytes
                tx = size * out.ps_per_byte
                bu = out.busy_until
                if bu < now:
                    bu = now
                backlog = bu - now
                if backlog + tx > out.limit_ps:
                    self.tally.drop(out, pkt, DROP_QUEUE_FULL)
                else:
                    out._transmit(pkt, now, bu, tx)
            if not self._head_due(now):
                return

    # ------------------------------------------------------------------ PFC (LosslessPort)
    # The lossless arrival handlers are declared here (so that :meth:`fire` reaches them
    # through the C method table when compiled) and implemented by LosslessPort.
    def _deliver_host_checked(self) -> None:  # pragma: no cover
        raise RuntimeError(f"{self.name}: lossless arrival on a port of a lossy network")

    def _deliver_switch_lossless(self) -> None:  # pragma: no cover
        raise RuntimeError(f"{self.name}: lossless arrival on a port of a lossy network")

    def pause(self) -> None:  # pragma: no cover - only LosslessPort is ever paused
        raise RuntimeError(f"{self.name}: PAUSE on a port of a lossy network")

    def resume(self) -> None:  # pragma: no cover
        raise RuntimeError(f"{self.name}: RESUME on a port of a lossy network")


class HostPort(Port):
    """A host NIC in a lossy network: never drops (the transports' windows bound the
    queue), so :meth:`send` skips the limit check. It marks ECN-capable packets above
    ``k_ps`` like a switch port (a CE-marking host qdisc, ``NetworkConfig.host_ecn``)."""

    __slots__ = ()

    def send(self, pkt: SimPacket, in_idx: int = -1) -> bool:
        now = self._eng.now
        bu = self.busy_until
        if bu < now:
            bu = now
        self._transmit(pkt, now, bu, pkt.size_bytes * self.ps_per_byte)
        return True


def unloaded_ps(path: list, wire_bytes: int, segment_bytes: int, ack_bytes: int) -> int:
    """Time to move ``wire_bytes`` along ``path`` (ports, in order) and get the ACK of its
    last segment back on an idle network: the bytes serialised at the bottleneck (the first
    port of the lowest rate), one ``segment_bytes`` segment at every other port (store and
    forward), each link's delay both ways and one ``ack_bytes`` ACK serialised at every hop
    back (``Dctcp.ideal_fct``; a function of the ports' C fields when compiled)."""
    b = 0
    for i in range(1, len(path)):
        if path[i].rate_bps < path[b].rate_bps:
            b = i
    t = wire_bytes * path[b].ps_per_byte
    i = 0
    for p in path:
        t += 2 * p.delay_ps + ack_bytes * p.reverse.ps_per_byte
        if i != b:
            t += segment_bytes * p.ps_per_byte
        i += 1
    return t
