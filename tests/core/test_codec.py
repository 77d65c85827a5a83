"""Codec: one table drives encoding and decoding; hypothesis round-trips and fuzzes."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from panama.core import codec
from panama.core.codec import HEADER, HEADER_BYTES, MAGIC, VERSION, CodecError, decode, encode
from panama.core.packet import CE, ECT0, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet


def _pkt(**kw):
    base = dict(job_id=7, tree_id=2, seq=1000, generation=3, count=3, flags=0, cwnd_cap=512, ack=990, ecn=ECT0)
    base.update(kw)
    if "payload" not in kw:
        base["payload"] = np.arange(base["count"], dtype=np.float32) + 0.5 if base["count"] else None
    return Packet(**base)


# (description, packet, expected header tuple)
CASES = [
    ("contribution", _pkt(), (MAGIC, VERSION, 0, 7, 2, 512, 3, 1000, 990, 3, 0)),
    ("result with echo", _pkt(flags=FLAG_RESULT | FLAG_ECE), (MAGIC, VERSION, 5, 7, 2, 512, 3, 1000, 990, 3, 0)),
    ("retransmit", _pkt(flags=FLAG_RETRANSMIT), (MAGIC, VERSION, 2, 7, 2, 512, 3, 1000, 990, 3, 0)),
    ("empty payload", _pkt(count=0), (MAGIC, VERSION, 0, 7, 2, 512, 3, 1000, 990, 0, 0)),
    (
        "max fields",
        _pkt(job_id=2**32 - 1, tree_id=2**16 - 1, seq=2**32 - 1, generation=2**32 - 1, cwnd_cap=0xFFFF, ack=2**32 - 1),
        (MAGIC, VERSION, 0, 2**32 - 1, 2**16 - 1, 0xFFFF, 2**32 - 1, 2**32 - 1, 2**32 - 1, 3, 0),
    ),
]


@pytest.mark.parametrize("desc,packet,header", CASES, ids=[c[0] for c in CASES])
def test_table_encode_decode(desc, packet, header):
    data = encode(packet, key=0x0123456789ABCDEF)
    assert len(data) == HEADER_BYTES + 4 * packet.count + codec.KEY_BYTES == codec.datagram_size(packet.count)
    assert HEADER.unpack_from(data) == header
    assert data[-8:] == bytes.fromhex("0123456789abcdef")  # key trailer, network order
    back = decode(data, ecn=packet.ecn)
    for name in ("job_id", "tree_id", "seq", "generation", "count", "flags", "cwnd_cap", "ack", "ecn"):
        assert getattr(back, name) == getattr(packet, name), name
    if packet.count:
        assert np.array_equal(back.payload, packet.payload)
        assert not back.payload.flags.writeable
    else:
        assert back.payload is None


def test_header_is_28_bytes_and_default_packet_fits_mtu():
    assert HEADER_BYTES == 28 and codec.KEY_BYTES == 8
    assert codec.wire_size(0) == 28  # what the simulator models (no trailer)
    assert codec.datagram_size(codec.MAX_PAYLOAD_ELEMS) <= 65507 < codec.datagram_size(codec.MAX_PAYLOAD_ELEMS + 1)
    assert 20 + 8 + codec.wire_size(codec.DEFAULT_PAYLOAD_ELEMS) <= 1500
    assert 20 + 8 + codec.wire_size(codec.DEFAULT_PAYLOAD_ELEMS + 1) > 1500


def _raw(magic=MAGIC, version=VERSION, flags=0, count=2, reserved=0, body=8):
    return HEADER.pack(magic, version, flags, 1, 0, 10, 1, 5, 5, count, reserved) + b"\0" * (body + codec.KEY_BYTES)


BAD = [
    ("short", b"\x50\x41\x01", codec.SHORT),
    ("empty", b"", codec.SHORT),
    ("no key trailer", _raw(count=0, body=0)[:-1], codec.SHORT),
    ("version 1 (no trailer)", _raw(version=1), codec.BAD_VERSION),
    ("bad magic", _raw(magic=0x1234), codec.BAD_MAGIC),
    ("bad version", _raw(version=9), codec.BAD_VERSION),
    ("unknown flags", _raw(flags=0x80), codec.UNKNOWN_FLAGS),
    ("reserved", _raw(reserved=1), codec.RESERVED_NONZERO),
    ("count too big", _raw(count=3, body=8), codec.COUNT_MISMATCH),
    ("trailing", _raw(count=2, body=9), codec.TRAILING_BYTES),
]


@pytest.mark.parametrize("desc,data,reason", BAD, ids=[b[0] for b in BAD])
def test_malformed_input_has_specific_reason(desc, data, reason):
    with pytest.raises(CodecError) as info:
        decode(data)
    assert info.value.reason == reason
    assert reason in str(info.value)


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(CodecError) as info:
        encode(_pkt(cwnd_cap=70000))
    assert info.value.reason == codec.BAD_FIELD
    with pytest.raises(CodecError):
        encode(_pkt(flags=0x40))
    with pytest.raises(CodecError):
        encode(Packet(1, 0, 0, 0, 4, payload=np.zeros(3, np.float32)))


packets = st.builds(
    lambda job, tree, seq, gen, cap, ack, flags, ecn, values: Packet(
        job,
        tree,
        seq,
        gen,
        len(values),
        flags,
        cap,
        ack,
        ecn,
        np.array(values, dtype=np.float32) if values else None,
    ),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16 - 1),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, FLAG_RESULT, FLAG_RETRANSMIT, FLAG_RESULT | FLAG_ECE, 7]),
    st.sampled_from([0, 1, ECT0, CE]),
    st.lists(st.floats(width=32, allow_nan=False), max_size=40),
)


def test_keys_admit_the_right_key_only_and_pass_unknown_jobs():
    pkt = _pkt(job_id=7)
    good = encode(pkt, key=2**64 - 1)
    assert decode(good, keys={7: 2**64 - 1}).job_id == 7
    assert decode(good, keys={8: 5}).job_id == 7  # job 7 unknown here: its receiver drops it
    assert decode(good).job_id == 7  # no keys: no check
    for wrong in (encode(pkt), encode(pkt, key=2**64 - 2)):
        with pytest.raises(CodecError) as info:
            decode(wrong, keys={7: 2**64 - 1})
        assert info.value.reason == codec.BAD_KEY and "job 7" in str(info.value)
    for bad in (-1, 2**64, 1.0, True):
        with pytest.raises(CodecError) as info:
            encode(pkt, key=bad)
        assert info.value.reason == codec.BAD_FIELD
    assert codec.key_trailer(1) == b"\0" * 7 + b"\1"


@given(packets, st.integers(0, 2**64 - 1))
@settings(max_examples=300)
def test_roundtrip_property(packet, key):
    back = decode(encode(packet, key), ecn=packet.ecn, keys={packet.job_id: key})
    assert (back.job_id, back.tree_id, back.seq, back.generation, back.count, back.flags, back.cwnd_cap, back.ack) == (
        packet.job_id,
        packet.tree_id,
        packet.seq,
        packet.generation,
        packet.count,
        packet.flags,
        packet.cwnd_cap,
        packet.ack,
    )
    if packet.count:
        assert back.payload.tobytes() == packet.payload.tobytes()


@given(st.binary(max_size=200))
@settings(max_examples=1000)
def test_fuzz_random_bytes_raise_only_codec_error(data):
    try:
        decode(data)
    except CodecError:
        pass


@given(packets, st.integers(0, 60), st.binary(min_size=1, max_size=4))
@settings(max_examples=300)
def test_fuzz_mutated_valid_packets(packet, position, junk):
    data = bytearray(encode(packet))
    position %= len(data) + 1
    mutated = bytes(data[:position]) + junk + bytes(data[position + len(junk) :])
    try:
        decode(mutated)
    except CodecError:
        pass
    truncated = bytes(data[: max(0, len(data) - 1 - position)])
    with pytest.raises(CodecError):
        decode(truncated)


def test_struct_header_layout_is_network_order():
    data = encode(_pkt(job_id=0x01020304))
    assert data[4:8] == bytes([1, 2, 3, 4])
    assert struct.unpack("!H", data[:2])[0] == MAGIC


@given(packets)
@settings(max_examples=200)
def test_header_only_encoding_plus_payload_bytes_equals_full_encoding(packet):
    buf = bytearray(HEADER_BYTES)
    size = codec.encode_header_into(buf, packet)
    assert size == codec.datagram_size(packet.count)
    payload = packet.payload.astype("<f4").tobytes() if packet.count else b""
    assert bytes(buf) + payload + codec.key_trailer(99) == encode(packet, 99)


def test_header_only_encoding_checks_like_full_encoding():
    buf = bytearray(HEADER_BYTES)
    for bad in (_pkt(cwnd_cap=70000), _pkt(flags=0x40), Packet(1, 0, 0, 0, 4, payload=np.zeros(3, np.float32))):
        with pytest.raises(CodecError) as info:
            codec.encode_header_into(buf, bad)
        assert info.value.reason == codec.BAD_FIELD
    with pytest.raises(CodecError):
        codec.encode_header_into(buf, Packet(1, 0, 0, 0, 4, payload=None))


@given(packets)
@settings(max_examples=200)
def test_decode_with_a_payload_view_matches_plain_decode_and_aliases_the_buffer(packet):
    wire = encode(packet)
    buf = bytearray(codec.datagram_size(40) + 1)  # a receive buffer larger than the datagram
    buf[: len(wire)] = wire
    floats = codec.payload_view(buf)
    assert not floats.flags.writeable
    fast = decode(memoryview(buf)[: len(wire)], packet.ecn, floats)
    plain = decode(wire, packet.ecn)
    assert fast == plain if not packet.count else fast.payload.tobytes() == plain.payload.tobytes()
    if packet.count:
        assert not fast.payload.flags.writeable
        assert np.shares_memory(fast.payload, floats)
        buf[HEADER_BYTES : HEADER_BYTES + 4] = struct.pack("<f", 123.5)  # the next datagram lands here
        assert fast.payload[0] == np.float32(123.5)


def test_full_encoding_converts_payloads_header_only_encoding_refuses_them():
    """encode_into writes the wire form of any float payload; encode_header_into (gather sends) needs it already."""
    values = np.array([1.5, -2.0, 3.25], dtype=np.float64)
    for payload in (values, values.astype(">f4"), np.repeat(values.astype(np.float32), 2)[::2]):
        wire = encode(Packet(1, 0, 0, 0, 3, payload=payload))
        assert decode(wire).payload.tolist() == [1.5, -2.0, 3.25]
        if payload.dtype == np.float32 and payload.dtype.isnative:
            continue  # strided float32: the gather send refuses it (BufferError), not the codec
        with pytest.raises(CodecError) as info:
            codec.encode_header_into(bytearray(HEADER_BYTES), Packet(1, 0, 0, 0, 3, payload=payload))
        assert info.value.reason == codec.BAD_FIELD and "float32" in str(info.value)
