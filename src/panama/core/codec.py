"""Wire format of PANAMA packets (the only place where packets become bytes).

Datagram = header (28 bytes) + payload + key trailer (8 bytes), network byte order,
directly after the UDP header. Header::

    offset size field       meaning
    0      2    magic       0x5041 ("PA")
    2      1    version     2 (1 had no key trailer)
    3      1    flags       bit0 RESULT, bit1 RETRANSMIT, bit2 ECE; other bits must be 0
    4      4    job_id      job identifier assigned by the controller
    8      2    tree_id     aggregation tree of the job
    10     2    cwnd_cap    tree-wide window cap in packets (min over accelerators)
    12     4    generation  allreduce call number of the job
    16     4    seq         packet number within (job, tree), increasing across calls
    20     4    ack         sender holds every result of this tree below this seq
    24     2    count       float32 elements in the payload
    26     2    reserved    must be 0

followed by ``count`` little-endian IEEE-754 float32 values, then the trailer::

    offset          size field  meaning
    28 + 4*count    8    key    the job's data-plane key (random, issued at admission; 0: none)

and nothing else. The key is not part of :class:`~panama.core.packet.Packet`: drivers
pass it to :func:`encode_into` / :func:`key_trailer` and give :func:`decode` the keys
they accept (``keys={job_id: key}``); a datagram whose job is in ``keys`` with another
key is rejected with reason ``bad_key``. It is a capability, not a MAC: whoever reads a
datagram of the job learns it (docs/runtime.md, "Trust model"). The simulator models
the 28-byte header (:data:`HEADER_BYTES`, :func:`wire_size`), not the trailer. The ECN
codepoint travels in the IP header (IP_TOS / IP_RECVTOS) and is passed in and out
separately.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from panama.core.packet import KNOWN_FLAGS, Packet

MAGIC = 0x5041
VERSION = 2
HEADER = struct.Struct("!HBBIHHIIIHH")
HEADER_BYTES = HEADER.size  # 28
KEY = struct.Struct("!Q")
KEY_BYTES = KEY.size  # 8, the trailer
MAX_KEY = 2**64 - 1
FLOAT_BYTES = 4
# IPv4 (20) + UDP (8) + PANAMA header (28) + payload must fit a 1500-byte MTU.
IP_UDP_OVERHEAD_BYTES = 28
DEFAULT_MTU_BYTES = 1500
DEFAULT_PAYLOAD_ELEMS = (DEFAULT_MTU_BYTES - IP_UDP_OVERHEAD_BYTES - HEADER_BYTES) // FLOAT_BYTES  # 361
# The largest payload of a keyed datagram (header, payload, key trailer) in a 1500-byte MTU: what a
# real NIC takes without fragments (--payload-elems 359). DEFAULT_PAYLOAD_ELEMS leaves out the
# trailer, as the simulator and the hardware model do.
NIC_PAYLOAD_ELEMS = (DEFAULT_MTU_BYTES - IP_UDP_OVERHEAD_BYTES - HEADER_BYTES - KEY_BYTES) // FLOAT_BYTES  # 359
MAX_PAYLOAD_ELEMS = (65507 - HEADER_BYTES - KEY_BYTES) // FLOAT_BYTES  # largest UDP datagram: 16367

_F32 = np.dtype("<f4")

# Named reasons; counters and tests group by them.
SHORT = "short"
BAD_MAGIC = "bad_magic"
BAD_VERSION = "bad_version"
UNKNOWN_FLAGS = "unknown_flags"
RESERVED_NONZERO = "reserved_nonzero"
COUNT_MISMATCH = "count_mismatch"
TRAILING_BYTES = "trailing_bytes"
BAD_KEY = "bad_key"
BAD_FIELD = "bad_field"
REASONS = (SHORT, BAD_MAGIC, BAD_VERSION, UNKNOWN_FLAGS, RESERVED_NONZERO, COUNT_MISMATCH, TRAILING_BYTES, BAD_KEY)


class CodecError(ValueError):
    """A datagram is not a valid PANAMA packet; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def wire_size(count: int) -> int:
    """Header and payload bytes of a packet carrying ``count`` floats (what the simulator models)."""
    return HEADER_BYTES + FLOAT_BYTES * count


def datagram_size(count: int) -> int:
    """UDP payload bytes of a datagram carrying ``count`` floats: header, payload and key trailer."""
    return HEADER_BYTES + FLOAT_BYTES * count + KEY_BYTES


def key_trailer(key: int) -> bytes:
    """The 8 trailer bytes of ``key`` (drivers make them once per job, for gather sends)."""
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= MAX_KEY:
        raise CodecError(BAD_FIELD, f"key must be an integer in [0, 2^64), got {key!r}")
    return KEY.pack(key)


def encode(packet: Packet, key: int = 0) -> bytes:
    """Serialise ``packet`` with ``key``; raises :class:`CodecError` (``bad_field``) for out-of-range fields."""
    buf = bytearray(datagram_size(packet.count))
    encode_into(buf, packet, 0, key)
    return bytes(buf)


