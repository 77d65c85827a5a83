"""The per-hop data path of the simulated network: ports (queue, ECN, drop-tail, PFC),
hosts and switches (ECMP, packet hooks, shared buffer and PAUSE).

The model is described in :mod:`panama.sim.network` and docs/simulator-network.md;
:class:`panama.sim.network.Network` builds these objects from a topology. This module is
the simulator's hot path: compiled with ``dataplane.pxd`` when the fast path is built,
interpreted otherwise (same source, same results).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from panama.core.errors import FieldError
from panama.core.packet import CE
from panama.sim.engine import Event
from panama.sim.packet import (
    DROP_LOSSLESS_OVERFLOW,
    DROP_NO_HANDLER,
    DROP_NO_ROUTE,
    DROP_QUEUE_FULL,
    NUM_KINDS,
    SimPacket,
)
from panama.sim.routing import ecmp_index

if TYPE_CHECKING:
    from panama.sim.network import Network

__all__ = ["Port", "HostPort", "LosslessPort", "Node", "Host", "Switch", "PacketHook"]

_BITS_PS = 8_000_000_000_000  # bits * ps per second (8 * PS_PER_S)
_NEVER = 1 << 62
_CE = CE  # a C constant when compiled

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
    arrival (:meth:`fire` runs the arrival handler chosen for the peer); ``_release_ev`` is the event of its
    buffer releases (lossless switches).

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
        "rel_armed",
        "_eng",
        "_trace",
        "_mode",
        "_release_ev",
        "net",
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
        eng = net.engine
        self._eng = eng
        self._trace = eng.trace
        self.owner = owner
        self.peer = peer
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
        self.pipe: deque[SimPacket] = deque()  # in flight, in arrival order (``arrive_ps``)
        self.armed = False
        self.paused = False
        self.paused_since = 0
        self.waiting: deque[tuple[SimPacket, int]] = deque()
        self.waiting_ps = 0
        self.limit_ps = _NEVER
        self.k_ps = _NEVER
        self.release: deque[tuple[int, int, int]] | None = None
        self.rel_armed = False
        self._mode = _GENERIC
        self._fire_cb = self._deliver
        self._release_ev = _Release(self)
        self.tx_packets = 0
        self.tx_bytes = 0
        self.ecn_marks = 0
        self.drops = 0
        self.pauses = 0
        self.paused_ps = 0

    def __repr__(self) -> str:
        return f"Port({self.name}, {self.rate_bps / 1e9:g} Gbps, {self.delay_ps} ps)"

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
        """The pipe's head is due at the peer: run the arrival handler of :meth:`_select_delivery`."""
        mode = self._mode
        if mode == _SWITCH:
            self._deliver_switch()
        elif mode == _HOST:
            self._deliver_host()
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
            self.net._drop(self, pkt, DROP_QUEUE_FULL)
            return False
        if backlog > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        end = bu + tx
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        arrive = end + self.delay_ps
        pkt.arrive_ps = arrive
        self.pipe.append(pkt)
        if not self.armed:
            self.armed = True
            self._eng.schedule(arrive, self)
        if self._trace is not None:
            self._trace(
                (
                    now,
                    "tx",
                    self.owner.name,
                    self.peer.name,
                    pkt.kind,
                    pkt.src,
                    pkt.dst,
                    pkt.seq,
                    size,
                    backlog // self.ps_per_byte,
                )
            )
        return True

    def _deliver(self) -> None:
        """Generic arrival: hand due packets to ``peer.receive``."""
        pipe = self.pipe
        now = self._eng.now
        recv = self.peer.receive
        idx = self.peer_index
        while pipe:
            head = pipe[0]
            if head.arrive_ps > now:
                self._eng.schedule(head.arrive_ps, self)
                return
            pipe.popleft()
            recv(head, idx)
        self.armed = False

    def _deliver_host(self) -> None:
        """Arrival at a host: ``pkt.deliver(pkt)`` or the host's handler.

        Only used in lossy networks, where the pipe's head is always due when the event
        fires (nothing but arrivals ever removes packets from a pipe)."""
        pipe = self.pipe
        popleft = pipe.popleft
        while True:
            pkt = popleft()
            d = pkt.deliver
            if d is not None:
                d(pkt)
            else:
                self.peer.receive_unbound(pkt)
            if not pipe:
                self.armed = False
                return
            t = pipe[0].arrive_ps
            if t > self._eng.now:
                self._eng.schedule(t, self)
                return

    def _deliver_switch(self) -> None:
        """Arrival at a lossy switch: ECMP forwarding and the next port's :meth:`send`
        inlined (the hot path of the simulator); hooked kinds go to their hook."""
        sw = self.peer
        hooks = sw.hooked
        pipe = self.pipe
        popleft = pipe.popleft
        now = self._eng.now
        fib1 = sw.fib1
        while True:
            # The head is due: nothing but arrivals removes packets from a lossy pipe.
            pkt = popleft()
            if hooks is not None and hooks[pkt.kind] is not None:
                sw._run_hook(pkt, self.peer_index, hooks[pkt.kind])
                if not pipe:
                    self.armed = False
                    return
                t = pipe[0].arrive_ps
                if t > now:
                    self._eng.schedule(t, self)
                    return
                continue
            dst = pkt.dst
            out = fib1[dst]  # dst == -1 hits the trailing "no route" entries
            if out is None:
                ports = sw.fib[dst]
                n = len(ports)
                if n:
                    out = ports[ecmp_index(pkt.flow_hash, sw.salt, n)]
                else:
                    self.net._drop(None, pkt, DROP_NO_ROUTE, node=sw)
            if out is not None:
                # --- Port.send(out, pkt), inlined ---
                size = pkt.size_bytes
                tx = size * out.ps_per_byte
                bu = out.busy_until
                if bu < now:
                    bu = now
                backlog = bu - now
                if backlog + tx > out.limit_ps:
                    self.net._drop(out, pkt, DROP_QUEUE_FULL)
                else:
                    if backlog > out.k_ps and 0 < pkt.ecn < _CE:
                        pkt.ecn = _CE
                        out.ecn_marks += 1
                    end = bu + tx
                    out.busy_until = end
                    out.tx_packets += 1
                    out.tx_bytes += size
                    end += out.delay_ps
                    pkt.arrive_ps = end
                    out.pipe.append(pkt)
                    if not out.armed:
                        out.armed = True
                        self._eng.schedule(end, out)
                    if out._trace is not None:
                        out._trace(
                            (
                                now,
                                "tx",
                                sw.name,
                                out.peer.name,
                                pkt.kind,
                                pkt.src,
                                pkt.dst,
                                pkt.seq,
                                size,
                                backlog // out.ps_per_byte,
                            )
                        )
            if not pipe:
                self.armed = False
                return
            t = pipe[0].arrive_ps
            if t > now:
                self._eng.schedule(t, self)
                return

    # ------------------------------------------------------------------ PFC (LosslessPort)
    def pause(self) -> None:  # pragma: no cover - only LosslessPort is ever paused
        raise RuntimeError(f"{self.name}: PAUSE on a port of a lossy network")

    def resume(self) -> None:  # pragma: no cover
        raise RuntimeError(f"{self.name}: RESUME on a port of a lossy network")

    def _release(self) -> None:  # pragma: no cover
        raise RuntimeError(f"{self.name}: buffer release on a port of a lossy network")


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
        elif bu - now > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        size = pkt.size_bytes
        end = bu + size * self.ps_per_byte
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        end += self.delay_ps
        pkt.arrive_ps = end
        self.pipe.append(pkt)
        if not self.armed:
            self.armed = True
            self._eng.schedule(end, self)
        if self._trace is not None:
            self._trace(
                (
                    now,
                    "tx",
                    self.owner.name,
                    self.peer.name,
                    pkt.kind,
                    pkt.src,
                    pkt.dst,
                    pkt.seq,
                    size,
                    (bu - now) // self.ps_per_byte,
                )
            )
        return True


