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

from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heappush
from typing import Any

import networkx as nx
import numpy as np

from panama.core.packet import CE, ECT0
from panama.core.units import PS_PER_S, tx_time_ps
from panama.sim.engine import Engine
from panama.sim.routing import MASK64, group_next_hops

__all__ = [
    "SimPacket",
    "NetworkConfig",
    "Network",
    "Port",
    "HostPort",
    "LosslessPort",
    "Switch",
    "Host",
    "QueueSampler",
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

# Packet kinds (small ints: switches index a list of hooks by kind).
KIND_DATA = 0  # DCTCP data segment
KIND_ACK = 1  # DCTCP acknowledgement
KIND_PANAMA = 2  # carries a panama.core.packet.Packet in ``inner``
KIND_OTHER = 3
NUM_KINDS = 8  # kinds 4..7 are free for drivers

# Drop reasons (named constants so counters and plots group by them).
DROP_QUEUE_FULL = "queue_full"  # lossy drop-tail at an output queue
DROP_LOSSLESS_OVERFLOW = "lossless_overflow"  # shared buffer overflow despite PFC (a bug)
DROP_NO_ROUTE = "no_route"  # routed packet without a valid destination host
DROP_NO_HANDLER = "no_handler"  # host got a packet with no deliver callback and no handler
DROP_REASONS = (DROP_QUEUE_FULL, DROP_LOSSLESS_OVERFLOW, DROP_NO_ROUTE, DROP_NO_HANDLER)

_BITS_PS = 8 * PS_PER_S  # bits * ps per second: tx_ps = size_bytes * _BITS_PS / rate_bps
_GOLDEN = 0x9E3779B97F4A7C15
_NEVER = 1 << 62


@dataclass(slots=True)
class SimPacket:
    """One packet on the simulated wire.

    ``src``/``dst`` are host indices (:attr:`Network.host_index`); ``dst`` routes unicast
    packets (``-1`` for packets that only travel hop by hop through hooks and
    :meth:`Host.send_to`). ``flow_hash`` picks the ECMP path. ``ecn`` is an IP ECN
    codepoint (``panama.core.packet``); the network only ever sets it to ``CE``.
    ``deliver`` (if set) is called with the packet at the destination host. ``seq``,
    ``ack``, ``ts_ps`` and ``flags`` belong to the transport; ``inner`` carries an
    arbitrary object (a ``panama.core.packet.Packet`` for ``KIND_PANAMA``).
    """

    kind: int
    src: int
    dst: int
    size_bytes: int
    flow_hash: int = 0
    ecn: int = ECT0
    deliver: Callable[[SimPacket], Any] | None = None
    seq: int = 0
    ack: int = 0
    ts_ps: int = 0
    flags: int = 0
    inner: Any = None


@dataclass
class NetworkConfig:
    """Switch and link behaviour. Byte sizes are per output queue unless stated.

    * ``queue_limit_bytes``: drop-tail limit of each output queue in lossy mode
      (default 300 full packets). Host NIC queues are unlimited (the transport window
      bounds them).
    * ``ecn``: mark ECN-capable packets; ``ecn_k_bytes`` overrides the per-port threshold
      that is otherwise ``ecn_k_packets_at_10g x mtu_bytes x rate / 10 Gbps``.
    * ``host_ecn``: host NIC queues mark at the same threshold (a CE-marking host
      qdisc). Without it a DCTCP flow whose bottleneck is its own NIC never sees a mark
      and its window, and the NIC queue in front of every other packet of that host,
      grow without bound.
    * ``lossless``: PFC on; ``switch_buffer_bytes`` is the shared buffer per switch
      (default ``queue_limit_bytes x ports``); ``pfc_alpha`` the dynamic-threshold factor,
      or ``pfc_static_threshold_bytes`` a fixed per-ingress threshold;
      ``pfc_headroom_factor`` x rate x delay + 2 MTU of headroom per ingress;
      ``pfc_resume_offset_bytes`` hysteresis (default 2 MTU).
    """

    mtu_bytes: int = 1500
    queue_limit_bytes: int = 300 * 1500
    ecn: bool = True
    ecn_k_packets_at_10g: float = 65.0
    ecn_k_bytes: int | None = None
    host_ecn: bool = True
    lossless: bool = False
    switch_buffer_bytes: int | None = None
    pfc_alpha: float = 1.0 / 8.0
    pfc_static_threshold_bytes: int | None = None
    pfc_headroom_factor: float = 3.0
    pfc_resume_offset_bytes: int | None = None

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"{name}: {what}, got {getattr(self, name)!r}")

        check("mtu_bytes", isinstance(self.mtu_bytes, int) and 64 <= self.mtu_bytes <= 65536, "must be an int in [64, 65536]")
        check("queue_limit_bytes", self.queue_limit_bytes >= self.mtu_bytes, "must be at least one MTU")
        check("ecn_k_packets_at_10g", self.ecn_k_packets_at_10g >= 0, "must be >= 0")
        check("ecn_k_bytes", self.ecn_k_bytes is None or self.ecn_k_bytes >= 0, "must be >= 0")
        check("switch_buffer_bytes", self.switch_buffer_bytes is None or self.switch_buffer_bytes >= self.mtu_bytes, "must be at least one MTU")
        check("pfc_alpha", 0 < self.pfc_alpha <= 64, "must be in (0, 64]")
        check("pfc_static_threshold_bytes", self.pfc_static_threshold_bytes is None or self.pfc_static_threshold_bytes >= self.mtu_bytes, "must be at least one MTU")
        check("pfc_headroom_factor", self.pfc_headroom_factor >= 0, "must be >= 0")
        check("pfc_resume_offset_bytes", self.pfc_resume_offset_bytes is None or self.pfc_resume_offset_bytes >= 0, "must be >= 0")

    def ecn_k_for(self, rate_bps: float) -> int:
        """ECN marking threshold in bytes for a port of ``rate_bps``."""
        if self.ecn_k_bytes is not None:
            return self.ecn_k_bytes
        return round(self.ecn_k_packets_at_10g * self.mtu_bytes * rate_bps / 10e9)

    def headroom_for(self, rate_bps: float, delay_ps: int) -> int:
        """PFC headroom in bytes for an ingress link: factor x rate x delay + 2 MTU."""
        return int(self.pfc_headroom_factor * rate_bps * delay_ps / _BITS_PS) + 2 * self.mtu_bytes


