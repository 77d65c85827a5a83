"""The simulated packet: kinds, drop reasons, :class:`SimPacket` and its PANAMA constructor.

A :class:`SimPacket` is what ports, switches and endpoints move: sizes and header fields,
never bytes. Compiled as an extension type when the fast path is built (``packet.pxd``);
the same class runs interpreted otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import cython  # the compiled build's class decorators below (no-ops interpreted)
except ImportError:  # interpreted, without Cython installed
    from panama.core import _cython_shim as cython

from panama.core.codec import FLOAT_BYTES, HEADER_BYTES, IP_UDP_OVERHEAD_BYTES
from panama.core.packet import ECT0
from panama.sim.placement import on_cache_lines

__all__ = [
    "SimPacket",
    "panama_sim_packet",
    "PANAMA_OVERHEAD_BYTES",
    "KIND_DATA",
    "KIND_ACK",
    "KIND_PANAMA",
    "KIND_OTHER",
    "NUM_KINDS",
    "FLAG_TRACKED",
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

# ``SimPacket.flags`` bit of the data packets of tracked flows (short background flows):
# ports charge the traffic ahead of them to the flow (panama.sim.qahead). Transports keep
# their own flags below it (panama.core.packet's FLAG_* are 8-bit).
FLAG_TRACKED = 0x1000

# Drop reasons (named constants so counters and plots group by them).
DROP_QUEUE_FULL = "queue_full"  # lossy drop-tail at an output queue
DROP_LOSSLESS_OVERFLOW = "lossless_overflow"  # shared buffer overflow despite PFC (a bug)
DROP_NO_ROUTE = "no_route"  # routed packet without a valid destination host
DROP_NO_HANDLER = "no_handler"  # host got a packet with no deliver callback and no handler
DROP_REASONS = (DROP_QUEUE_FULL, DROP_LOSSLESS_OVERFLOW, DROP_NO_ROUTE, DROP_NO_HANDLER)

# Bytes on the wire of a PANAMA packet besides its float32 payload: IP + UDP headers and
# the PANAMA header of ``panama.core.codec`` (20 + 8 + 28 = 56).
PANAMA_OVERHEAD_BYTES = IP_UDP_OVERHEAD_BYTES + HEADER_BYTES


@cython.freelist(1024)
@cython.no_gc
@cython.cclass
class SimPacket:
    """One packet on the simulated wire.

    ``src``/``dst`` are host indices (:attr:`Network.host_index`); ``dst`` routes unicast
    packets (``-1`` for packets that only travel hop by hop through hooks and
    :meth:`Host.send_to`). ``flow_hash`` picks the ECMP path. ``ecn`` is an IP ECN
    codepoint (``panama.core.packet``); the network only ever sets it to ``CE``.
    ``deliver`` (if set) is called with the packet at the destination host. ``seq``,
    ``ack``, ``ts_ps`` and ``flags`` belong to the transport; ``inner`` carries an
    arbitrary object (a ``panama.core.packet.Packet`` for ``KIND_PANAMA``: build those
    with :func:`panama_sim_packet`). ``arrive_ps`` belongs to the network (a packet is in
    at most one link's pipe at a time).
    """

    __slots__ = (
        "kind",
        "src",
        "dst",
        "size_bytes",
        "flow_hash",
        "ecn",
        "deliver",
        "seq",
        "ack",
        "ts_ps",
        "flags",
        "inner",
        "arrive_ps",
    )

    def __init__(
        self,
        kind: int,
        src: int,
        dst: int,
        size_bytes: int,
        flow_hash: int = 0,
        ecn: int = ECT0,
        deliver: Callable[[SimPacket], Any] | None = None,
        seq: int = 0,
        ack: int = 0,
        ts_ps: int = 0,
        flags: int = 0,
        inner: Any = None,
    ):
        self.kind = kind
        self.src = src
        self.dst = dst
        self.size_bytes = size_bytes
        self.flow_hash = flow_hash
        self.ecn = ecn
        self.deliver = deliver
        self.seq = seq
        self.ack = ack
        self.ts_ps = ts_ps
        self.flags = flags
        self.inner = inner
        self.arrive_ps = 0  # set by the port whose pipe holds the packet: arrival time at the peer

    def _fields(self) -> tuple:
        return (
            self.kind,
            self.src,
            self.dst,
            self.size_bytes,
            self.flow_hash,
            self.ecn,
            self.deliver,
            self.seq,
            self.ack,
            self.ts_ps,
            self.flags,
            self.inner,
        )

    def __repr__(self) -> str:
        names = (
            "kind",
            "src",
            "dst",
            "size_bytes",
            "flow_hash",
            "ecn",
            "deliver",
            "seq",
            "ack",
            "ts_ps",
            "flags",
            "inner",
        )
        return "SimPacket(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields())) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SimPacket):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # mutable, like the dataclass it replaces


# Compiled: every packet on a 64-byte line of its own, its header and the fields a hop reads
# in one line (packet.pxd); interpreted, nothing changes. Before any packet exists.
on_cache_lines(SimPacket)


# C constants when compiled (packet.pxd).
_KIND_PANAMA_C, _OVERHEAD_C, _FLOAT_BYTES_C = KIND_PANAMA, PANAMA_OVERHEAD_BYTES, FLOAT_BYTES


def panama_sim_packet(inner: Any, src: int = -1) -> SimPacket:
    """The wire packet carrying a core ``panama.core.packet.Packet`` ``inner``: kind
    ``KIND_PANAMA``, hop by hop (``dst = -1``), its ECN codepoint, and
    ``PANAMA_OVERHEAD_BYTES + 4 x count`` bytes (1500 for 361 floats). ``src`` is the
    sending host's index (-1 for switch-originated packets).

    Every field is set here, without the constructor's argument parsing: compiled
    (``packet.pxd``), on the extension type's C fields; interpreted, on the slots."""
    p = SimPacket.__new__(SimPacket)
    p.kind = _KIND_PANAMA_C
    p.src = src
    p.dst = -1
    p.size_bytes = _OVERHEAD_C + _FLOAT_BYTES_C * inner.count
    p.flow_hash = 0
    p.ecn = inner.ecn
    p.deliver = None
    p.seq = 0
    p.ack = 0
    p.ts_ps = 0
    p.flags = 0
    p.inner = inner
    p.arrive_ps = 0
    return p