class LosslessPort(Port):
    """A port of a lossless (PFC) network: can be paused by its peer, and on switches
    frees shared-buffer space (per ingress) when a packet's transmission ends."""

    __slots__ = ()

    def send(self, pkt: SimPacket, in_idx: int = -1) -> bool:
        now = self._eng.now
        size = pkt.size_bytes
        tx = size * self.ps_per_byte
        if self.paused:
            return self._send_paused(pkt, in_idx, tx)
        bu = self.busy_until
        if bu < now:
            bu = now
        backlog = bu - now
        if backlog > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        self.tx_packets += 1
        self.tx_bytes += size
        # --- _commit, inlined ---
        end = bu + tx
        self.busy_until = end
        arrive = end + self.delay_ps
        pkt.arrive_ps = arrive
        self.pipe.append(pkt)
        rel = self.release
        if rel is not None:
            rel.append((end, size, in_idx))
            if not self.rel_armed:
                self.rel_armed = True
                self._eng.schedule(end, self._release_ev)
        if not self.armed:
            self.armed = True
            self._eng.schedule(arrive, self)
        if self._trace is not None:
            self._trace(
                (
                    now,
                    "tx",
                    self.owner.name,
                    self.peer.name,
                    pkt.kind,
                    pkt.src,
                    pkt.dst,
                    pkt.seq,
                    size,
                    backlog // self.ps_per_byte,
                )
            )
        return True

    def _deliver_host_checked(self) -> None:
        """Arrival at a host in a lossless network (a pause may have emptied the pipe
        under the pending event, so the head's time is checked)."""
        pipe = self.pipe
        now = self._eng.now
        while pipe:
            pkt = pipe[0]
            if pkt.arrive_ps > now:
                self._eng.schedule(pkt.arrive_ps, self)
                return
            pipe.popleft()
            d = pkt.deliver
            if d is not None:
                d(pkt)
            else:
                self.peer.receive_unbound(pkt)
        self.armed = False

    def _deliver_switch_lossless(self) -> None:
        """Arrival at a lossless switch: ECMP, buffer admission and PFC check inlined."""
        sw = self.peer
        hooks = sw.hooked
        pipe = self.pipe
        now = self._eng.now
        idx = self.peer_index
        fib1 = sw.fib1
        ingress = sw.ingress_bytes
        while pipe:
            pkt = pipe[0]
            if pkt.arrive_ps > now:
                self._eng.schedule(pkt.arrive_ps, self)
                return
            pipe.popleft()
            if hooks is not None and hooks[pkt.kind] is not None:
                sw._run_hook(pkt, idx, hooks[pkt.kind])
                continue
            dst = pkt.dst
            out = fib1[dst]
            if out is None:
                ports = sw.fib[dst]
                n = len(ports)
                if not n:
                    self.net._drop(None, pkt, DROP_NO_ROUTE, node=sw)
                    continue
                out = ports[ecmp_index(pkt.flow_hash, sw.salt, n)]
            # --- Switch._admit, inlined ---
            size = pkt.size_bytes
            used = sw.used_bytes + size
            if used > sw.buffer_bytes:
                self.net._drop(out, pkt, DROP_LOSSLESS_OVERFLOW)
                continue
            sw.used_bytes = used
            if used > sw.peak_used_bytes:
                sw.peak_used_bytes = used
            ib = ingress[idx] + size
            ingress[idx] = ib
            if not sw.pause_sent[idx]:
                thr = sw.pfc_static
                if thr is None:
                    free = sw.pool_bytes - used
                    thr = int(sw.pfc_alpha * free) if free > 0 else 0
                if ib > thr:
                    sw._send_pfc(idx, True)
            out.send(pkt, idx)
        self.armed = False

    def _commit(self, pkt: SimPacket, in_idx: int, tx: int) -> None:
        """Fix the transmission slot of a packet (now, or when a pause ends)."""
        now = self._eng.now
        bu = self.busy_until
        if bu < now:
            bu = now
        end = bu + tx
        self.busy_until = end
        arrive = end + self.delay_ps
        pkt.arrive_ps = arrive
        self.pipe.append(pkt)
        rel = self.release
        if rel is not None:
            rel.append((end, pkt.size_bytes, in_idx))
            if not self.rel_armed:
                self.rel_armed = True
                self._eng.schedule(end, self._release_ev)
        if not self.armed:
            self.armed = True
            self._eng.schedule(arrive, self)

    def _send_paused(self, pkt: SimPacket, in_idx: int, tx: int) -> bool:
        now = self._eng.now
        backlog = self.backlog_ps()
        if backlog > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        self.tx_packets += 1
        self.tx_bytes += pkt.size_bytes
        self.waiting.append((pkt, in_idx))
        self.waiting_ps += tx
        if self._trace is not None:
            self._trace(
                (
                    now,
                    "hold",
                    self.owner.name,
                    self.peer.name,
                    pkt.kind,
                    pkt.src,
                    pkt.dst,
                    pkt.seq,
                    pkt.size_bytes,
                    backlog // self.ps_per_byte,
                )
            )
        return True

    def pause(self) -> None:
        """A PAUSE frame arrived from the peer: finish the packet being serialised, hold
        every packet whose transmission has not started."""
        now = self._eng.now
        self.pauses += 1
        if self.paused:
            return
        self.paused = True
        self.paused_since = now
        pipe = self.pipe
        rel = self.release
        delay = self.delay_ps
        ppb = self.ps_per_byte
        held: list[tuple[SimPacket, int]] = []
        while pipe:
            pkt = pipe[-1]
            arrive = pkt.arrive_ps
            tx = pkt.size_bytes * ppb
            if arrive - delay - tx < now:
                break
            pipe.pop()
            in_idx = rel.pop()[2] if rel is not None else -1
            held.append((pkt, in_idx))
            self.waiting_ps += tx
        if held:
            held.reverse()
            held.extend(self.waiting)
            self.waiting = deque(held)
        self.busy_until = pipe[-1].arrive_ps - delay if pipe else min(self.busy_until, now)
        if self._trace is not None:
            self._trace((now, "pause", self.owner.name, self.peer.name, -1, -1, -1, -1, 0, self.queue_bytes()))

    def resume(self) -> None:
        """A RESUME frame arrived: transmit the held packets back to back."""
        if not self.paused:
            return
        now = self._eng.now
        self.paused = False
        self.paused_ps += now - self.paused_since
        waiting = self.waiting
        self.waiting = deque()
        self.waiting_ps = 0
        ppb = self.ps_per_byte
        for pkt, in_idx in waiting:
            self._commit(pkt, in_idx, pkt.size_bytes * ppb)
        if self._trace is not None:
            self._trace((now, "resume", self.owner.name, self.peer.name, -1, -1, -1, -1, 0, self.queue_bytes()))

    def _release(self) -> None:
        """Lossless switches: free buffer of packets whose transmission ended."""
        rel = self.release
        now = self._eng.now
        sw = self.owner
        ingress = sw.ingress_bytes
        freed = 0
        while rel:
            head = rel[0]
            if head[0] > now:
                self._eng.schedule(head[0], self._release_ev)
                break
            rel.popleft()
            ingress[head[2]] -= head[1]
            freed += head[1]
        else:
            self.rel_armed = False
        if freed:
            sw.used_bytes -= freed
            sw._check_resume()


