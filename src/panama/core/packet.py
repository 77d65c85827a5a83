"""The PANAMA packet as an object (the wire format lives in :mod:`panama.core.codec`).

A packet is either a *contribution* (worker -> tree root, summed on the way up) or a
*result* (root -> workers, flag ``FLAG_RESULT``). ``seq`` numbers packets per
(job, tree) and keeps increasing across generations (allreduce calls), so ``ack``
(the sender's cumulative result acknowledgement) is meaningful across calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    import cython  # the compiled build's class decorators below (no-ops interpreted)
except ImportError:  # interpreted, without Cython installed
    from panama.core import _cython_shim as cython

# IP ECN codepoints (RFC 3168), modelled as a field of the packet object.
NOT_ECT = 0
ECT1 = 1
ECT0 = 2
CE = 3

# PANAMA header flags.
FLAG_RESULT = 0x01  # root -> workers: the aggregated result of (job, tree, seq)
FLAG_RETRANSMIT = 0x02  # this contribution was sent before and timed out
FLAG_ECE = 0x04  # on results: some contribution of this slot carried CE (tree-wide echo)
FLAG_ACK = 0x08  # header only (count 0, seq == ack): a child's cumulative ack, no contribution
KNOWN_FLAGS = FLAG_RESULT | FLAG_RETRANSMIT | FLAG_ECE | FLAG_ACK

MAX_CWND_CAP = 0xFFFF  # cwnd_cap is a 16-bit header field
MAX_U32 = 0xFFFFFFFF
MAX_U16 = 0xFFFF


@cython.freelist(1024)  # compiled: freed packets reused, and outside the cyclic collector
@cython.no_gc  # (a payload is a float32 array or None: no cycle through a packet)
@cython.cclass
@dataclass
class Packet:
    """One PANAMA packet.

    ``payload`` is a float32 vector of ``count`` elements, or ``None`` when a driver
    (the simulator) moves sizes without data. Receivers treat payloads as read-only.
    ``ack``: every result of this tree with a sequence number below ``ack`` has reached
    the sender (for a switch: every worker below it).

    Compiled with the simulator's fast path (``packet.pxd``: an extension type with the
    same fields, 64-bit integer header fields); interpreted, a plain dataclass (no
    ``slots=True``: Cython's dataclasses do not take it, and an extension type has fixed
    fields anyway).
    """

    job_id: int
    tree_id: int
    seq: int
    generation: int
    count: int
    flags: int = 0
    cwnd_cap: int = MAX_CWND_CAP
    ack: int = 0
    ecn: int = ECT0
    payload: np.ndarray | None = None

    @property
    def is_result(self) -> bool:
        return bool(self.flags & FLAG_RESULT)

    def payload_bytes(self) -> int:
        """Bytes of float32 payload this packet carries on the wire."""
        return self.count * 4


def new_packet(
    job_id: int,
    tree_id: int,
    seq: int,
    generation: int,
    count: int,
    flags: int,
    cwnd_cap: int,
    ack: int,
    ecn: int,
    payload: np.ndarray | None,
) -> Packet:
    """``Packet(job_id, tree_id, seq, generation, count, flags, cwnd_cap, ack, ecn,
    payload)``, every field given, without the constructor's argument parsing: how the
    accelerator and the worker transport build the packets they emit.

    Compiled (``packet.pxd``), a C function that the other compiled modules call directly
    and that sets the extension type's C fields; interpreted, it still skips the
    dataclass ``__init__`` (measured: about a fifth less per packet than ``Packet(...)``).
    """
    p = Packet.__new__(Packet)
    p.job_id = job_id
    p.tree_id = tree_id
    p.seq = seq
    p.generation = generation
    p.count = count
    p.flags = flags
    p.cwnd_cap = cwnd_cap
    p.ack = ack
    p.ecn = ecn
    p.payload = payload
    return p
