"""Hosts and switches of the simulated network: forwarding tables and ECMP, packet hooks,
and a lossless switch's shared buffer and PAUSE generation.

Contract: a :class:`Host` puts packets on its NIC (:meth:`Host.send`) and hands arrivals
to ``pkt.deliver`` or its ``handler``; a :class:`Switch` forwards unicast packets by
ECMP over its forwarding table, hands the kinds with a hook to the hook and forwards
what it returns (after ``hook_latency_ps``, in order), and in a lossless network admits
packets to its shared buffer, dropping on overflow and sending PAUSE / RESUME to an
ingress's upstream around the PFC threshold. Ports are in :mod:`panama.sim.ports` and
:mod:`panama.sim.lossless`; :class:`panama.sim.network.Network` builds the nodes and
fills their tables (docs/simulator-network.md).

Part of the simulator's hot path: compiled with ``nodes.pxd`` when the fast path is
built, interpreted otherwise (same source, same results).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from panama.core.errors import FieldError
from panama.sim.fifos import DelayLine, ReleaseRings
from panama.sim.heap import Event, schedule_event
from panama.sim.packet import DROP_LOSSLESS_OVERFLOW, DROP_NO_HANDLER, DROP_NO_ROUTE, NUM_KINDS, SimPacket
from panama.sim.routing import ecmp_index

if TYPE_CHECKING:
    from panama.sim.network import Network
    from panama.sim.ports import Port

__all__ = ["Node", "Host", "Switch", "PacketHook", "HookObject"]

_NEVER = 1 << 62  # later than any simulated time (as panama.sim.engine)


class Node:
    """Common part of hosts and switches: name, ports, forwarding table."""

    __slots__ = ("net", "tally", "_eng", "name", "kind", "ports", "port_by_name", "fib", "fib1", "host_count", "salt")

    def __init__(self, net: Network, name: str, kind: str):
        self.net = net
        self.tally = net.tally
        self._eng = net.engine
        self.name = name
        self.kind = kind
        self.ports: list[Port] = []
        self.port_by_name: dict[str, Port] = {}
        self.fib: tuple[tuple[Port, ...], ...] = ()
        self.fib1: tuple[Port | None, ...] = ()  # the port where fib[dst] has exactly one
        self.host_count = 0  # the tables' length: a routed packet's dst is in range(host_count)
        self.salt = 0

    def receive(self, pkt: SimPacket, in_idx: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def port_to(self, neighbour: str) -> Port:
        """The output port towards a neighbour (KeyError naming both if not adjacent)."""
        try:
            return self.port_by_name[neighbour]
        except KeyError:
            raise KeyError(f"{self.name} has no link to {neighbour!r}") from None

    def bad_destination(self, pkt: SimPacket) -> IndexError:
        """The error for a packet whose ``dst`` is neither a host index nor -1 (hop by hop):
        raised by every forwarding path, so that no path reads past its tables."""
        return IndexError(
            f"{self.name}: packet destination {pkt.dst} is not a host index (0..{self.host_count - 1}) or -1"
        )

    def drop_unroutable(self, pkt: SimPacket) -> None:
        """A packet whose ``dst`` is outside the tables, met here: ``dst`` -1 (hop by hop,
        and no hook took it) is dropped as "no route"; anything else raises
        :meth:`bad_destination`. The one rare branch of every arrival path (the check
        itself, ``0 <= dst < host_count``, stays inline in each)."""
        if pkt.dst != -1:
            raise self.bad_destination(pkt)
        self.tally.drop(None, pkt, DROP_NO_ROUTE, node=self)

    def route(self, pkt: SimPacket) -> Port | None:
        """The ECMP choice of output port for a routed packet (None: no route, also for
        ``dst`` -1; :meth:`bad_destination` raised for any other ``dst`` outside the tables)."""
        dst = pkt.dst
        if not 0 <= dst < self.host_count:
            if dst == -1:
                return None
            raise self.bad_destination(pkt)
        ports = self.fib[dst]
        n = len(ports)
        if n == 1:
            return ports[0]
        if n == 0:
            return None
        return ports[ecmp_index(pkt.flow_hash, self.salt, n)]


class PacketSink:
    """Base of host handlers written as objects (``Network.attach(host, sink)``): a host
    calls :meth:`receive` directly (a C method call when compiled, ``nodes.pxd``);
    calling the object calls it too (the plain handler contract)."""

    __slots__ = ()

    def __call__(self, pkt: SimPacket) -> None:
        self.receive(pkt)

    def receive(self, pkt: SimPacket) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Host(Node):
    """An end host. ``send(pkt)`` puts a packet on its NIC; received packets go to
    ``pkt.deliver`` or to the attached ``handler(pkt)`` (``sink``: the same handler when
    it is a :class:`PacketSink`, called as such)."""

    __slots__ = ("index", "handler", "sink", "uplink")

    def __init__(self, net: Network, name: str, index: int):
        super().__init__(net, name, "host")
        self.index = index
        self.handler: Callable[[SimPacket], Any] | None = None
        self.sink: PacketSink | None = None
        self.uplink: Port | None = None

    def send(self, pkt: SimPacket) -> bool:
        """Transmit a routed packet (``pkt.dst`` >= 0) or, for single-homed hosts, any
        packet to the access switch."""
        up = self.uplink
        if up is not None:
            return up.send(pkt, -1)
        port = self.route(pkt)
        if port is None:
            self.tally.drop(None, pkt, DROP_NO_ROUTE)
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
        sink = self.sink
        if sink is not None:
            sink.receive(pkt)
            return
        h = self.handler
        if h is None:
            self.tally.drop(None, pkt, DROP_NO_HANDLER, node=self)
            return
        h(pkt)


PacketHook = Callable[[SimPacket, str], "Iterable[tuple[str, SimPacket]] | None"]


class HookObject:
    """Base of packet hooks written as objects. A switch calls :meth:`run` directly (a C
    method call when compiled, ``nodes.pxd``), which returns the switch's own output ports:
    no neighbour name to look up per packet. Calling the object is the plain-hook contract
    (``(neighbour, packet)`` pairs), for code that wraps a hook."""

    __slots__ = ()

    def __call__(self, pkt: SimPacket, from_node: str):
        out = self.run(pkt, from_node)
        return [(out[j].peer.name, out[j + 1]) for j in range(0, len(out), 2)] if out else None

    def run(self, pkt: SimPacket, from_node: str):  # pragma: no cover - abstract
        """The hook: a new flat list ``[port, packet, port, packet, ...]`` (ports of this
        switch, e.g. from :meth:`Switch.hook_ports`) to forward, or None. The switch keeps
        the list (in its delay line) as it is: do not reuse it."""
        raise NotImplementedError


class Switch(Node):
    """A switch: routes unicast packets by ECMP, hands hooked kinds to their hook.

    Lossless state: ``ingress_bytes[i]`` bytes held that arrived on port ``i`` (the last
    entry is local/hook-originated traffic, never paused), ``used_bytes`` in total,
    ``pause_sent[i]`` whether the upstream of port ``i`` is paused by us.

    Buffer releases are settled lazily: a packet's bytes are freed when its transmission
    ends (its output port's release ring holds ``(end_ps, size, in_idx)``), but the
    switch applies the releases that are due (``end_ps <= now``) only when it next needs
    its buffer state: before it admits a packet, when ``used_bytes`` or
    ``ingress_bytes`` is read, and, while it pauses an upstream (the only time a release
    can change anything by itself: it may let the switch RESUME), at a timer set to the
    earliest pending end. So a release costs no engine event unless PFC is pausing.
    A release due at the same picosecond as an admission is applied before it (the
    buffer space a transmission frees at ``t`` is free for a packet arriving at ``t``).
    The lossless arrival handler and :meth:`_admit` (hook outputs) may even admit with
    due releases left unsettled, where ``_used`` and ``_ing`` (then upper bounds) decide
    as the exact values would
    (:meth:`panama.sim.lossless.LosslessPort._deliver_switch_lossless`): only while no
    upstream is paused (a settle may let one RESUME, so it runs when it did), and only
    when the admission sets no new peak (``peak_used_bytes`` stays exact). So the
    unsettled bytes stay below the peak (the rings stay bounded by the buffer), and
    ``next_release_ps`` stays <= now, a lower bound still. This relies on what the
    network sets once built: ``peak_used_bytes <= buffer_bytes`` and ``pfc_alpha > 0``
    (the threshold never rises with ``_used``).
    ``next_release_ps`` is the earliest pending end over the switch's ports (a lower
    bound: withdrawn entries may leave it early; never late).
    """

    __slots__ = (
        "hooks",
        "hook_latency_ps",
        "lossless",
        "buffer_bytes",
        "pool_bytes",
        "_ingress",
        "_ing",
        "_used",
        "next_release_ps",
        "releases",
        "_rel_timer",
        "pause_sent",
        "pfc_alpha",
        "pfc_static",
        "resume_offset",
        "pauses_sent",
        "_delayline",
        "_dl_armed",
        "_dl_ev",
        "_npaused",
        "hooked",
        "hook_mask",
        "peak_used_bytes",
        "nb_names",
    )

    def __init__(self, net: Network, name: str, kind: str):
        super().__init__(net, name, kind)
        self.hooks: list[PacketHook | None] = [None] * NUM_KINDS
        # A copy of ``hooks`` as a tuple if any is set, and a bit per kind with a hook
        # (set_hook keeps both current): the arrival handlers test the bit, among the
        # switch's fields they read anyway, and index the tuple (its items in the object
        # itself) only for a hooked packet; the tuple tested per packet was a cache line
        # more per hop (on the 100 Gb/s slice about 0.8 first-level misses per switch hop).
        self.hooked: tuple[PacketHook | None, ...] | None = None
        self.hook_mask = 0
        self.hook_latency_ps = 0
        self.lossless = False
        self.buffer_bytes = 0
        self.pool_bytes = 0
        self._ingress: array[int] = array("q")  # see set_lossless; read through ingress_bytes
        self._ing = self._ingress  # the same buffer (a typed memoryview when compiled)
        self._used = 0  # read through used_bytes (which settles due releases first)
        self.next_release_ps = _NEVER
        self.releases = ReleaseRings(0, self._ingress)  # the ports' pending releases (set_lossless)
        self._rel_timer = net.engine.timer(self._release_due)
        self.pause_sent: list[bool] = []
        self.pfc_alpha = 0.125
        self.pfc_static: int | None = None
        self.resume_offset = 0
        self.pauses_sent = 0
        self.peak_used_bytes = 0
        self._delayline = DelayLine()  # hook outputs waiting out hook_latency_ps
        self._dl_armed = False
        self._dl_ev = _DelayLine(self)
        self._npaused = 0  # entries of pause_sent that are True
        self.nb_names: list[str] = []  # see set_hook

    @property
    def used_bytes(self) -> int:
        """Bytes held in the shared buffer now (due releases settled first)."""
        self.settle()
        return self._used

    @used_bytes.setter
    def used_bytes(self, value: int) -> None:
        self._used = value

    @property
    def ingress_bytes(self) -> array:
        """Bytes held by ingress port (the last entry: local traffic), due releases settled first."""
        self.settle()
        return self._ingress

    def receive(self, pkt: SimPacket, in_idx: int) -> None:
        hook = self.hooks[pkt.kind]
        if hook is not None:
            self._run_hook(pkt, in_idx, hook)
            return
        dst = pkt.dst
        if not 0 <= dst < self.host_count:
            self.drop_unroutable(pkt)
            return
        ports = self.fib[dst]
        n = len(ports)
        if n == 1:
            port = ports[0]
        elif n:
            port = ports[ecmp_index(pkt.flow_hash, self.salt, n)]
        else:
            self.tally.drop(None, pkt, DROP_NO_ROUTE, node=self)
            return
        if self.lossless and not self._admit(pkt, in_idx, port):
            return
        port.send(pkt, in_idx)

    # ------------------------------------------------------------------ hooks
    def _run_hook(self, pkt: SimPacket, in_idx: int, hook: PacketHook) -> None:
        if in_idx >= 0:
            frm = self.nb_names[in_idx]
        else:
            frm = self.name
        if isinstance(hook, HookObject):
            obj = hook
            out = obj.run(pkt, frm)  # a new flat list of ports and packets, or None, kept as it is
        else:
            pairs = hook(pkt, frm)
            out = None
            if pairs:
                out = []
                for nb, p in pairs:
                    out.append(self.hook_ports((nb,))[0])
                    out.append(p)
        if out:
            if self.hook_latency_ps:
                self._delay(out, in_idx)
            else:
                self._emit(out, in_idx)

    def hook_ports(self, neighbours: tuple) -> tuple:
        """The output ports towards ``neighbours`` (a hook's destinations), in order; a
        KeyError naming the first that is not a neighbour."""
        pbn = self.port_by_name
        ports = []
        for nb in neighbours:
            port = pbn.get(nb)
            if port is None:
                raise KeyError(f"hook at {self.name} forwarded to {nb!r}, which is not a neighbour")
            ports.append(port)
        return tuple(ports)

    def set_hook(self, kind: int, hook: PacketHook | None, latency_ps: int = 0) -> None:
        """Hand packets of ``kind`` arriving here to ``hook(pkt, from_node)``; forward the
        returned ``(neighbour, packet)`` pairs after ``latency_ps`` (FIFO)."""
        if not 0 <= kind < NUM_KINDS:
            raise FieldError("kind", f"must be in [0, {NUM_KINDS}), got {kind!r}")
        if latency_ps < 0:
            raise FieldError("latency_ps", f"must be >= 0, got {latency_ps!r}")
        self.hooks[kind] = hook
        self.hook_latency_ps = int(latency_ps)
        # The neighbour behind each port, by port index (a hook's ``from_node``).
        self.nb_names = [p.peer.name for p in self.ports]
        self.hooked = tuple(self.hooks) if any(h is not None for h in self.hooks) else None
        self.hook_mask = sum(1 << k for k, h in enumerate(self.hooks) if h is not None)

    def emit(self, neighbour: str, pkt: SimPacket) -> bool:
        """Send a switch-originated packet (e.g. from an accelerator timer) to a neighbour."""
        port = self.port_to(neighbour)
        local = len(self.ports)
        if self.lossless and not self._admit(pkt, local, port):
            return False
        return port.send(pkt, local)

    def _emit(self, out: list, in_idx: int) -> None:
        """Forward a hook's output, ``[port, packet, ...]`` (see :meth:`HookObject.run`)."""
        if in_idx < 0:
            in_idx = len(self.ports)
        for j in range(0, len(out), 2):
            port = out[j]
            p = out[j + 1]
            if self.lossless and not self._admit(p, in_idx, port):
                continue
            port.send(p, in_idx)

    def _delay(self, out: list, in_idx: int) -> None:
        t = self._eng.now + self.hook_latency_ps
        self._delayline.put(t, out, in_idx)
        if not self._dl_armed:
            self._dl_armed = True
            schedule_event(self._eng, t, self._dl_ev)

    def _drain_delayline(self) -> None:
        now = self._eng.now
        dl = self._delayline
        t = dl.head_time()
        while t >= 0:
            if t > now:
                schedule_event(self._eng, t, self._dl_ev)
                return
            in_idx = dl.head_in_idx()
            self._emit(dl.pop_head(), in_idx)
            t = dl.head_time()
        self._dl_armed = False

    # ------------------------------------------------------------------ PFC
    def set_lossless(self, nports: int) -> None:
        """Lossless accounting for ``nports`` ingress ports (plus one entry for local and
        hook-originated traffic); the thresholds are set by the network."""
        self.lossless = True
        self._ingress = array("q", bytes(8 * (nports + 1)))
        self._ing = self._ingress
        self.pause_sent = [False] * nports
        self._npaused = 0
        self.releases = ReleaseRings(len(self.ports), self._ingress)
        for p in self.ports:
            p.enable_release(self.releases)

    # ------------------------------------------------------------------ buffer releases
    def settle(self) -> None:
        """Apply every buffer release due by now (see the class docstring)."""
        now = self._eng.now
        if now >= self.next_release_ps:
            self._catch_up(now)

    def note_release(self, end_ps: int) -> None:
        """One of the ports queued a release at ``end_ps`` (its ring already holds it).
        Inlined in :meth:`panama.sim.lossless.LosslessPort._send` (keep them alike)."""
        if end_ps < self.next_release_ps:
            self.next_release_ps = end_ps
            if self._npaused:
                self._rel_timer.arm(end_ps)

    def _catch_up(self, now: int) -> None:
        """Free the bytes of every transmission ended by ``now``; while pausing, check
        whether an upstream can resume."""
        freed = self.releases.release(now)
        self.next_release_ps = self.releases.next_end()
        if freed:
            self._used -= freed
            if self._npaused:
                self._check_resume()

    def _release_due(self) -> None:
        """The release timer (armed only while an upstream is paused by this switch)."""
        self._catch_up(self._eng.now)
        if self._npaused and self.next_release_ps < _NEVER:
            self._rel_timer.arm(self.next_release_ps)

    def pfc_threshold(self) -> int:
        """Current per-ingress PAUSE threshold in bytes."""
        if self.pfc_static is not None:
            return self.pfc_static
        free = self.pool_bytes - self._used
        return int(self.pfc_alpha * free) if free > 0 else 0

    def _admit(self, pkt: SimPacket, in_idx: int, port: Port) -> bool:
        now = self._eng.now
        size = pkt.size_bytes
        used = self._used + size
        if now >= self.next_release_ps:
            # Due releases may stay unsettled where the upper bounds decide as the exact
            # values would (the class docstring; as the lossless arrival handler does).
            ib = self._ing[in_idx] + size
            settle = self._npaused != 0 or used > self.peak_used_bytes
            if not settle and in_idx < len(self.ports):  # (local traffic: never paused)
                if self.pfc_static is None:
                    free = self.pool_bytes - used
                    thr = int(self.pfc_alpha * free) if free > 0 else 0
                else:
                    thr = self.pfc_static
                settle = ib > thr
            if not settle:
                self._used = used
                self._ing[in_idx] = ib
                return True
            self._catch_up(now)
            used = self._used + size
        if used > self.buffer_bytes:
            self.tally.drop(port, pkt, DROP_LOSSLESS_OVERFLOW)
            return False
        self._used = used
        if used > self.peak_used_bytes:
            self.peak_used_bytes = used
        ib = self._ing[in_idx] + size
        self._ing[in_idx] = ib
        if (
            in_idx < len(self.ports)
            and (not self._npaused or not self.pause_sent[in_idx])  # (none paused: no list read)
            and ib > self.pfc_threshold()
        ):
            self._send_pfc(in_idx, True)
        return True

    def _check_resume(self) -> None:
        if not self._npaused:
            return
        ps = self.pause_sent
        thr = self.pfc_threshold()
        off = self.resume_offset
        ib = self._ing
        for i, p in enumerate(ps):
            if p and (ib[i] + off <= thr or ib[i] == 0):
                self._send_pfc(i, False)

    def _send_pfc(self, in_idx: int, pause: bool) -> None:
        self.pause_sent[in_idx] = pause
        self._npaused += 1 if pause else -1
        link = self.ports[in_idx]
        up = link.reverse
        eng = self._eng
        if pause:
            self.pauses_sent += 1
            eng.push(eng.now + link.delay_ps, up.pause)
            if self.next_release_ps < _NEVER:
                self._rel_timer.arm(self.next_release_ps)
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
                    self._ing[in_idx],
                )
            )


class _DelayLine(Event):
    """The event of a switch's hook delay line (one pending at a time)."""

    __slots__ = ("switch",)

    def __init__(self, switch: Switch):
        self.t = 0
        self.seq = 0
        self.switch = switch
        self._fire_cb = switch._drain_delayline

    def fire(self) -> None:
        self.switch._drain_delayline()