class _Release(Event):
    """The buffer-release event of a lossless switch port (one pending at a time)."""

    __slots__ = ("port",)

    def __init__(self, port: Port):
        self.t = 0
        self.seq = 0
        self.port = port
        self._fire_cb = port._release

    def fire(self) -> None:
        self.port._release()


class Node:
    """Common part of hosts and switches: name, ports, forwarding table."""

    __slots__ = ("net", "_eng", "name", "kind", "ports", "port_by_name", "fib", "fib1", "salt")

    def __init__(self, net: Network, name: str, kind: str):
        self.net = net
        self._eng = net.engine
        self.name = name
        self.kind = kind
        self.ports: list[Port] = []
        self.port_by_name: dict[str, Port] = {}
        self.fib: list[tuple[Port, ...]] = []
        self.fib1: list[Port | None] = []  # the port where fib[dst] has exactly one
        self.salt = 0

    def receive(self, pkt: SimPacket, in_idx: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def port_to(self, neighbour: str) -> Port:
        """The output port towards a neighbour (KeyError naming both if not adjacent)."""
        try:
            return self.port_by_name[neighbour]
        except KeyError:
            raise KeyError(f"{self.name} has no link to {neighbour!r}") from None

    def route(self, pkt: SimPacket) -> Port | None:
        """The ECMP choice of output port for a routed packet (None: no route)."""
        dst = pkt.dst
        if dst < 0 or dst >= len(self.fib) - 1:
            return None
        ports = self.fib[dst]
        n = len(ports)
        if n == 1:
            return ports[0]
        if n == 0:
            return None
        return ports[ecmp_index(pkt.flow_hash, self.salt, n)]


class Host(Node):
    """An end host. ``send(pkt)`` puts a packet on its NIC; received packets go to
    ``pkt.deliver`` or to the attached ``handler(pkt)``."""

    __slots__ = ("index", "handler", "uplink")

    def __init__(self, net: Network, name: str, index: int):
        super().__init__(net, name, "host")
        self.index = index
        self.handler: Callable[[SimPacket], Any] | None = None
        self.uplink: Port | None = None

    def send(self, pkt: SimPacket) -> bool:
        """Transmit a routed packet (``pkt.dst`` >= 0) or, for single-homed hosts, any
        packet to the access switch."""
        up = self.uplink
        if up is not None:
            return up.send(pkt, -1)
        port = self.route(pkt)
        if port is None:
            self.net._drop(None, pkt, DROP_NO_ROUTE)
            return False
        return port.send(pkt, -1)

    def send_to(self, neighbour: str, pkt: SimPacket) -> bool:
        """Transmit towards a named neighbour (the ToR), whatever ``pkt.dst`` says."""
        return self.port_to(neighbour).send(pkt, -1)

    def receive(self, pkt: SimPacket, in_idx: int) -> None:
        d = pkt.deliver
        if d is not None:
            d(pkt)
            return
        self.receive_unbound(pkt)

    def receive_unbound(self, pkt: SimPacket) -> None:
        """Deliver a packet without a ``deliver`` callback to the attached handler."""
        h = self.handler
        if h is None:
            self.net._drop(None, pkt, DROP_NO_HANDLER, node=self)
            return
        h(pkt)


PacketHook = Callable[[SimPacket, str], "Iterable[tuple[str, SimPacket]] | None"]


class Switch(Node):
    """A switch: routes unicast packets by ECMP, hands hooked kinds to their hook.

    Lossless state: ``ingress_bytes[i]`` bytes held that arrived on port ``i`` (the last
    entry is local/hook-originated traffic, never paused), ``used_bytes`` in total,
    ``pause_sent[i]`` whether the upstream of port ``i`` is paused by us.
    """

    __slots__ = (
        "hooks",
        "hook_latency_ps",
        "lossless",
        "buffer_bytes",
        "pool_bytes",
        "ingress_bytes",
        "used_bytes",
        "pause_sent",
        "pfc_alpha",
        "pfc_static",
        "resume_offset",
        "pauses_sent",
        "_delayline",
        "_dl_armed",
        "_dl_cb",
        "hooked",
        "peak_used_bytes",
    )

    def __init__(self, net: Network, name: str, kind: str):
        super().__init__(net, name, kind)
        self.hooks: list[PacketHook | None] = [None] * NUM_KINDS
        self.hooked: list[PacketHook | None] | None = None  # ``hooks`` if any is set
        self.hook_latency_ps = 0
        self.lossless = False
        self.buffer_bytes = 0
        self.pool_bytes = 0
        self.ingress_bytes: list[int] = []
        self.used_bytes = 0
        self.pause_sent: list[bool] = []
        self.pfc_alpha = 0.125
        self.pfc_static: int | None = None
        self.resume_offset = 0
        self.pauses_sent = 0
        self.peak_used_bytes = 0
        self._delayline: deque[tuple[int, Any, int]] = deque()
        self._dl_armed = False
        self._dl_cb = self._drain_delayline

    def receive(self, pkt: SimPacket, in_idx: int) -> None:
        hook = self.hooks[pkt.kind]
        if hook is not None:
            self._run_hook(pkt, in_idx, hook)
            return
        dst = pkt.dst
        fib = self.fib
        if dst < -1 or dst >= len(fib) - 1:
            raise IndexError(f"{self.name}: packet destination {dst} is not a host index (or -1)")
        ports = fib[dst]
        n = len(ports)
        if n == 1:
            port = ports[0]
        elif n:
            port = ports[ecmp_index(pkt.flow_hash, self.salt, n)]
        else:
            self.net._drop(None, pkt, DROP_NO_ROUTE, node=self)
            return
        if self.lossless and not self._admit(pkt, in_idx, port):
            return
        port.send(pkt, in_idx)

    # ------------------------------------------------------------------ hooks
    def _run_hook(self, pkt: SimPacket, in_idx: int, hook: PacketHook) -> None:
        out = hook(pkt, self.ports[in_idx].peer.name if in_idx >= 0 else self.name)
        if out:
            if self.hook_latency_ps:
                self._delay(out, in_idx)
            else:
                self._emit(out, in_idx)

    def set_hook(self, kind: int, hook: PacketHook | None, latency_ps: int = 0) -> None:
        """Hand packets of ``kind`` arriving here to ``hook(pkt, from_node)``; forward the
        returned ``(neighbour, packet)`` pairs after ``latency_ps`` (FIFO)."""
        if not 0 <= kind < NUM_KINDS:
            raise FieldError("kind", f"must be in [0, {NUM_KINDS}), got {kind!r}")
        if latency_ps < 0:
            raise FieldError("latency_ps", f"must be >= 0, got {latency_ps!r}")
        self.hooks[kind] = hook
        self.hook_latency_ps = int(latency_ps)
        self.hooked = self.hooks if any(h is not None for h in self.hooks) else None

    def emit(self, neighbour: str, pkt: SimPacket) -> bool:
        """Send a switch-originated packet (e.g. from an accelerator timer) to a neighbour."""
        port = self.port_to(neighbour)
        local = len(self.ports)
        if self.lossless and not self._admit(pkt, local, port):
            return False
        return port.send(pkt, local)

    def _emit(self, out: Iterable[tuple[str, SimPacket]], in_idx: int) -> None:
        pbn = self.port_by_name
        if in_idx < 0:
            in_idx = len(self.ports)
        for nb, p in out:
            port = pbn.get(nb)
            if port is None:
                raise KeyError(f"hook at {self.name} forwarded to {nb!r}, which is not a neighbour")
            if self.lossless and not self._admit(p, in_idx, port):
                continue
            port.send(p, in_idx)

    def _delay(self, out: Any, in_idx: int) -> None:
        t = self._eng.now + self.hook_latency_ps
        self._delayline.append((t, list(out), in_idx))
        if not self._dl_armed:
            self._dl_armed = True
            self._eng.push(t, self._dl_cb)

    def _drain_delayline(self) -> None:
        dl = self._delayline
        now = self._eng.now
        while dl:
            t, out, in_idx = dl[0]
            if t > now:
                self._eng.push(t, self._dl_cb)
                return
            dl.popleft()
            self._emit(out, in_idx)
        self._dl_armed = False

    # ------------------------------------------------------------------ PFC
    def pfc_threshold(self) -> int:
        """Current per-ingress PAUSE threshold in bytes."""
        if self.pfc_static is not None:
            return self.pfc_static
        free = self.pool_bytes - self.used_bytes
        return int(self.pfc_alpha * free) if free > 0 else 0

    def _admit(self, pkt: SimPacket, in_idx: int, port: Port) -> bool:
        size = pkt.size_bytes
        used = self.used_bytes + size
        if used > self.buffer_bytes:
            self.net._drop(port, pkt, DROP_LOSSLESS_OVERFLOW)
            return False
        self.used_bytes = used
        if used > self.peak_used_bytes:
            self.peak_used_bytes = used
        ib = self.ingress_bytes[in_idx] + size
        self.ingress_bytes[in_idx] = ib
        if in_idx < len(self.ports) and not self.pause_sent[in_idx] and ib > self.pfc_threshold():
            self._send_pfc(in_idx, True)
        return True

    def _check_resume(self) -> None:
        ps = self.pause_sent
        if not any(ps):
            return
        thr = self.pfc_threshold()
        off = self.resume_offset
        ib = self.ingress_bytes
        for i, p in enumerate(ps):
            if p and (ib[i] + off <= thr or ib[i] == 0):
                self._send_pfc(i, False)

    def _send_pfc(self, in_idx: int, pause: bool) -> None:
        self.pause_sent[in_idx] = pause
        link = self.ports[in_idx]
        up = link.reverse
        eng = self._eng
        if pause:
            self.pauses_sent += 1
            eng.push(eng.now + link.delay_ps, up.pause)
        else:
            eng.push(eng.now + link.delay_ps, up.resume)
        trace = eng.trace
        if trace is not None:
            trace(
                (
                    eng.now,
                    "pfc_pause" if pause else "pfc_resume",
                    self.name,
                    up.owner.name,
                    -1,
                    -1,
                    -1,
                    -1,
                    0,
                    self.ingress_bytes[in_idx],
                )
            )
