"""The RTL aggregation datapath against the core accelerator, packet by packet."""

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("amaranth")

from panama.core import codec  # noqa: E402
from panama.core.accelerator import Accelerator  # noqa: E402
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet  # noqa: E402
from panama.hw import verify as hv  # noqa: E402
from panama.hw.driver import HwAccelerator  # noqa: E402
from panama.hw.layout import KEY_BYTES, HwConfig  # noqa: E402
from panama.hw.report import measure_cycles, verilog_text  # noqa: E402

CFG = HwConfig(width=256, slots=8, payload_elems=9, max_trees=4, max_children=4, ports=8)
KEY = 0x0123456789ABCDEF


def enc(p):
    return codec.encode(p, KEY) if KEY_BYTES else codec.encode(p)


def run_both(trees, packets):
    """Install ``trees`` in both models, push ``packets`` [(Packet, from)], return [(core, rtl)] per packet."""
    core = Accelerator(CFG.slots, CFG.payload_elems)
    hw = HwAccelerator(CFG)
    hw.set_job_key(1, KEY)
    for job, tree, children, parent in trees:
        core.install_tree(job, tree, children, parent)
        hw.install_tree(job, tree, children, parent)
    for p, frm in packets:
        hw.send(enc(p), frm, p.ecn)
    rtl = hw.run()
    pairs = []
    for (p, frm), got in zip(packets, rtl, strict=True):
        want = [(set(d), enc(q), q.ecn) for d, q in core.receive(p, frm)]
        pairs.append((want, [(set(d), b, e) for d, b, e in got.emitted], got.event))
    return pairs


def vec(*xs):
    return np.array(xs + (0.0,) * (4 - len(xs)), dtype=np.float32)


def test_root_sums_emits_result_with_ece_and_min_cap_and_answers_retransmissions():
    a, b = vec(1.0, -0.0, 1e-45), vec(2.0, -0.0, 1e-45)
    pkts = [
        (Packet(1, 0, 0, 0, 4, 0, 9, 0, CE, a), "w0"),
        (Packet(1, 0, 0, 0, 4, 0, 5, 0, ECT0, a), "w0"),  # duplicate without RETRANSMIT: dropped
        (Packet(1, 0, 0, 0, 4, 0, 7, 0, ECT0, b), "w1"),  # completes: result to both, ECE, the tree's cap (3)
        (Packet(1, 0, 0, 0, 4, FLAG_RETRANSMIT, 7, 0, ECT0, b), "w1"),  # answered from the slot
        (Packet(1, 0, 1, 0, 0, FLAG_ACK, 9, 1, ECT0), "w0"),
    ]
    pairs = run_both([(1, 0, ("w0", "w1"), None)], pkts)
    for want, got, _ in pairs:
        assert want == got
    result = codec.decode(pairs[2][1][0][1][: codec.HEADER_BYTES + 16] + bytes(KEY_BYTES))
    assert result.flags == FLAG_RESULT | FLAG_ECE and result.cwnd_cap == 3  # 8 slots, one job: (8 - 1) // 2
    assert result.payload.view(np.uint32).tolist()[:3] == [0x40400000, 0x80000000, 0x00000002]
    assert pairs[1][2] == "duplicate" and pairs[3][1][0][0] == {"w1"}


def test_partial_goes_up_result_comes_down_and_is_relayed_ce():
    x = vec(0.5, 0.25)
    pkts = [
        (Packet(1, 0, 0, 0, 2, 0, 40, 0, ECT0, x[:2]), "w0"),
        (Packet(1, 0, 0, 0, 2, 0, 40, 0, CE, x[:2]), "w1"),  # partial, CE, ack = floor
        (Packet(1, 0, 0, 0, 2, FLAG_RESULT, 3, 0, CE, vec(9.0, 9.0)[:2]), "w0"),  # not the parent
        (Packet(1, 0, 0, 0, 2, FLAG_RESULT, 3, 0, CE, vec(9.0, 9.0)[:2]), "up"),  # relayed CE to both
        (Packet(1, 0, 0, 0, 2, FLAG_RESULT, 3, 0, ECT0, vec(9.0, 9.0)[:2]), "up"),  # duplicate result
        (Packet(1, 0, 0, 0, 2, FLAG_RETRANSMIT, 40, 0, ECT0, x[:2]), "w1"),  # answered with the result
        (Packet(1, 0, 5, 0, 2, 0, 40, 0, ECT0, x[:2]), "w9"),  # not a child
    ]
    pairs = run_both([(1, 0, ("w0", "w1"), "up")], pkts)
    for want, got, _ in pairs:
        assert want == got
    assert [e for _, _, e in pairs] == ["ok", "ok", "not_parent", "ok", "duplicate_result", "ok", "not_child"]
    assert pairs[1][1][0][2] == CE and pairs[3][1][0][2] == CE


