"""UDP segmentation offload (GSO) and receive coalescing (GRO) for the runtime's sockets.

Contract
--------
* :func:`probe` detects both on the actual socket at runtime and never raises:
  GSO (``UDP_SEGMENT``, Linux 4.18+) is present when ``getsockopt(SOL_UDP,
  UDP_SEGMENT)`` works; GRO (``UDP_GRO``, Linux 5.0+) is present when
  ``setsockopt(SOL_UDP, UDP_GRO, 1)`` works, and is then *enabled* on that socket (so
  only a socket whose reader splits coalesced buffers asks for it). Anything else
  (another OS, an older kernel: ``ENOPROTOOPT``) means one datagram per system call.
  The environment variable ``PANAMA_UDP_OFFLOAD=0`` forces that fallback everywhere.
* GSO send: one ``sendmsg`` carries up to :data:`MAX_SEGMENTS` datagrams of equal size
  (the last may be shorter) to one destination with one IP TOS byte, the segment size in
  a ``(SOL_UDP, UDP_SEGMENT, u16)`` control message; the kernel (or the NIC) cuts it into
  ordinary datagrams, so receivers without GRO see no difference. The whole send is one
  UDP payload: at most :data:`MAX_BATCH_BYTES`. A kernel that refuses the send
  (``EINVAL``, ``ENOPROTOOPT``, ``EOPNOTSUPP``, ``EIO``: e.g. a segment larger than the
  route's MTU, or a device without checksum offload) is answered by sending the same
  datagrams one per call; the caller then turns GSO off for that socket
  (:func:`refused`).
* GRO receive: ``recvmsg`` may return several datagrams of one flow back to back, with
  their segment size in a ``(SOL_UDP, UDP_GRO, int)`` control message
  (:func:`parse_cmsgs`); :func:`segments` cuts the buffer back into datagrams. The
  kernel only coalesces datagrams with equal IP TOS (ECN included), so the TOS control
  message of the buffer is every segment's codepoint. The receive buffer must hold a
  whole coalesced buffer: :data:`RECV_BUFFER_BYTES`.
"""

from __future__ import annotations

import errno
import socket
import struct
import sys
from dataclasses import dataclass

from panama import environment

ENV_VAR = environment.UDP_OFFLOAD  # named in panama.environment
SOL_UDP = 17  # Linux values; Python does not export them
UDP_SEGMENT = 103
UDP_GRO = 104
# UDP_MAX_SEGMENTS of Linux 4.18 (later kernels accept 128): datagrams per GSO send.
MAX_SEGMENTS = 64
# A GSO send is one UDP payload before segmentation: the IPv4 limit, 65,535 - 20 - 8.
MAX_BATCH_BYTES = 65507
# Receive buffer of a GRO socket: any coalesced buffer, plus one byte to see truncation.
RECV_BUFFER_BYTES = 65536 + 1
# Control-message space for IP_TOS (1 byte, padded) and UDP_GRO (an int).
RECV_CMSG_SPACE = socket.CMSG_SPACE(4) * 2
REFUSED_ERRNOS = frozenset({errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP, errno.EIO})
_IPPROTO_IP = int(socket.IPPROTO_IP)
_IP_TOS = int(socket.IP_TOS)
_U16 = struct.Struct("=H")


@dataclass
class Offload:
    """What one socket can do: ``gso`` sends, ``gro`` receives; ``reason`` says why not."""

    gso: bool = False
    gro: bool = False
    reason: str = "not requested"

    def as_dict(self) -> dict:
        return {"gso": self.gso, "gro": self.gro, "reason": self.reason}


def env_allows() -> bool:
    """False when ``PANAMA_UDP_OFFLOAD=0`` (or ``off``/``false``/``no``) forces the fallback."""
    return environment.udp_offload()


def probe(sock: socket.socket, *, gro: bool = True) -> Offload:
    """Detect GSO and (when ``gro``) enable GRO on ``sock``; never raises (see the module docstring)."""
    if not env_allows():
        return Offload(False, False, f"{ENV_VAR}=0")
    reasons = []
    try:
        sock.getsockopt(SOL_UDP, UDP_SEGMENT)
        has_gso = True
    except OSError as exc:
        has_gso = False
        reasons.append(f"UDP_SEGMENT: {errno.errorcode.get(exc.errno or 0, exc)} (needs Linux 4.18+)")
    has_gro = False
    if gro:
        try:
            sock.setsockopt(SOL_UDP, UDP_GRO, 1)
            has_gro = True
        except OSError as exc:
            reasons.append(f"UDP_GRO: {errno.errorcode.get(exc.errno or 0, exc)} (needs Linux 5.0+)")
    return Offload(has_gso, has_gro, "; ".join(reasons) or "available")


def refused(exc: BaseException) -> bool:
    """True when a GSO ``sendmsg`` failed because the kernel or device cannot segment it."""
    return isinstance(exc, OSError) and exc.errno in REFUSED_ERRNOS


_SEGMENT_CMSGS: dict[int, tuple] = {}


def segment_cmsg(size_bytes: int) -> tuple:
    """The ``UDP_SEGMENT`` control message for segments of ``size_bytes`` (cached)."""
    cmsg = _SEGMENT_CMSGS.get(size_bytes)
    if cmsg is None:
        cmsg = _SEGMENT_CMSGS[size_bytes] = (SOL_UDP, UDP_SEGMENT, _U16.pack(size_bytes))
    return cmsg


def tos_cmsg(tos: int) -> tuple:
    """The ``IP_TOS`` control message that sends one datagram with ``tos`` (its ECN bits)."""
    return (_IPPROTO_IP, _IP_TOS, bytes((tos,)))


def segments_per_send(datagram_bytes: int) -> int:
    """How many datagrams of ``datagram_bytes`` one GSO send holds (1: batching cannot pay)."""
    if datagram_bytes <= 0:
        return 1
    return max(1, min(MAX_SEGMENTS, MAX_BATCH_BYTES // datagram_bytes))


def parse_cmsgs(anc: list) -> tuple[int, int]:
    """``(ecn, segment_bytes)`` from ``recvmsg`` control messages (segment 0: not coalesced): the
    one reader of the ``IP_TOS`` control message (the ECN bits) for every receive path."""
    ecn = 0
    seg = 0
    for level, kind, data in anc:
        if level == _IPPROTO_IP and kind == _IP_TOS and data:
            ecn = data[0] & 3
        elif level == SOL_UDP and kind == UDP_GRO and len(data) >= 2:
            seg = int.from_bytes(data[:4], sys.byteorder)
    return ecn, seg


def segments(nbytes: int, segment_bytes: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of each datagram in a buffer of ``nbytes`` cut every ``segment_bytes``:
    the one GRO cutter (the switch daemon's batched loop and the communicator's GRO path)."""
    if segment_bytes <= 0 or segment_bytes >= nbytes:
        return [(0, nbytes)]
    return [(off, min(segment_bytes, nbytes - off)) for off in range(0, nbytes, segment_bytes)]
