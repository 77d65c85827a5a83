"""The beat pipeline of the aggregation datapath: slot memory, binary32 lanes, key
trailer and output FIFO.

Contract: :func:`build_beat_pipeline` adds to the datapath's module ``m`` the part that
moves payload beats once the header FSM (:mod:`panama.hw.header_fsm`) has decided a
packet, and returns its :class:`BeatPipeline`. Per cycle the FSM may issue one beat
(:class:`IssuePort`); the beat reads row ``slot * beats_per_slot + beat`` of the slot
memory (BRAM, one ``width``-bit row per beat), goes through ``lanes``
:class:`~panama.hw.fp32.Fp32Adder` (add, copy incoming, or re-emit stored, per the packet's
``op``; beat 0's header words always copy the emitted header ``beat0``), is written back
when ``wr``, and enters the output FIFO when ``emit``, with the words past the count
zeroed and the job's key trailer appended. It provides ``hazard`` (a beat of the
packet's slot is still between read and write port: a packet that reads its slot
waits), ``room_out`` (the FIFO can take a whole datagram more) and ``beat0``.
``dp`` is the :class:`~panama.hw.datapath.AggregationDatapath` (its configuration and
egress ports); the packet in flight (:class:`~panama.hw.datapath.Flight`), its header
and the tree table (the key trailer) are the datapath's records it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory

from panama.core.codec import HEADER_BYTES
from panama.hw.fp32 import LATENCY, OP_PASS_B, Fp32Adder
from panama.hw.ingress import max_beats
from panama.hw.layout import HEADER_WORDS, KEY_WORDS, MAGIC, VERSION

if TYPE_CHECKING:
    from panama.hw.datapath import AggregationDatapath, Flight, Header, TreeTable
    from panama.hw.layout import HwConfig

__all__ = ["BeatPipeline", "IssuePort", "build_beat_pipeline"]


@dataclass
class IssuePort:
    """Where the header FSM issues a packet's beats, one per cycle: ``valid``, ``data``,
    ``beat`` (its number in the packet), ``last``; ``beat_no`` counts the beats issued
    for the current packet (a register the FSM drives)."""

    valid: Signal
    data: Signal
    beat: Signal
    beat_no: Signal
    last: Signal


@dataclass
class BeatPipeline:
    """What the beat pipeline gives the header FSM: the issue port, ``hazard`` (a beat of
    the packet's slot is between read and write port), ``room_out`` (the output FIFO can
    take a whole datagram more) and ``beat0`` (beat 0 with the emitted header in words
    0..6)."""

    issue: IssuePort
    hazard: Signal
    room_out: Signal
    beat0: Value


def build_beat_pipeline(m: Module, dp: AggregationDatapath, tree: TreeTable, hdr: Header, pkt: Flight) -> BeatPipeline:
    """Add the beat pipeline of the packet in flight ``pkt`` to ``m``."""
    cfg = dp.cfg
    mem = Memory(shape=cfg.width, depth=cfg.slots * cfg.beats_per_slot, init=[])
    m.submodules.mem = mem
    rd = mem.read_port()
    wp = mem.write_port()
    issue, side0 = _issue(m, cfg, tree, pkt, rd, wp)
    pipe, result = _lanes(m, cfg, issue, rd, side0)
    fifo, fifo_depth = _write_back_and_egress(m, dp, pipe[-1], result, wp)
    hazard, room_out = _hazard_and_room(m, cfg, pkt, pipe, fifo, fifo_depth)
    return BeatPipeline(issue, hazard, room_out, _emitted_header(tree, hdr, pkt))


def _issue(m: Module, cfg: HwConfig, tree: TreeTable, pkt: Flight, rd, wp) -> tuple[IssuePort, Signal]:
    """The issue port, the beat's slot-memory read, and its side-band word (what the later
    stages need of the packet): ``(port, side-band word)``."""
    W, LN, NP = cfg.width, cfg.lanes, cfg.ports
    BPS = cfg.beats_per_slot
    iss_valid = Signal()
    iss_data = Signal(W)
    iss_beat = Signal(range(max(2, 1 << 11)))
    beat_no = Signal(range(max(2, 1 << 11)))  # beats issued for the current packet
    m.d.comb += rd.addr.eq(pkt.slot * BPS + iss_beat)
    sbits = len(pkt.slot)
    # valid op wr emit last beat0 dests ecn words key addr slot
    side_w = 1 + 2 + 1 + 1 + 1 + 1 + NP + 2 + 8 + 64 + len(wp.addr) + sbits
    side0 = Signal(side_w)
    words_left = Signal(signed(20))
    m.d.comb += words_left.eq(HEADER_WORDS + pkt.e_count)
    rel = Signal(signed(20))
    m.d.comb += rel.eq(words_left - iss_beat * LN)
    # lanes below nwords carry data; lanes nwords, nwords+1 the key trailer (clipped to [-2, lanes])
    nwords = Signal(signed(8))
    m.d.comb += nwords.eq(Mux(rel > LN, LN, Mux(rel < -2, -2, rel)))
    iss_last = Signal()
    # the last beat of a datagram may hold only the key trailer, past the slot's rows: never written
    m.d.comb += side0.eq(
        Cat(
            iss_valid,
            pkt.op,
            pkt.wr & (iss_beat < BPS),
            pkt.emit,
            iss_last,
            iss_beat == 0,
            pkt.e_dests,
            pkt.e_ecn,
            nwords,
            tree.keylo[pkt.tree],
            tree.keyhi[pkt.tree],
            (pkt.slot * BPS + iss_beat)[: len(wp.addr)],
            pkt.slot,
        )
    )
    return IssuePort(iss_valid, iss_data, iss_beat, beat_no, iss_last), side0


def _lanes(m: Module, cfg: HwConfig, issue: IssuePort, rd, side0: Signal) -> tuple[list[Signal], Cat]:
    """The binary32 lanes, and the side-band word delayed alongside them: ``(pipe, result)``,
    ``pipe[-1]`` the side-band word in step with ``result``."""
    W, LN = cfg.width, cfg.lanes
    side_w = len(side0)
    p1_side = Signal(side_w)
    p1_data = Signal(W)
    m.d.sync += [p1_side.eq(side0), p1_data.eq(issue.data)]
    pipe = [p1_side]
    for i in range(LATENCY):
        nxt = Signal(side_w, name=f"pside{i}")
        m.d.sync += nxt.eq(pipe[-1])
        pipe.append(nxt)
    adders = []
    p1_op = p1_side[1:3]
    p1_beat0 = p1_side[6]
    for lane in range(LN):
        add = Fp32Adder()
        m.submodules[f"add{lane}"] = add
        adders.append(add)
        lane_op = Mux(p1_beat0 & (lane < HEADER_WORDS), OP_PASS_B, p1_op) if lane < HEADER_WORDS else p1_op
        m.d.comb += [
            add.a.eq(rd.data[32 * lane : 32 * lane + 32]),
            add.b.eq(p1_data[32 * lane : 32 * lane + 32]),
            add.op.eq(lane_op),
            add.valid.eq(p1_side[0]),
        ]
    return pipe, Cat(a.result for a in adders)


def _write_back_and_egress(m: Module, dp: AggregationDatapath, o_side: Signal, result, wp) -> tuple:
    """Write the lanes' result back to slot memory; mask the words past the count, append the
    key trailer and queue emitted beats in the output FIFO on the egress ports: ``(fifo, depth)``."""
    cfg = dp.cfg
    W, LN, NP = cfg.width, cfg.lanes, cfg.ports
    mbeats = max_beats(cfg)
    o_valid, o_wr, o_emit, o_last = o_side[0], o_side[3], o_side[4], o_side[5]
    o_dests = o_side[7 : 7 + NP]
    o_ecn = o_side[7 + NP : 9 + NP]
    o_words = o_side[9 + NP : 17 + NP]
    o_key = o_side[17 + NP : 81 + NP]
    o_addr = o_side[81 + NP : 81 + NP + len(wp.addr)]
    m.d.comb += [wp.addr.eq(o_addr), wp.data.eq(result), wp.en.eq(Mux(o_valid & o_wr, (1 << len(wp.en)) - 1, 0))]
    key_hi = Cat(o_key[56:64], o_key[48:56], o_key[40:48], o_key[32:40])  # big-endian on the wire
    key_lo = Cat(o_key[24:32], o_key[16:24], o_key[8:16], o_key[0:8])
    o_rel = o_words.as_signed()
    lanes_out = []
    for lane in range(LN):
        word = result[32 * lane : 32 * lane + 32]
        val = Mux(lane < o_rel, word, 0)
        if KEY_WORDS:
            val = Mux(o_rel == lane, key_hi, Mux(o_rel + 1 == lane, key_lo, val))
        lanes_out.append(val)
    masked = Cat(*lanes_out)
    fifo_depth = 2 * mbeats + LATENCY + 8
    fifo = SyncFIFOBuffered(width=W + 1 + NP + 2, depth=fifo_depth)
    m.submodules.fifo = fifo
    m.d.comb += [
        fifo.w_data.eq(Cat(masked, o_last, o_dests, o_ecn)),
        fifo.w_en.eq(o_valid & o_emit),
        dp.out_data.eq(fifo.r_data[:W]),
        dp.out_last.eq(fifo.r_data[W]),
        dp.out_dests.eq(fifo.r_data[W + 1 : W + 1 + NP]),
        dp.out_ecn.eq(fifo.r_data[W + 1 + NP :]),
        dp.out_valid.eq(fifo.r_rdy),
        fifo.r_en.eq(dp.out_ready),
    ]
    return fifo, fifo_depth


def _hazard_and_room(m: Module, cfg: HwConfig, pkt: Flight, pipe, fifo, fifo_depth: int) -> tuple[Signal, Signal]:
    """``(hazard, room_out)``: a beat of the packet's slot is in flight; the FIFO has room."""
    sbits = len(pkt.slot)
    mbeats = max_beats(cfg)
    # Read-after-write hazard: a packet that reads its slot waits while beats of that
    # slot are still between the read port and the write port. The beats carry their slot
    # number: an equality of a few bits (comparing row addresses against the slot's row
    # range, w_s * BPS <= addr < w_s * BPS + BPS, was the critical path on ECP5).
    hazard = Signal()
    m.d.comb += hazard.eq(Cat(sg[0] & sg[3] & (sg[-sbits:] == pkt.slot) for sg in pipe).any())
    room_out = Signal()
    m.d.comb += room_out.eq(fifo.level <= fifo_depth - (mbeats + LATENCY + 4))
    return hazard, room_out


def _emitted_header(tree: TreeTable, hdr: Header, pkt: Flight) -> Value:
    """The emitted header in the codec layout, replacing words 0..6 of beat 0."""

    def be_bytes(value, n):
        return [value[8 * (n - 1 - k) : 8 * (n - k)] for k in range(n)]

    e_hdr = Cat(
        *be_bytes(Const(MAGIC, 16), 2),
        Const(VERSION, 8),
        pkt.e_flags,
        *be_bytes(tree.job[pkt.tree], 4),
        *be_bytes(tree.tid[pkt.tree], 2),
        *be_bytes(pkt.e_cap, 2),
        *be_bytes(hdr.gen, 4),
        *be_bytes(pkt.e_seq, 4),
        *be_bytes(pkt.e_ack, 4),
        *be_bytes(pkt.e_count, 2),
        Const(0, 16),
    )
    return Cat(e_hdr, hdr.beat[HEADER_BYTES * 8 :])