def test_malformed_datagrams_are_dropped_with_the_codec_reason():
    p = Packet(1, 0, 0, 0, 2, 0, 40, 0, ECT0, vec(1.0, 2.0)[:2])
    hw = HwAccelerator(CFG)
    hw.install_tree(1, 0, ("w0",), None)
    good = enc(p)
    bad = [good[:10], b"XX" + good[2:], good[:3] + b"\x80" + good[4:], good + b"\0\0\0\0", good[:-4]]
    for d in bad:
        hw.send(d, "w0")
    events = [o.event for o in hw.run()]
    assert events == [
        "codec_short",
        "codec_bad_magic",
        "codec_unknown_flags",
        "codec_trailing_bytes",
        "codec_count_mismatch",
    ]


def test_verify_random_stream_zero_mismatches():
    # a few thousand datagrams (issue 17's CI criterion); about a minute of CPU
    result = hv.run_verify(3000, seed=5)
    assert result["packets"] == 3000
    assert result["mismatches"] == 0, result["examples"]
    v = result["verdicts"]
    # the stream exercised what it claims to: sums, duplicates, share limits, foreign and malformed input
    assert (
        v["ok"] > 600
        and v["duplicate"] > 0
        and v["share_exceeded"] > 0
        and v.get("unknown_tree", 0) + v.get("unknown_job", 0) > 0
    )
    assert sum(n for k, n in v.items() if k.startswith("codec_")) > 0
    # wrong keys on datagrams that would otherwise be taken: dropped by both, counted by the RTL
    assert v["codec_bad_key"] > 20 and result["bad_key_drops_rtl"] == v["codec_bad_key"]
    assert result["emitted"] > 100 and result["installs"] >= 2


def test_verify_detects_a_model_difference(monkeypatch):
    """The comparison can fail: a core with less memory than the RTL disagrees somewhere."""
    real = hv.Accelerator
    monkeypatch.setattr(hv, "Accelerator", lambda slots, elems, name: real(slots - 6, elems, name=name))
    result = hv.run_verify(150, seed=5)
    assert result["mismatches"] > 0 and result["examples"]


def test_same_datagram_flags_a_one_bit_payload_difference():
    p = Packet(1, 0, 0, 0, 2, 0, 40, 0, ECT0, vec(1.0, 2.0)[:2])
    a = enc(p)
    b = bytearray(a)
    b[codec.HEADER_BYTES] ^= 1
    assert hv._same_datagram(a, a) == (True, 0)
    assert hv._same_datagram(a, bytes(b))[0] is False


def test_back_to_back_cycles_per_packet_and_verilog():
    cfg = replace(CFG, payload_elems=40)
    meas = measure_cycles(cfg, packets=8)
    beats = meas["beats_per_packet"]
    # one beat per cycle plus the header decision (lookup, decide, floor, next): at most 6 extra
    assert beats <= meas["cycles_per_packet"] <= beats + 6
    assert meas["emitted"] == 4
    text = verilog_text(CFG)
    assert "module panama_aggregator" in text


def test_trailer_only_beat_does_not_touch_the_next_slot():
    """Full packets whose key trailer spills into a beat past the slot's rows (9 floats at
    256 bits: 18 words, 3 beats, 2 rows per slot) leave the neighbouring slot intact."""
    rng = np.random.default_rng(4)
    x = [rng.standard_normal(9).astype(np.float32) for _ in range(4)]
    pkts = [
        (Packet(1, 0, 0, 0, 9, 0, 40, 0, ECT0, x[0]), "w0"),  # slot 0
        (Packet(1, 0, 0, 0, 9, 0, 40, 0, ECT0, x[1]), "w1"),  # slot 0 complete: partial up
        (Packet(1, 0, 1, 0, 9, 0, 40, 0, ECT0, x[2]), "w0"),  # slot 1
        (Packet(1, 0, 0, 0, 9, FLAG_RESULT, 40, 0, ECT0, x[3]), "up"),  # result copied into slot 0
        (Packet(1, 0, 1, 0, 9, 0, 40, 0, ECT0, x[0]), "w1"),  # slot 1 complete: its sum must be intact
    ]
    pairs = run_both([(1, 0, ("w0", "w1"), "up")], pkts)
    for want, got, _ in pairs:
        assert want == got
    assert len(pairs[4][1]) == 1