def encode_header_into(buf: bytearray | memoryview, packet: Packet, offset: int = 0) -> int:
    """Write only the header of ``packet`` into ``buf`` at ``offset``; returns the datagram's size
    (header, payload and key trailer).

    For drivers that send the payload from its own memory (a gather ``sendmsg`` of
    [header, payload, :func:`key_trailer`]): every field and the payload's length are checked as by
    :func:`encode_into`, and the payload must already be little-endian float32 (which
    :func:`encode_into` would convert to; a gather send itself refuses a non-contiguous
    buffer); no payload byte is written.
    """
    count = packet.count
    if packet.flags & ~KNOWN_FLAGS & 0xFF or not 0 <= packet.flags <= 0xFF:
        raise CodecError(BAD_FIELD, f"flags {packet.flags:#x} has unknown bits")
    if count:
        payload = packet.payload
        if payload is None or payload.shape[0] != count:
            raise CodecError(BAD_FIELD, f"payload does not hold count={count} floats")
        if payload.dtype is not _F32 and payload.dtype != _F32:  # identity first: the common case is cheap
            raise CodecError(BAD_FIELD, f"payload is {payload.dtype}, not little-endian float32")
    try:
        HEADER.pack_into(
            buf,
            offset,
            MAGIC,
            VERSION,
            packet.flags,
            packet.job_id,
            packet.tree_id,
            packet.cwnd_cap,
            packet.generation,
            packet.seq,
            packet.ack,
            count,
            0,
        )
    except struct.error as exc:
        raise CodecError(BAD_FIELD, f"header field out of range ({exc}) in {packet!r}") from None
    return HEADER_BYTES + FLOAT_BYTES * count + KEY_BYTES


def encode_into(buf: bytearray | memoryview, packet: Packet, offset: int = 0, key: int = 0) -> int:
    """Write ``packet`` (header, payload converted to little-endian float32, key trailer) into ``buf``."""
    count = packet.count
    payload = packet.payload
    if count and payload is not None and payload.shape[0] == count:
        if payload.dtype != _F32 or not payload.flags.c_contiguous:  # e.g. float64, big-endian, strided
            payload = np.ascontiguousarray(payload, dtype=_F32)
            packet = replace(packet, payload=payload)
    trailer = key_trailer(key)
    size = encode_header_into(buf, packet, offset)
    if count:
        out = np.frombuffer(buf, dtype=_F32, count=count, offset=offset + HEADER_BYTES)
        out[:] = payload
    buf[offset + size - KEY_BYTES : offset + size] = trailer
    return size


def payload_view(buf: bytearray | memoryview) -> np.ndarray:
    """A read-only float32 view of ``buf`` after the header, for :func:`decode`'s ``floats``.

    Drivers that receive into the same buffer again and again make this view once per
    buffer; decoding then slices it instead of building a new array per datagram.
    """
    floats = np.frombuffer(buf, dtype=_F32, count=(len(buf) - HEADER_BYTES) // FLOAT_BYTES, offset=HEADER_BYTES)
    floats.flags.writeable = False
    return floats


def decode(
    data: bytes | bytearray | memoryview,
    ecn: int = 0,
    floats: np.ndarray | None = None,
    keys: Mapping[int, int] | None = None,
) -> Packet:
    """Parse one datagram strictly. The payload is a read-only view into ``data``.

    ``ecn`` is the IP ECN codepoint the driver received the datagram with. ``floats``,
    optional, is :func:`payload_view` of the buffer ``data`` starts at (``data`` is then
    that buffer or a prefix of it): the payload is sliced from it. ``keys``, optional,
    maps job ids to the key their datagrams must carry (``bad_key`` otherwise); a job
    not in ``keys`` passes (its receiver drops it as unknown).
    """
    size = len(data)
    if size < HEADER_BYTES + KEY_BYTES:
        raise CodecError(SHORT, f"{size} bytes, a header and key trailer need {HEADER_BYTES + KEY_BYTES}")
    magic, version, flags, job_id, tree_id, cwnd_cap, generation, seq, ack, count, reserved = HEADER.unpack_from(
        data, 0
    )
    if magic != MAGIC:
        raise CodecError(BAD_MAGIC, f"magic {magic:#06x}, expected {MAGIC:#06x}")
    if version != VERSION:
        raise CodecError(BAD_VERSION, f"version {version}, expected {VERSION}")
    if flags & ~KNOWN_FLAGS:
        raise CodecError(UNKNOWN_FLAGS, f"flags {flags:#04x} has unknown bits")
    if reserved:
        raise CodecError(RESERVED_NONZERO, f"reserved field is {reserved:#06x}")
    body = size - HEADER_BYTES - KEY_BYTES
    need = FLOAT_BYTES * count
    if body < need:
        raise CodecError(COUNT_MISMATCH, f"count {count} needs {need} payload bytes, got {body}")
    if body > need:
        raise CodecError(TRAILING_BYTES, f"{body - need} bytes after {count} floats")
    if keys is not None:
        want = keys.get(job_id)
        if want is not None and KEY.unpack_from(data, size - KEY_BYTES)[0] != want:
            raise CodecError(BAD_KEY, f"job {job_id}: the datagram does not carry the job's key")
    if not count:
        payload = None
    elif floats is not None:
        payload = floats[:count]
    else:
        payload = np.frombuffer(data, dtype=_F32, count=count, offset=HEADER_BYTES)
        if payload.flags.writeable:
            payload.flags.writeable = False
    return Packet(job_id, tree_id, seq, generation, count, flags, cwnd_cap, ack, ecn & 3, payload)