class Port:
    """Output queue + serialiser + wire from ``owner`` to ``peer`` (one direction).

    Serialisation takes ``size_bytes x ps_per_byte`` with ``ps_per_byte =
    ceil(8e12 / rate_bps)``: exact for every rate dividing 8 Tbit/s (1, 2.5, 10, 25, 40,
    50, 100, 200, 400 Gbps); other rates are rounded down by less than one part in
    ``ps_per_byte``.

    Counters: ``tx_packets``/``tx_bytes`` (accepted for transmission: one packet hop
    each), ``ecn_marks``, ``drops``, ``pauses`` (PAUSE frames received),
    ``paused_ps`` (time spent paused, updated at resume).
    """

    __slots__ = (
        "owner", "peer", "index", "peer_index", "reverse", "name", "tier", "rate_bps", "ps_per_byte",
        "delay_ps", "busy_until", "pipe", "armed", "paused", "paused_since", "waiting",
        "waiting_ps", "limit_ps", "k_ps", "release", "rel_armed", "_eng", "_heap", "_cnt", "_trace",
        "_deliver_cb", "_release_cb", "net",
        "tx_packets", "tx_bytes", "ecn_marks", "drops", "pauses", "paused_ps",
    )

    def __init__(self, net: Network, owner: Node, peer: Node, rate_bps: float, delay_ps: int, tier: str):
        self.net = net
        eng = net.engine
        self._eng = eng
        self._heap = eng.heap
        self._cnt = eng.counter
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
        self.pipe: deque[tuple[int, SimPacket]] = deque()
        self.armed = False
        self.paused = False
        self.paused_since = 0
        self.waiting: deque[tuple[SimPacket, int]] = deque()
        self.waiting_ps = 0
        self.limit_ps = _NEVER
        self.k_ps = _NEVER
        self.release: deque[tuple[int, int, int]] | None = None
        self.rel_armed = False
        self._deliver_cb = self._deliver
        self._release_cb = self._release
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
                self._deliver_cb = self._deliver_host_checked
            elif isinstance(peer, Switch):
                self._deliver_cb = self._deliver_switch_lossless
            else:
                self._deliver_cb = self._deliver
        elif isinstance(peer, Host):
            self._deliver_cb = self._deliver_host
        elif isinstance(peer, Switch):
            self._deliver_cb = self._deliver_switch
        else:
            self._deliver_cb = self._deliver

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
        if backlog > self.k_ps and 0 < pkt.ecn < CE:
            pkt.ecn = CE
            self.ecn_marks += 1
        end = bu + tx
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        arrive = end + self.delay_ps
        self.pipe.append((arrive, pkt))
        if not self.armed:
            self.armed = True
            heappush(self._heap, (arrive, next(self._cnt), self._deliver_cb))
        if self._trace is not None:
            self._trace((now, "tx", self.owner.name, self.peer.name, pkt.kind, pkt.src, pkt.dst, pkt.seq, size, backlog // self.ps_per_byte))
        return True

    def _deliver(self) -> None:
        """Generic arrival: hand due packets to ``peer.receive``."""
        pipe = self.pipe
        now = self._eng.now
        recv = self.peer.receive
        idx = self.peer_index
        while pipe:
            head = pipe[0]
            if head[0] > now:
                heappush(self._heap, (head[0], next(self._cnt), self._deliver_cb))
                return
            pipe.popleft()
            recv(head[1], idx)
        self.armed = False

    def _deliver_host(self) -> None:
        """Arrival at a host: ``pkt.deliver(pkt)`` or the host's handler.

        Only used in lossy networks, where the pipe's head is always due when the event
        fires (nothing but arrivals ever removes packets from a pipe)."""
        pipe = self.pipe
        popleft = pipe.popleft
        while True:
            pkt = popleft()[1]
            d = pkt.deliver
            if d is not None:
                d(pkt)
            else:
                self.peer.receive_unbound(pkt)
            if not pipe:
                self.armed = False
                return
            t = pipe[0][0]
            if t > self._eng.now:
                heappush(self._heap, (t, next(self._cnt), self._deliver_cb))
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
            pkt = popleft()[1]
            if hooks is not None and hooks[pkt.kind] is not None:
                sw._run_hook(pkt, self.peer_index, hooks[pkt.kind])
                if not pipe:
                    self.armed = False
                    return
                t = pipe[0][0]
                if t > now:
                    heappush(self._heap, (t, next(self._cnt), self._deliver_cb))
                    return
                continue
            dst = pkt.dst
            out = fib1[dst]  # dst == -1 hits the trailing "no route" entries
            if out is None:
                ports = sw.fib[dst]
                n = len(ports)
                if n:
                    out = ports[((((pkt.flow_hash ^ sw.salt) * _GOLDEN) & MASK64) >> 32) % n]
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
                    if backlog > out.k_ps and 0 < pkt.ecn < CE:
                        pkt.ecn = CE
                        out.ecn_marks += 1
                    end = bu + tx
                    out.busy_until = end
                    out.tx_packets += 1
                    out.tx_bytes += size
                    end += out.delay_ps
                    out.pipe.append((end, pkt))
                    if not out.armed:
                        out.armed = True
                        heappush(self._heap, (end, next(self._cnt), out._deliver_cb))
                    if out._trace is not None:
                        out._trace((now, "tx", sw.name, out.peer.name, pkt.kind, pkt.src, pkt.dst, pkt.seq, size, backlog // out.ps_per_byte))
            if not pipe:
                self.armed = False
                return
            t = pipe[0][0]
            if t > now:
                heappush(self._heap, (t, next(self._cnt), self._deliver_cb))
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
        elif bu - now > self.k_ps and 0 < pkt.ecn < CE:
            pkt.ecn = CE
            self.ecn_marks += 1
        size = pkt.size_bytes
        end = bu + size * self.ps_per_byte
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        end += self.delay_ps
        self.pipe.append((end, pkt))
        if not self.armed:
            self.armed = True
            heappush(self._heap, (end, next(self._cnt), self._deliver_cb))
        if self._trace is not None:
            self._trace((now, "tx", self.owner.name, self.peer.name, pkt.kind, pkt.src, pkt.dst, pkt.seq, size, (bu - now) // self.ps_per_byte))
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
        if backlog > self.k_ps and 0 < pkt.ecn < CE:
            pkt.ecn = CE
            self.ecn_marks += 1
        self.tx_packets += 1
        self.tx_bytes += size
        # --- _commit, inlined ---
        end = bu + tx
        self.busy_until = end
        arrive = end + self.delay_ps
        self.pipe.append((arrive, pkt))
        rel = self.release
        if rel is not None:
            rel.append((end, size, in_idx))
            if not self.rel_armed:
                self.rel_armed = True
                heappush(self._heap, (end, next(self._cnt), self._release_cb))
        if not self.armed:
            self.armed = True
            heappush(self._heap, (arrive, next(self._cnt), self._deliver_cb))
        if self._trace is not None:
            self._trace((now, "tx", self.owner.name, self.peer.name, pkt.kind, pkt.src, pkt.dst, pkt.seq, size, backlog // self.ps_per_byte))
        return True

    def _deliver_host_checked(self) -> None:
        """Arrival at a host in a lossless network (a pause may have emptied the pipe
        under the pending event, so the head's time is checked)."""
        pipe = self.pipe
        now = self._eng.now
        while pipe:
            head = pipe[0]
            if head[0] > now:
                heappush(self._heap, (head[0], next(self._cnt), self._deliver_cb))
                return
            pipe.popleft()
            pkt = head[1]
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
            head = pipe[0]
            if head[0] > now:
                heappush(self._heap, (head[0], next(self._cnt), self._deliver_cb))
                return
            pipe.popleft()
            pkt = head[1]
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
                out = ports[((((pkt.flow_hash ^ sw.salt) * _GOLDEN) & MASK64) >> 32) % n]
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
        self.pipe.append((arrive, pkt))
        rel = self.release
        if rel is not None:
            rel.append((end, pkt.size_bytes, in_idx))
            if not self.rel_armed:
                self.rel_armed = True
                heappush(self._heap, (end, next(self._cnt), self._release_cb))
        if not self.armed:
            self.armed = True
            heappush(self._heap, (arrive, next(self._cnt), self._deliver_cb))

    def _send_paused(self, pkt: SimPacket, in_idx: int, tx: int) -> bool:
        now = self._eng.now
        backlog = self.backlog_ps()
        if backlog > self.k_ps and 0 < pkt.ecn < CE:
            pkt.ecn = CE
            self.ecn_marks += 1
        self.tx_packets += 1
        self.tx_bytes += pkt.size_bytes
        self.waiting.append((pkt, in_idx))
        self.waiting_ps += tx
        if self._trace is not None:
            self._trace((now, "hold", self.owner.name, self.peer.name, pkt.kind, pkt.src, pkt.dst, pkt.seq, pkt.size_bytes, backlog // self.ps_per_byte))
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
            arrive, pkt = pipe[-1]
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
        self.busy_until = pipe[-1][0] - delay if pipe else min(self.busy_until, now)
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
                heappush(self._heap, (head[0], next(self._cnt), self._release_cb))
                break
            rel.popleft()
            ingress[head[2]] -= head[1]
            freed += head[1]
        else:
            self.rel_armed = False
        if freed:
            sw.used_bytes -= freed
            sw._check_resume()


class Node:
    """Common part of hosts and switches: name, ports, forwarding table."""

    __slots__ = ("net", "name", "kind", "ports", "port_by_name", "fib", "fib1", "salt")

    def __init__(self, net: Network, name: str, kind: str):
        self.net = net
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
        return ports[((((pkt.flow_hash ^ self.salt) * _GOLDEN) & MASK64) >> 32) % n]


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
        "hooks", "hook_latency_ps", "lossless", "buffer_bytes", "pool_bytes", "ingress_bytes",
        "used_bytes", "pause_sent", "pfc_alpha", "pfc_static", "resume_offset", "pauses_sent",
        "_delayline", "_dl_armed", "_dl_cb", "hooked", "peak_used_bytes",
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
            port = ports[((((pkt.flow_hash ^ self.salt) * _GOLDEN) & MASK64) >> 32) % n]
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
            raise ValueError(f"kind: must be in [0, {NUM_KINDS}), got {kind!r}")
        if latency_ps < 0:
            raise ValueError(f"latency_ps: must be >= 0, got {latency_ps!r}")
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
        t = self.net.engine.now + self.hook_latency_ps
        self._delayline.append((t, list(out), in_idx))
        if not self._dl_armed:
            self._dl_armed = True
            self.net.engine.push(t, self._dl_cb)

    def _drain_delayline(self) -> None:
        dl = self._delayline
        now = self.net.engine.now
        while dl:
            t, out, in_idx = dl[0]
            if t > now:
                self.net.engine.push(t, self._dl_cb)
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
        eng = self.net.engine
        if pause:
            self.pauses_sent += 1
            eng.push(eng.now + link.delay_ps, up.pause)
        else:
            eng.push(eng.now + link.delay_ps, up.resume)
        trace = eng.trace
        if trace is not None:
            trace((eng.now, "pfc_pause" if pause else "pfc_resume", self.name, up.owner.name, -1, -1, -1, -1, 0, self.ingress_bytes[in_idx]))


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
        self.ports: list[Port] = []
        self.drops: Counter[str] = Counter()
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
        # Queue behaviour.
        # Host NIC queues never drop (the senders' windows bound them); they mark only
        # with ``host_ecn``.
        for p in self.ports:
            on_switch = isinstance(p.owner, Switch)
            if cfg.ecn and (on_switch or cfg.host_ecn):
                p.k_ps = p.tx_time(cfg.ecn_k_for(p.rate_bps))
            if on_switch and not cfg.lossless:
                p.limit_ps = p.tx_time(cfg.queue_limit_bytes)

        for h in self.hosts:
            if len(h.ports) == 1:
                h.uplink = h.ports[0]
        # Routing tables and ECMP salts.
        salts = rng.integers(0, 2**63 - 1, size=len(self.switches) + len(self.hosts), dtype=np.int64)
        for node, salt in zip(self.switches + self.hosts, salts.tolist(), strict=True):
            node.salt = int(salt)
        attach = {h.name: h.ports[0].peer.name for h in self.hosts if len(h.ports) == 1}
        host_group, roots, table = group_next_hops(graph, host_names, attach)
        for node in self.nodes.values():
            pbn = node.port_by_name
            cache: dict[tuple, tuple[Port, ...]] = {}
            per_group = []
            for hops in table[node.name]:
                t = cache.get(hops)
                if t is None:
                    t = cache[hops] = tuple(pbn[x] for x in hops)
                per_group.append(t)
            # One trailing "no route" entry, so that dst == -1 (hop-by-hop packets at a
            # switch without a hook) finds no port without a bounds check.
            node.fib = [per_group[g] for g in host_group] + [()]
        for i, (h, g) in enumerate(zip(self.hosts, host_group)):
            root = self.nodes[roots[g]]
            if root is not h:
                root.fib[i] = (root.port_by_name[h.name],)
            h.fib[i] = ()
        for node in self.nodes.values():
            node.fib1 = [t[0] if len(t) == 1 else None for t in node.fib]
        # Lossless: shared buffer, headroom, release queues.
        if cfg.lossless:
            for sw in self.switches:
                sw.lossless = True
                n = len(sw.ports)
                sw.buffer_bytes = cfg.switch_buffer_bytes or cfg.queue_limit_bytes * max(n, 1)
                headroom = sum(cfg.headroom_for(p.rate_bps, p.delay_ps) for p in sw.ports)
                sw.pool_bytes = sw.buffer_bytes - headroom
                if sw.pool_bytes < cfg.mtu_bytes * n:
                    raise ValueError(
                        f"switch_buffer_bytes: {sw.buffer_bytes} B at {sw.name} leaves "
                        f"{sw.pool_bytes} B after {headroom} B of PFC headroom; need at least one MTU per port"
                    )
                static = cfg.pfc_static_threshold_bytes
                if static is not None and static * n + headroom > sw.buffer_bytes:
                    raise ValueError(
                        f"pfc_static_threshold_bytes: {static} B x {n} ports + {headroom} B of headroom "
                        f"exceeds the {sw.buffer_bytes} B buffer of {sw.name}; lossless operation needs "
                        f"at most {max(0, (sw.buffer_bytes - headroom) // n)} B"
                    )
                sw.ingress_bytes = [0] * (n + 1)
                sw.pause_sent = [False] * n
                sw.pfc_alpha = cfg.pfc_alpha
                sw.pfc_static = cfg.pfc_static_threshold_bytes
                sw.resume_offset = cfg.pfc_resume_offset_bytes if cfg.pfc_resume_offset_bytes is not None else 2 * cfg.mtu_bytes
                for p in sw.ports:
                    p.release = deque()
        for p in self.ports:
            p._select_delivery()

    # ------------------------------------------------------------------ access
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
        """Deliver packets arriving at ``host`` without a ``deliver`` callback to ``handler``."""
        self.host(host).handler = handler

    def set_packet_hook(self, switch: str, hook: PacketHook | None, *, kinds: Sequence[int] = (KIND_PANAMA,), latency_ps: int = 0) -> None:
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
    def _drop(self, port: Port | None, pkt: SimPacket, reason: str, node: Node | None = None) -> None:
        self.drops[reason] += 1
        if port is not None:
            port.drops += 1
        trace = self.engine.trace
        if trace is not None:
            where = port.owner.name if port is not None else (node.name if node is not None else "?")
            peer = port.peer.name if port is not None else ""
            trace((self.engine.now, "drop", where, peer, pkt.kind, pkt.src, pkt.dst, pkt.seq, pkt.size_bytes, reason))

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
            "drops": {r: self.drops.get(r, 0) for r in DROP_REASONS} | {r: c for r, c in self.drops.items() if r not in DROP_REASONS},
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

    def sample_queues(self, interval_ps: int, ports: Iterable[Port] | None = None, *, start_ps: int | None = None) -> QueueSampler:
        """Sample the occupancy (bytes) of ``ports`` (default: every switch output port)
        every ``interval_ps``; see :class:`QueueSampler`."""
        if ports is None:
            ports = [p for p in self.ports if isinstance(p.owner, Switch)]
        return QueueSampler(self.engine, list(ports), interval_ps, start_ps=start_ps)


class QueueSampler:
    """Periodic occupancy samples of a set of ports (one pending event).

    ``times_ps`` and ``samples[i]`` (bytes, for ``ports[i]``) grow together. Sampling
    stops by itself when it is the only pending event, or after :meth:`stop`.
    """

    def __init__(self, engine: Engine, ports: list[Port], interval_ps: int, *, start_ps: int | None = None):
        if interval_ps <= 0:
            raise ValueError(f"interval_ps: must be > 0, got {interval_ps!r}")
        self.engine = engine
        self.ports = ports
        self.interval_ps = int(interval_ps)
        self.times_ps: list[int] = []
        self.samples: list[list[int]] = [[] for _ in ports]
        self._stopped = False
        self._cb = self._sample
        engine.at(engine.now if start_ps is None else start_ps, self._cb)

    def stop(self) -> None:
        self._stopped = True

    def _sample(self) -> None:
        if self._stopped:
            return
        eng = self.engine
        now = eng.now
        self.times_ps.append(now)
        for p, col in zip(self.ports, self.samples):
            b = p.busy_until - now
            col.append(((b if b > 0 else 0) + p.waiting_ps) // p.ps_per_byte)
        if eng.heap:
            eng.push(now + self.interval_ps, self._cb)

    def busiest(self) -> tuple[Port | None, list[int]]:
        """The port with the largest mean occupancy and its samples (bytes)."""
        best, best_sum = None, -1
        for i, col in enumerate(self.samples):
            s = sum(col)
            if s > best_sum:
                best, best_sum = i, s
        if best is None:
            return None, []
        return self.ports[best], self.samples[best]

    def stats(self, port: Port | None = None, packet_bytes: int = 1500) -> dict[str, Any]:
        """Mean / p50 / p99 / max occupancy of ``port`` (default: the busiest) in bytes and
        in packets of ``packet_bytes``."""
        if port is None:
            port, col = self.busiest()
        else:
            col = self.samples[self.ports.index(port)]
        if port is None or not col:
            return {"port": None, "samples": 0}
        a = np.asarray(col, dtype=np.float64)
        return {
            "port": port.name,
            "samples": int(a.size),
            "mean_bytes": float(a.mean()),
            "p50_bytes": float(np.percentile(a, 50)),
            "p99_bytes": float(np.percentile(a, 99)),
            "max_bytes": float(a.max()),
            "mean_pkts": float(a.mean() / packet_bytes),
            "p99_pkts": float(np.percentile(a, 99) / packet_bytes),
        }


def tx_time(size_bytes: int, rate_bps: float) -> int:
    """Re-export of :func:`panama.core.units.tx_time_ps` for simulator users."""
    return tx_time_ps(size_bytes, rate_bps)