def test_a_wrong_key_is_dropped_before_it_touches_any_state():
    """A contribution with another key (codec ``bad_key``, as the daemons' decoder) is
    dropped and counted: no slot, no child bit, no ack, nothing summed; the right one
    from the same child afterwards is taken. A wrong key on a malformed header reports
    the header; a job the datapath does not know is unknown whatever its key."""
    x, y = vec(1.0, 2.0), vec(4.0, 8.0)
    p0 = Packet(1, 0, 0, 0, 4, 0, 40, 0, ECT0, vec(100.0, 100.0))
    good = enc(p0)
    wrong = good[: len(good) - KEY_BYTES] + (KEY ^ 1).to_bytes(KEY_BYTES, "big")
    hw = HwAccelerator(CFG)
    hw.set_job_key(1, KEY)
    hw.install_tree(1, 0, ("w0", "w1"), None)
    hw.send(wrong, "w0")  # would open slot 0 and be summed
    hw.send(enc(Packet(1, 0, 0, 0, 4, 0, 40, 0, ECT0, x)), "w0")
    hw.send(enc(Packet(1, 0, 0, 0, 4, FLAG_RETRANSMIT, 40, 0, ECT0, y))[:-KEY_BYTES] + bytes(KEY_BYTES), "w1")
    hw.send(enc(Packet(1, 0, 0, 0, 4, 0, 40, 0, ECT0, y)), "w1")  # completes with x + y only
    hw.send(b"XX" + wrong[2:], "w0")
    hw.send(enc(Packet(2, 0, 0, 0, 4, 0, 40, 0, ECT0, x)), "w0")
    out = hw.run()
    assert [o.event for o in out] == [
        "codec_bad_key",
        "ok",
        "codec_bad_key",
        "ok",
        "codec_bad_magic",
        "unknown_job",
    ]
    assert hw.stats.bad_key_drops == 2
    ((dests, datagram, _),) = out[3].emitted
    result = codec.decode(datagram, keys={1: KEY})
    assert set(dests) == {"w0", "w1"} and result.payload[:2].tolist() == [5.0, 10.0]


def test_share_recheck_uses_the_room_before_the_ack_and_a_slot_freed_by_it():
    """A new sequence number over the share takes its ack first and is re-checked against
    the room computed *before* the ack (the core's rule), although the floor advance
    shrank the limit; when every slot was in use before the ack, the slot it allocates is
    one the ack freed. (8 slots; job 1's tree holds 5 over a target of 4, job 2's tree 3.)"""
    core = Accelerator(CFG.slots, CFG.payload_elems)
    hw = HwAccelerator(CFG)
    hw.set_job_key(1, KEY)
    hw.set_job_key(2, KEY)
    x = vec(1.0, 2.0)[:2]
    steps = [("install", 1, ("w0",))]
    steps += [(Packet(1, 0, s, 0, 2, 0, 40, 0, ECT0, x), "w0") for s in range(6)]  # slots 0-5, partials up
    steps += [(Packet(1, 0, 1, 0, 0, FLAG_ACK, 40, 1, ECT0), "w0"), ("install", 2, ("w1", "w2"))]  # frees seq 0
    # job 2 fills its 3 slots (slot 0 among them): every slot is in use
    steps += [(Packet(2, 0, s, 0, 2, 0, 40, a, ECT0, x), "w1") for s, a in ((0, 0), (1, 0), (2, 2))]
    steps += [
        (Packet(1, 0, 6, 0, 2, 0, 40, 3, ECT0, x), "w0"),  # room 5 - 1 = 4 > used 3 after the ack: taken
        (Packet(2, 0, 0, 0, 2, 0, 40, 0, ECT0, vec(3.0, 4.0)[:2]), "w2"),  # job 2's slot 0 intact: partial up
    ]
    want = []
    for step in steps:
        if step[0] == "install":
            for acc in (core, hw):
                acc.install_tree(step[1], 0, step[2], "up")
            continue
        p, frm = step
        hw.send(enc(p), frm, p.ecn)
        want.append(([(set(d), enc(q), q.ecn) for d, q in core.receive(p, frm)], core.drops.copy()))
    got = hw.run()
    assert not sum(want[-1][1].values())  # the core took every datagram
    for (w, _), g in zip(want, got, strict=True):
        assert g.event == "ok" and [(set(d), b, e) for d, b, e in g.emitted] == w
