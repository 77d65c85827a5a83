"""The switch daemon's data plane state and its per-datagram work, shared by both loops.

:class:`DataPlane` owns what the data plane reads and counts: the accelerator it feeds,
the installed jobs' data-plane keys (``keys``: decode checks them) and loopback groups
(``groups``), the seeded generator of injected loss, the backlog marking limits and the
counters ``/stats`` reports. Each loop (:mod:`panama.runtime.switch.loop_plain`, one datagram
per buffer; :mod:`panama.runtime.switch.loop_batch`, GRO/GSO) receives datagrams its own way,
then calls :meth:`DataPlane.count_batch` once per received batch and
:meth:`DataPlane.ingest` once per datagram, and sends what ``ingest`` returns its own way.
The control plane (:class:`panama.runtime.switch.daemon.SwitchDaemon`) installs keys and
groups here and reads the counters, always under the daemon's lock, which the loops hold
while they call in.

This module imports no other module of the daemon: the daemon imports the loops, the
loops import this module, and nothing imports back.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections import Counter

import numpy as np

from panama.core import codec
from panama.core.accelerator import Accelerator
from panama.core.packet import CE, FLAG_RESULT, FLAG_RETRANSMIT
from panama.runtime.settings import SwitchConfig

__all__ = [
    "DataPlane",
    "DROP_INJECTED",
    "DROP_OVERSIZE",
    "DROP_SEND_ERROR",
    "backlog_limits",
    "kernel_queue_bytes",
    "log",
]

log = logging.getLogger("panama.switch")

# Daemon-level drop reasons (the accelerator's own reasons are added to the same counter).
DROP_INJECTED = "injected"
DROP_OVERSIZE = "oversize"
DROP_SEND_ERROR = "send_error"

_SO_MEMINFO = getattr(socket, "SO_MEMINFO", 55)  # Linux; Python does not export it
_MEMINFO_BYTES = 9 * 4  # struct of u32, rmem_alloc first


class DataPlane:
    """Counters, keys, groups and the loss generator of one switch daemon's data plane,
    and :meth:`ingest`, the work done on every received datagram."""

    __slots__ = (
        "acc",
        "keys",
        "groups",
        "rng",
        "drop_prob",
        "datagram_bytes",
        "threshold",
        "truesize",
        "rx_packets",
        "rx_bytes",
        "rx_syscalls",
        "malformed",
        "drops",
        "retransmits_received",
        "ce_received",
        "ce_marked",
        "batches",
        "max_backlog_pkts",
    )

    def __init__(self, config: SwitchConfig, acc: Accelerator):
        self.acc = acc
        # Data-plane keys of installed jobs (decode checks them; the socket appends them).
        self.keys: dict[int, int] = {}
        # Per job, (member set, (group,)): a result to exactly the members leaves as one
        # datagram to the group (the plain loop; the daemon installs and drops them).
        self.groups: dict[int, tuple[frozenset, tuple]] = {}
        self.rng = np.random.default_rng(config.seed)
        self.drop_prob = config.drop_prob
        self.datagram_bytes, self.threshold, self.truesize = backlog_limits(config)
        self.rx_packets = 0
        self.rx_bytes = 0
        self.rx_syscalls = 0
        self.malformed: Counter[str] = Counter()  # by codec reason
        self.drops: Counter[str] = Counter()  # the daemon's own reasons (DROP_*)
        self.retransmits_received = 0
        self.ce_received = 0
        self.ce_marked = 0
        self.batches = 0
        self.max_backlog_pkts = 0

    def count_batch(self, datagrams: int, syscalls: int, queued: int) -> None:
        """Count one received batch: ``datagrams`` taken with ``syscalls`` receive calls,
        ``queued`` bytes still in the kernel's queue behind them."""
        self.batches += 1
        self.rx_packets += datagrams
        self.rx_syscalls += syscalls
        backlog_pkts = datagrams - 1 + queued // self.datagram_bytes
        if backlog_pkts > self.max_backlog_pkts:
            self.max_backlog_pkts = backlog_pkts

    def ingest(self, data: memoryview, ecn: int, floats, source) -> list | None:
        """One received datagram (``data``, its codepoint ``ecn``, ``floats`` a float32 view
        its payload may be read from without a copy, see :func:`panama.core.codec.decode`):
        the injected loss, decoding (a malformed datagram is counted by reason, never
        raised), the receive counters, the accelerator. Returns what the accelerator emits,
        a list of ``(destinations, packet)``, or None. Each packet leaves with the codepoint
        the accelerator chose (``packet.ecn``, CE relayed down included), or
        :meth:`mark`'s while the daemon's own backlog is above its threshold."""
        self.rx_bytes += len(data)
        if self.drop_prob and self.rng.random() < self.drop_prob:
            self.drops[DROP_INJECTED] += 1
            return None
        try:
            packet = _decode(data, ecn, floats, self.keys)
        except _CodecError as exc:
            self.malformed[exc.reason] += 1
            return None
        if ecn == CE:
            self.ce_received += 1
        flags = packet.flags
        if flags & FLAG_RETRANSMIT and not flags & FLAG_RESULT:
            self.retransmits_received += 1
        return self.acc.receive(packet, source) or None

    def mark(self, tos: int, destinations) -> int:
        """The codepoint of a packet leaving for ``destinations`` while the backlog is above
        the threshold: CE (each destination so marked counted in ``ce_marked``)."""
        if tos != CE:
            self.ce_marked += len(destinations)
        return CE


_decode = codec.decode
_CodecError = codec.CodecError


# ---------------------------------------------------------------------- backlog
def kernel_queue_bytes(raw: socket.socket, datagram_bytes: int, truesize: int) -> int | None:
    """What waits in ``raw``'s receive queue, as bytes of full ``datagram_bytes`` datagrams
    (``SO_MEMINFO`` rmem_alloc over ``truesize``, the buffer memory one takes); None when
    the kernel refuses the option (the loops then stop asking)."""
    try:
        rmem = int.from_bytes(raw.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO_BYTES)[:4], sys.byteorder)
    except OSError:
        return None
    return rmem * datagram_bytes // truesize


def backlog_limits(config: SwitchConfig) -> tuple[int, int, int]:
    """The data plane's backlog marking (:mod:`panama.runtime.switch.daemon`, ECN):
    ``(datagram_bytes, threshold_bytes, truesize)``: a full datagram, the backlog above
    which what leaves is marked CE (``ecn_threshold_pkts`` full datagrams; 0: never), and
    the receive-buffer memory one datagram takes (0 where ``SO_MEMINFO`` is not
    available)."""
    datagram_bytes = codec.datagram_size(config.payload_elems)
    threshold = config.ecn_threshold_pkts * datagram_bytes if config.ecn_threshold_pkts else 1 << 62
    return datagram_bytes, threshold, _datagram_truesize(datagram_bytes)


def _datagram_truesize(datagram_bytes: int) -> int:
    """Receive-buffer bytes the kernel charges for one datagram of ``datagram_bytes`` (0: unknown).

    Measured once with a throwaway socket pair on 127.0.0.1 (SO_MEMINFO rmem_alloc after
    one datagram), so the daemon can turn its socket's queued memory into datagrams.
    """
    try:
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
        ):
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * datagram_bytes)
            rx.bind(("127.0.0.1", 0))
            tx.sendto(bytes(datagram_bytes), rx.getsockname())
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                rmem = int.from_bytes(rx.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO_BYTES)[:4], sys.byteorder)
                if rmem:
                    return max(rmem, datagram_bytes)
                time.sleep(0.001)
    except OSError:
        pass
    return 0
