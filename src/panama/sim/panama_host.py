"""PANAMA workers in the simulator: the simulator's pump around a core WorkerTransport.

Contract
--------
A :class:`PanamaWorker` drives one :class:`panama.core.transport.WorkerTransport`
exactly like the UDP runtime does, differing only in *how to send* and *how to arm a
timer*:

* ``start(num_elems)`` -> ``transport.start(now, num_elems=...)`` (sizes only), then pump;
* pump: send every packet ``transport.poll(now)`` returns to the worker's ToR (first hop
  of every tree), then re-arm the single engine timer from ``transport.timer()``;
* a result arriving at the host -> copy the wire ECN codepoint into the core packet,
  ``transport.receive(packet, now)``, pump; when ``transport.done`` turns true the
  ``on_done`` callback runs (after the pump, so the worker may start the next
  allreduce from it);
* timer expiry -> ``transport.handle_timer(now)``, pump. A :class:`TransportError`
  (retries exhausted) is passed to ``on_error`` and the worker stops.

:class:`PanamaHost` is the per-host dispatcher: the network delivers every PANAMA packet
arriving at a host to it, and it hands the packet to the worker of that job.
"""

from __future__ import annotations

from collections.abc import Callable

from panama.core.transport import TransportError, WorkerTransport
from panama.sim.engine import Engine
from panama.sim.network import Network
from panama.sim.nodes import Host, PacketSink
from panama.sim.packet import KIND_PANAMA, SimPacket, panama_sim_packet

_KIND_PANAMA = KIND_PANAMA  # a C constant when compiled

__all__ = ["PanamaHost", "PanamaWorker"]


class PanamaHost(PacketSink):
    """Dispatches PANAMA packets arriving at one host to the worker of their job.

    Attached with ``Network.attach`` as a :class:`~panama.sim.nodes.PacketSink` (the host
    calls :meth:`receive` in C when compiled); packets of other kinds that reach the host
    without a ``deliver`` callback are passed to ``fallback`` (or counted in
    ``unhandled``).
    """

    __slots__ = ("host", "workers", "fallback", "unhandled", "unknown_job")

    def __init__(self, net: Network, host: str, fallback: Callable[[SimPacket], None] | None = None):
        self.host: Host = net.host(host)
        self.workers: dict[int, PanamaWorker] = {}
        self.fallback = fallback
        self.unhandled = 0
        self.unknown_job = 0
        net.attach(host, self)

    def receive(self, spkt: SimPacket) -> None:
        if spkt.kind == _KIND_PANAMA:
            pkt = spkt.inner
            w = self.workers.get(pkt.job_id)
            if w is not None:
                w.receive(spkt)
            else:
                self.unknown_job += 1
        elif self.fallback is not None:
            self.fallback(spkt)
        else:
            self.unhandled += 1


class PanamaWorker:
    """One worker of one job on one host (see module docstring)."""

    __slots__ = (
        "engine",
        "host",
        "tor",
        "transport",
        "on_done",
        "on_error",
        "timer",
        "_up",
        "_src",
        "failed",
        "packets_out",
        "bytes_out",
    )

    def __init__(
        self,
        engine: Engine,
        net: Network,
        dispatcher: PanamaHost,
        tor: str,
        transport: WorkerTransport,
        *,
        on_done: Callable[[PanamaWorker], None] | None = None,
        on_error: Callable[[PanamaWorker, TransportError], None] | None = None,
    ):
        self.engine = engine
        self.host = dispatcher.host
        self.tor = tor
        self.transport = transport
        self.on_done = on_done
        self.on_error = on_error
        self.timer = engine.timer(self._on_timer)
        self._up = self.host.port_to(tor)
        self._src = self.host.index
        self.failed: TransportError | None = None
        self.packets_out = 0
        self.bytes_out = 0
        if transport.job_id in dispatcher.workers:
            raise ValueError(f"host {self.host.name} already runs a worker of job {transport.job_id}")
        dispatcher.workers[transport.job_id] = self

    def detach(self, dispatcher: PanamaHost) -> None:
        """Stop listening (the job ended); later packets of the job are counted as unknown."""
        self.timer.cancel()
        if dispatcher.workers.get(self.transport.job_id) is self:
            del dispatcher.workers[self.transport.job_id]

    # ------------------------------------------------------------------ inputs
    def start(self, num_elems: int) -> None:
        """Begin the next allreduce of ``num_elems`` float32 elements (sizes only)."""
        tr = self.transport
        tr.start(self.engine.now, num_elems=num_elems)
        if tr.done:  # nothing to send (num_elems == 0)
            if self.on_done is not None:
                self.on_done(self)
            return
        self._pump()

    def receive(self, spkt: SimPacket) -> None:
        if self.failed is not None:
            return
        pkt = spkt.inner
        pkt.ecn = spkt.ecn
        tr = self.transport
        was_active = tr.active
        tr.receive(pkt, self.engine.now)
        self._pump()
        if was_active and not tr.active and self.on_done is not None:
            self.on_done(self)

    def _on_timer(self) -> None:
        if self.failed is not None:
            return
        try:
            self.transport.handle_timer(self.engine.now)
        except TransportError as exc:
            self.failed = exc
            if self.on_error is not None:
                self.on_error(self, exc)
            return
        self._pump()

    # ------------------------------------------------------------------ outputs
    def _pump(self) -> None:
        tr = self.transport
        now = self.engine.now
        pkts = tr.poll(now)
        if pkts:
            up = self._up
            src = self._src
            nbytes = 0
            for p in pkts:
                sp = panama_sim_packet(p, src)
                nbytes += sp.size_bytes
                up.send(sp, -1)
            self.packets_out += len(pkts)
            self.bytes_out += nbytes
        t = tr.timer()
        if t is None:
            self.timer.cancel()
        else:
            self.timer.arm(t)
