"""DCTCP flows for ordinary (non-aggregation) traffic in the simulator.

Contract
--------
* :class:`Dctcp` is the transport of one network: ``start_flow(src, dst, size_bytes,
  start_ps, on_complete)`` returns a :class:`Flow`; ``size_bytes=None`` is a long-lived
  flow that never completes. Both ends of a flow live in the one :class:`Flow` object
  (sender state and receiver state), the packets between them cross the network.
* Segments carry ``mss_bytes`` (1460) of payload in ``mss_bytes + header_bytes``
  (1500) bytes on the wire; sequence numbers count segments. The receiver ACKs every
  segment (cumulative ACK of the next expected segment, ``ack_bytes`` = 64 on the wire),
  echoes the segment's CE mark as ECE on that ACK, and buffers out-of-order segments.
  Data packets are ECN-capable (ECT(0)); ACKs are not.
* Sender (RFC 8257 DCTCP on a NewReno-style TCP): slow start (cwnd += acked) below
  ``ssthresh``, congestion avoidance (cwnd += acked / cwnd); ``alpha <- (1-g) alpha + g F``
  once per window of data, ``F`` the fraction of acknowledged segments echoing ECE;
  on ECE at most once per window ``cwnd <- cwnd (1 - alpha/2)`` (a new cut needs an
  ACK beyond everything sent at the previous cut); fast retransmit on
  ``dupack_threshold`` (3) duplicate ACKs with NewReno partial-ACK retransmissions;
  RTO per RFC 6298 (``srtt + 4 rttvar`` clamped to [min_rto, max_rto]) with exponential
  back-off, after which the sender goes back to the first unacknowledged segment with
  cwnd = 1. One RTT sample per window (the ACK that closes the DCTCP observation
  window), from a timestamp echoed by the ACK.
* The retransmission timer is coarse, as in htsim: an ACK that makes progress only
  records ``rto_base = now``; when the armed :class:`panama.sim.engine.Timer` expires
  it re-arms itself at ``rto_base + rto x backoff`` if that is later, and only otherwise
  declares a timeout. So ACKs cost no timer work and a flow has one pending event.
* A flow records ``start_ps``, ``finish_ps`` (sender saw the last segment acknowledged),
  ``fct_ps``, ``ideal_fct_ps`` (= wire bytes over the path's bottleneck rate + base RTT,
  see :meth:`Flow.ideal_fct`) and ``slowdown``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from panama.core.errors import FieldError
from panama.core.packet import CE, ECT0, NOT_ECT
from panama.core.units import PS_PER_S, ms
from panama.sim.engine import Timer
from panama.sim.network import Network
from panama.sim.packet import KIND_ACK, KIND_DATA, SimPacket
from panama.sim.ports import unloaded_ps
from panama.sim.routing import flow_hash

# ``@_positional(False)``: compiled, METH_O (a port calls a flow's ``deliver`` without keyword
# parsing; no caller passes ``pkt=``); interpreted, the function itself (a compile directive).
try:
    from cython import always_allow_keywords as _positional
except ImportError:  # interpreted, without Cython installed

    def _positional(allow: bool) -> Callable[[Any], Any]:
        return lambda f: f


__all__ = ["DctcpConfig", "Dctcp", "Flow", "FLAG_ECE"]

FLAG_ECE = 0x1  # on ACKs: the acknowledged segment arrived with CE

# The same constants as C values when compiled (dctcp.pxd); plain globals otherwise.
_KIND_DATA = KIND_DATA
_KIND_ACK = KIND_ACK
_CE = CE
_ECT0 = ECT0
_NOT_ECT = NOT_ECT
_FLAG_ECE = FLAG_ECE


@dataclass
class DctcpConfig:
    """DCTCP parameters (units in the names; defaults in brackets are the usual ones)."""

    mss_bytes: int = 1460
    header_bytes: int = 40
    ack_bytes: int = 64
    init_cwnd_pkts: float = 10.0
    max_cwnd_pkts: float = 1e9
    g: float = 1.0 / 16.0  # RFC 8257 estimation gain
    initial_alpha: float = 1.0  # Linux dctcp_alpha_on_init = 1024/1024
    dupack_threshold: int = 3
    initial_rto_ps: int = ms(1)
    min_rto_ps: int = ms(1)
    max_rto_ps: int = ms(100)
    ecn: bool = True

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise FieldError(name, f"{what}, got {getattr(self, name)!r}")

        check("mss_bytes", self.mss_bytes >= 1, "must be >= 1")
        check("header_bytes", self.header_bytes >= 0, "must be >= 0")
        check("ack_bytes", self.ack_bytes >= 1, "must be >= 1")
        check("init_cwnd_pkts", self.init_cwnd_pkts >= 1, "must be >= 1")
        check("max_cwnd_pkts", self.max_cwnd_pkts >= self.init_cwnd_pkts, "must be >= init_cwnd_pkts")
        check("g", 0 < self.g <= 1, "must be in (0, 1]")
        check("initial_alpha", 0 <= self.initial_alpha <= 1, "must be in [0, 1]")
        check("dupack_threshold", self.dupack_threshold >= 1, "must be >= 1")
        check("min_rto_ps", self.min_rto_ps >= 1, "must be >= 1")
        check("initial_rto_ps", self.initial_rto_ps >= self.min_rto_ps, "must be >= min_rto_ps")
        check("max_rto_ps", self.max_rto_ps >= self.initial_rto_ps, "must be >= initial_rto_ps")


class Flow:
    """One DCTCP connection (sender and receiver state). Read-only for users."""

    __slots__ = (
        "stack",
        "id",
        "src",
        "dst",
        "size_bytes",
        "num_pkts",
        "last_payload",
        "start_ps",
        "finish_ps",
        "on_complete",
        "hash",
        "tag",
        "data_flags",
        # sender
        "snd_una",
        "snd_nxt",
        "max_sent",
        "cwnd",
        "ssthresh",
        "dupacks",
        "in_recovery",
        "recover",
        "alpha",
        "win_end",
        "win_acked",
        "win_marked",
        "cwr_end",
        "srtt",
        "rttvar",
        "rto",
        "backoff",
        "timer",
        "rto_base",
        "retransmits",
        "timeouts",
        "fast_retransmits",
        "ece_acks",
        "_send",
        "_ack_send",
        "_up",
        "_ack_up",
        "_on_data_cb",
        "_on_ack_cb",
        "_payload",
        "_last_size",
        "_ecn",
        "_eng",
        "_max_cwnd",
        "_ack_bytes",
        "_min_rto_ps",
        "_max_rto_ps",
        "_g",
        "_cfg",
        # receiver
        "rcv_nxt",
        "ooo",
        "rcv_ce",
        "ideal_fct_ps",
    )

    def __init__(
        self,
        stack: Dctcp,
        flow_id: int,
        src: int,
        dst: int,
        size_bytes: int | None,
        start_ps: int,
        on_complete: Callable[[Flow], Any] | None,
        tag: Any = None,
    ):
        cfg = stack.config
        self.stack = stack
        self.id = flow_id
        self.src = src
        self.dst = dst
        self.size_bytes = size_bytes
        mss = cfg.mss_bytes
        if size_bytes is None:
            self.num_pkts = 1 << 62
            self.last_payload = mss
        else:
            self.num_pkts = max(1, -(-size_bytes // mss))
            self.last_payload = size_bytes - (self.num_pkts - 1) * mss if size_bytes else 0
        self.start_ps = start_ps
        self.finish_ps: int | None = None
        self.on_complete = on_complete
        self.tag = tag
        self.data_flags = 0  # SimPacket.flags of its data packets (FLAG_TRACKED: queueing attributed)
        self.hash = flow_hash(flow_id, stack.salt)
        self.snd_una = 0
        self.snd_nxt = 0
        self.max_sent = 0
        self.cwnd = float(cfg.init_cwnd_pkts)
        self.ssthresh = float(cfg.max_cwnd_pkts)
        self.dupacks = 0
        self.in_recovery = False
        self.recover = 0
        self.alpha = float(cfg.initial_alpha)
        self.win_end = 0
        self.win_acked = 0
        self.win_marked = 0
        self.cwr_end = 0
        self.srtt = 0
        self.rttvar = 0
        self.rto = cfg.initial_rto_ps
        self.backoff = 1
        self.rto_base = 0
        self.timer = Timer(stack.network.engine, self._on_rto)
        self.retransmits = 0
        self.timeouts = 0
        self.fast_retransmits = 0
        self.ece_acks = 0
        hs, hd = stack.network.hosts[src], stack.network.hosts[dst]
        # Single-homed hosts (every built-in topology): straight onto the NIC port
        # (``_up.send``, a C call when compiled); otherwise through the host's routing.
        self._up = hs.uplink
        self._ack_up = hd.uplink
        self._send = hs.send
        self._ack_send = hd.send
        self._payload = cfg.mss_bytes + cfg.header_bytes  # a full segment on the wire
        self._last_size = self.last_payload + cfg.header_bytes  # the last segment on the wire
        self._ecn = _ECT0 if cfg.ecn else _NOT_ECT
        self._eng = stack.network.engine
        self._max_cwnd = float(cfg.max_cwnd_pkts)
        self._ack_bytes = cfg.ack_bytes
        self._min_rto_ps = cfg.min_rto_ps  # these 4 (and _cfg's max_cwnd_pkts, as given): the slow ACK path's
        self._max_rto_ps = cfg.max_rto_ps
        self._g = cfg.g
        self._cfg = cfg
        self._on_data_cb = self._on_data
        self._on_ack_cb = self._on_ack
        self.rcv_nxt = 0
        self.ooo: set[int] = set()
        self.rcv_ce = 0
        self.ideal_fct_ps = stack.ideal_fct(src, dst, size_bytes, self.hash) if size_bytes is not None else None

    # ------------------------------------------------------------------ results
    @property
    def done(self) -> bool:
        return self.finish_ps is not None

    @property
    def fct_ps(self) -> int | None:
        return None if self.finish_ps is None else self.finish_ps - self.start_ps

    @property
    def slowdown(self) -> float | None:
        f = self.fct_ps
        return None if f is None or not self.ideal_fct_ps else f / self.ideal_fct_ps

    @property
    def delivered_bytes(self) -> int:
        """Payload bytes the receiver has in order."""
        n = self.rcv_nxt
        if n >= self.num_pkts:
            return (self.num_pkts - 1) * self.stack.config.mss_bytes + self.last_payload
        return n * self.stack.config.mss_bytes

    @property
    def acked_bytes(self) -> int:
        n = self.snd_una
        if n >= self.num_pkts:
            return (self.num_pkts - 1) * self.stack.config.mss_bytes + self.last_payload
        return n * self.stack.config.mss_bytes

    def record(self) -> dict[str, Any]:
        """A flat row for CSV output."""
        return {
            "flow_id": self.id,
            "src": self.stack.network.host_names[self.src],
            "dst": self.stack.network.host_names[self.dst],
            "size_bytes": self.size_bytes,
            "start_ps": self.start_ps,
            "finish_ps": self.finish_ps,
            "fct_ps": self.fct_ps,
            "ideal_fct_ps": self.ideal_fct_ps,
            "slowdown": self.slowdown,
            "delivered_bytes": self.delivered_bytes,
            "retransmits": self.retransmits,
            "timeouts": self.timeouts,
            "fast_retransmits": self.fast_retransmits,
            "ece_acks": self.ece_acks,
            "tag": self.tag,
        }

    # ------------------------------------------------------------------ sender
    def _start(self) -> None:
        self._fill(None)

    def _transmit(self, seq: int, spare: SimPacket | None) -> None:
        # Sizes, codepoint and clock from the flow's own fields (set once in __init__): the
        # configuration's and the stack's attributes are Python attribute lookups, six per
        # segment, about 3 % of a 100 Gb/s slice's instructions (callgrind).
        size = self._last_size if seq == self.num_pkts - 1 else self._payload
        now = self._eng.now
        if spare is None:
            # Built field by field (no constructor call parsing twelve arguments); the
            # fields a reused packet keeps from its flow are set here, the rest below.
            p = SimPacket.__new__(SimPacket)
            p.flow_hash = self.hash
            p.ack = 0
            p.inner = None
            p.arrive_ps = 0
        else:
            p = spare
        p.kind = _KIND_DATA
        p.src = self.src
        p.dst = self.dst
        p.size_bytes = size
        p.ecn = self._ecn
        p.deliver = self._on_data_cb
        p.seq = seq
        p.ts_ps = now
        p.flags = self.data_flags
        if seq < self.max_sent:
            self.retransmits += 1
        else:
            self.max_sent = seq + 1
        up = self._up
        if up is not None:
            up.send(p, -1)
        else:
            self._send(p)

    def _fill(self, spare: SimPacket | None) -> None:
        """Send new segments while the window allows (``spare``: a delivered packet to reuse)."""
        nxt = self.snd_nxt
        end = self.num_pkts
        if nxt >= end:
            return
        allowed = self.cwnd + (self.dupacks if self.in_recovery else 0)
        una = self.snd_una
        if nxt - una >= allowed:
            return
        up = self._up
        last = end - 1
        max_sent = self.max_sent
        while nxt < end and nxt - una < allowed:
            if spare is not None and nxt < last and nxt >= max_sent:
                # Fast path: a new full-size segment in a recycled packet object.
                p = spare
                spare = None
                p.kind = _KIND_DATA
                p.src = self.src
                p.dst = self.dst
                p.size_bytes = self._payload
                p.ecn = self._ecn
                p.deliver = self._on_data_cb
                p.seq = nxt
                p.ts_ps = self._eng.now
                p.flags = self.data_flags
                max_sent = nxt + 1
                self.max_sent = max_sent
                if up is not None:
                    up.send(p, -1)
                else:
                    self._send(p)
            else:
                self._transmit(nxt, spare)
                spare = None
                max_sent = self.max_sent
            nxt += 1
        self.snd_nxt = nxt
        if self.timer.when is None:
            self._arm_rto(self._eng.now)

    @_positional(False)
    def _on_ack(self, pkt: SimPacket) -> None:
        ack = pkt.ack
        una = self.snd_una
        if una < ack < self.win_end and not self.in_recovery and ack <= self.snd_nxt:
            # Fast path: new data acknowledged in order, inside the current DCTCP
            # observation window; the same steps as _on_ack_slow for this case (alpha and
            # the RTT sample are updated by the ACK that closes the window, below).
            acked = ack - una
            self.snd_una = ack
            self.win_acked += acked
            cwnd = self.cwnd
            if cwnd < self.ssthresh:
                cwnd += acked
            else:
                cwnd += acked / cwnd
            if cwnd > self._max_cwnd:
                cwnd = self._max_cwnd
            if pkt.flags & _FLAG_ECE:
                self.ece_acks += 1
                self.win_marked += acked
                if ack > self.cwr_end:
                    # DCTCP cut, at most once per window (RFC 8257 section 3.3).
                    cwnd *= 1.0 - self.alpha / 2.0
                    if cwnd < 1.0:
                        cwnd = 1.0
                    self.ssthresh = cwnd if cwnd > 2.0 else 2.0
                    self.cwr_end = self.snd_nxt
            self.cwnd = cwnd
            self.dupacks = 0
            self.backoff = 1
            # Coarse RTO: the armed timer checks ``rto_base`` when it expires (_on_rto).
            now = self._eng.now
            self.rto_base = now
            nxt = self.snd_nxt
            if nxt - ack < cwnd and nxt == self.max_sent and nxt < self.num_pkts - 1:
                # Usual case: exactly one new full-size segment, in the ACK's packet object.
                pkt.kind = _KIND_DATA
                pkt.src, pkt.dst = pkt.dst, pkt.src
                pkt.size_bytes = self._payload
                pkt.ecn = self._ecn
                pkt.deliver = self._on_data_cb
                pkt.seq = nxt
                pkt.ts_ps = now
                pkt.flags = 0
                nxt += 1
                self.snd_nxt = self.max_sent = nxt
                up = self._up
                if up is not None:
                    up.send(pkt, -1)
                else:
                    self._send(pkt)
                if nxt - ack < cwnd:
                    self._fill(None)
                return
            self._fill(pkt)
            return
        self._on_ack_slow(pkt)

    def _on_ack_slow(self, pkt: SimPacket) -> None:
        now = self._eng.now
        ack = pkt.ack
        ece = pkt.flags & _FLAG_ECE
        if ack >= self.win_end:
            # RTT sample (RFC 6298) from the echoed timestamp, once per window.
            rtt = now - pkt.ts_ps
            if self.srtt == 0:
                self.srtt = rtt
                self.rttvar = rtt >> 1
            else:
                d = self.srtt - rtt
                self.rttvar = (3 * self.rttvar + (d if d >= 0 else -d)) >> 2
                self.srtt = (7 * self.srtt + rtt) >> 3
            rto = self.srtt + 4 * self.rttvar
            lo, hi = self._min_rto_ps, self._max_rto_ps
            self.rto = lo if rto < lo else (hi if rto > hi else rto)
        una = self.snd_una
        if ece:
            self.ece_acks += 1
        if ack > una:
            acked = ack - una
            self.snd_una = una = ack
            if ack > self.snd_nxt:
                self.snd_nxt = ack  # after a go-back-N timeout the receiver was ahead
            self.backoff = 1
            # DCTCP alpha, once per window of data (RFC 8257 section 3.3).
            self.win_acked += acked
            if ece:
                self.win_marked += acked
            if ack >= self.win_end:
                f = self.win_marked / self.win_acked if self.win_acked else 0.0
                g = self._g
                self.alpha = (1.0 - g) * self.alpha + g * f
                self.win_acked = 0
                self.win_marked = 0
                self.win_end = self.snd_nxt
            if self.in_recovery:
                if ack >= self.recover:
                    self.in_recovery = False
                    self.dupacks = 0
                    self.cwnd = self.ssthresh
                else:  # NewReno partial ACK: the next hole is lost too
                    self.dupacks = 0
                    self._transmit(ack, None)
            else:
                self.dupacks = 0
                cwnd = self.cwnd
                if cwnd < self.ssthresh:
                    cwnd += acked
                else:
                    cwnd += acked / cwnd
                self.cwnd = cwnd if cwnd < (m := self._cfg.max_cwnd_pkts) else m  # an int stays one
            if ece and una > self.cwr_end and not self.in_recovery:
                self._ece_cut()
            if una >= self.num_pkts:
                self._complete(now)
                return
            if una < self.snd_nxt:
                self._arm_rto(now)
            else:
                self.timer.cancel()
        else:
            if ece and una > self.cwr_end and not self.in_recovery:
                self._ece_cut()
            if ack == una and self.snd_nxt > una:
                self.dupacks += 1
                if self.dupacks == self._cfg.dupack_threshold and not self.in_recovery and una >= self.recover:
                    self.in_recovery = True
                    self.fast_retransmits += 1
                    self.recover = self.snd_nxt
                    self.ssthresh = max(self.cwnd / 2.0, 2.0)
                    self.cwnd = self.ssthresh
                    self._transmit(una, None)
                    self._arm_rto(now)
        self._fill(pkt)

    def _ece_cut(self) -> None:
        """DCTCP window reduction, at most once per window of data."""
        cwnd = self.cwnd * (1.0 - self.alpha / 2.0)
        self.cwnd = cwnd if cwnd > 1.0 else 1.0
        self.ssthresh = self.cwnd if self.cwnd > 2.0 else 2.0
        self.cwr_end = self.snd_nxt

    def _arm_rto(self, now: int) -> None:
        """(Re)start the retransmission timer from ``now`` (lazy: see :class:`Timer`)."""
        self.rto_base = now
        self.timer.arm(now + self.rto * self.backoff)

    def _on_rto(self) -> None:
        if self.finish_ps is not None or self.snd_una >= self.snd_nxt:
            return
        now = self._eng.now
        deadline = self.rto_base + self.rto * self.backoff
        if deadline > now:  # progress since the timer was armed: not a timeout yet
            self.timer.arm(deadline)
            return
        cfg = self.stack.config
        self.timeouts += 1
        self.ssthresh = max(self.cwnd / 2.0, 2.0)
        self.cwnd = 1.0
        self.in_recovery = False
        self.dupacks = 0
        self.recover = self.snd_nxt
        self.cwr_end = self.snd_nxt
        self.snd_nxt = self.snd_una  # go back N
        self.backoff = min(self.backoff * 2, max(1, cfg.max_rto_ps // max(self.rto, 1)))
        self._fill(None)
        if self.timer.when is None:
            self._arm_rto(now)

    def _complete(self, now: int) -> None:
        self.finish_ps = now
        self.timer.cancel()
        stack = self.stack
        stack.active -= 1
        stack.completed += 1
        if self.on_complete is not None:
            self.on_complete(self)
        if stack.on_complete is not None:
            stack.on_complete(self)

    # ------------------------------------------------------------------ receiver
    @_positional(False)
    def _on_data(self, pkt: SimPacket) -> None:
        seq = pkt.seq
        nxt = self.rcv_nxt
        if seq == nxt:
            nxt += 1
            ooo = self.ooo
            if ooo:
                while nxt in ooo:
                    ooo.remove(nxt)
                    nxt += 1
            self.rcv_nxt = nxt
        elif seq > nxt:
            self.ooo.add(seq)
        # The data packet becomes its own ACK (the network no longer references it).
        if pkt.ecn == _CE:
            self.rcv_ce += 1
            pkt.flags = self.data_flags | _FLAG_ECE
        else:
            pkt.flags = self.data_flags
        pkt.kind = _KIND_ACK
        pkt.src, pkt.dst = pkt.dst, pkt.src
        pkt.size_bytes = self._ack_bytes
        pkt.ecn = _NOT_ECT
        pkt.ack = nxt
        pkt.deliver = self._on_ack_cb
        up = self._ack_up
        if up is not None:
            up.send(pkt, -1)
        else:
            self._ack_send(pkt)


class Dctcp:
    """DCTCP transport over a :class:`Network`.

    ``rng`` seeds the flow-hash salt (ECMP path choice). ``on_complete`` (optional) is
    called with every flow that completes, after the flow's own callback.
    """

    def __init__(
        self,
        network: Network,
        config: DctcpConfig | None = None,
        *,
        rng: np.random.Generator,
        on_complete: Callable[[Flow], Any] | None = None,
    ):
        self.network = network
        self.engine = network.engine
        self.config = config or DctcpConfig()
        self.salt = int(rng.integers(0, 2**63 - 1))
        self.flows: list[Flow] = []
        self.active = 0
        self.completed = 0
        self.on_complete = on_complete

    def start_flow(
        self,
        src: str | int,
        dst: str | int,
        size_bytes: int | None,
        start_ps: int | None = None,
        on_complete: Callable[[Flow], Any] | None = None,
        *,
        tag: Any = None,
    ) -> Flow:
        """Create a flow from host ``src`` to host ``dst`` (names or indices) that starts
        at ``start_ps`` (default: now). ``size_bytes=None``: long-lived."""
        net = self.network
        s = net.host(src).index
        d = net.host(dst).index
        if s == d:
            raise FieldError("src/dst", f"a flow needs two different hosts, got {net.host_names[s]} twice")
        if size_bytes is not None and size_bytes < 0:
            raise FieldError("size_bytes", f"must be >= 0, got {size_bytes!r}")
        now = self.engine.now
        start = now if start_ps is None else int(start_ps)
        if start < now:
            raise FieldError("start_ps", f"{start} is before now ({now})")
        flow = Flow(self, len(self.flows), s, d, size_bytes, start, on_complete, tag)
        self.flows.append(flow)
        self.active += 1
        self.engine.at(start, flow._start)
        return flow

    def ideal_fct(self, src: int, dst: int, size_bytes: int, h: int = 0) -> int:
        """Unloaded completion time: wire bytes over the path's bottleneck rate + base RTT.

        Base RTT = round-trip propagation + one ACK serialised at every hop + one full
        segment serialised at every hop but the bottleneck (store-and-forward)."""
        cfg = self.config
        n = max(1, -(-size_bytes // cfg.mss_bytes))
        wire = size_bytes + n * cfg.header_bytes
        seg = min(size_bytes, cfg.mss_bytes) + cfg.header_bytes
        return unloaded_ps(self.network.path(src, dst, h), wire, seg, cfg.ack_bytes)

    def fct_table(self) -> list[dict[str, Any]]:
        return [f.record() for f in self.flows]

    def summary(self) -> dict[str, Any]:
        """Counts and FCT / slowdown statistics of completed flows."""
        done = [f for f in self.flows if f.finish_ps is not None]
        out: dict[str, Any] = {
            "flows": len(self.flows),
            "completed": len(done),
            "retransmits": sum(f.retransmits for f in self.flows),
            "timeouts": sum(f.timeouts for f in self.flows),
            "fast_retransmits": sum(f.fast_retransmits for f in self.flows),
        }
        if done:
            fct = np.array([f.fct_ps for f in done], dtype=np.float64)
            sd = np.array([f.slowdown for f in done if f.slowdown is not None], dtype=np.float64)
            out |= {
                "fct_mean_ps": float(fct.mean()),
                "fct_p99_ps": float(np.percentile(fct, 99)),
                "slowdown_mean": float(sd.mean()) if sd.size else None,
                "slowdown_p99": float(np.percentile(sd, 99)) if sd.size else None,
            }
        return out


def goodput_bps(flow: Flow, interval_ps: int) -> float:
    """Receiver goodput of ``flow`` over ``interval_ps``."""
    return flow.delivered_bytes * 8 * PS_PER_S / interval_ps if interval_ps > 0 else 0.0


def jain(values: list[float]) -> float:
    """Jain's fairness index of non-negative values (1 = perfectly fair)."""
    if not values:
        return 1.0
    s = sum(values)
    q = sum(v * v for v in values)
    return (s * s) / (len(values) * q) if q > 0 else 1.0
