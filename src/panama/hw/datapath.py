"""The PANAMA aggregation datapath in Amaranth: one packet stream in, one out.

Interfaces (one clock domain, ``sync``)
---------------------------------------
*Ingress* ``in_data`` (``width`` bits), ``in_valid``/``in_ready``/``in_last`` beats of one
UDP payload (a PANAMA datagram): byte ``j`` of the datagram is bits ``8*(j % B)`` of beat
``j // B`` (``B = width/8``, AXI-stream byte order), so float ``i`` of the payload is
32-bit word ``7 + i`` of the packet. Side-band, valid with the first beat:
``in_port`` (the neighbour it came from: ingress port), ``in_ecn`` (IP ECN codepoint),
``in_length`` (UDP payload bytes, which the UDP/IP parser in front of us knows from
the headers before the payload arrives). Datagrams are stored whole in an ingress buffer
(:class:`~panama.hw.ingress.IngressBuffer`) before the header FSM takes them, so the key
trailer (the last 8 bytes) is known at the header decision.

*Egress* ``out_data``/``out_valid``/``out_ready``/``out_last`` in the same layout;
``out_dests`` (bitmask of ports: the children's multicast group, the parent, or the
one port that retransmitted) and ``out_ecn`` are valid on every beat.

*Events* ``event_valid``/``event_code``: one per ingress packet, the verdict
(:data:`EVENTS`: ``ok``, a drop reason of the core accelerator, or a codec reason,
``codec_bad_key`` included: a known job's datagram with another key is dropped before it
touches any state, as the daemons' decoder does). ``bad_key_drops`` counts those.

*Control* (host CPU) ``ctl_valid``/``ctl_ready``/``ctl_we``/``ctl_tree``/``ctl_field``/
``ctl_index``/``ctl_wdata``/``ctl_rdata``: register access to the tree table (fields
:data:`FIELDS`); ``host_req`` asks the host to redistribute spare memory (``_grow``)
and stalls ingress until it writes ``grow_done``.

Architecture (see docs/hardware.md for the pipeline diagram)
------------------------------------------------------------
An ingress buffer holds whole datagrams and reads their key trailers; a header FSM
(ACCEPT -> LOOKUP -> DECIDE [-> FLOOR1 -> FLOOR2 [-> HOSTWAIT]] -> NEXT
-> START) makes every per-packet decision of the core accelerator against a tree table
(registers, ``max_trees`` entries) and a slot table (registers with a content-addressed
lookup on ``(tree, seq)``, ``slots`` entries); then the payload beats flow through a
beat pipeline: slot-memory read (BRAM, one ``width``-bit row per beat), ``lanes``
binary32 adders (add, copy incoming, or re-emit stored), write-back, and the output
FIFO. Beat 0's first seven words (the header) are replaced by the emitted header on
the way through, so an emitted packet is streamed straight out of the adders.

Files
-----
This module holds the interfaces, the tree and slot tables, the header parse and the
lookup; the other parts of ``elaborate`` are built by :mod:`panama.hw.beats` (beat
pipeline), :mod:`panama.hw.control` (control interface) and :mod:`panama.hw.header_fsm`
(header FSM), in that order, sharing the internal signals as typed records
(:class:`TreeTable`, :class:`SlotTable`, :class:`Header`, :class:`Lookup`,
:class:`Latched`, :class:`Flight`, the beat pipeline's
:class:`~panama.hw.beats.BeatPipeline`; all of them in :class:`Internals`): each
record is returned by the function that builds its signals, and each generator takes
the records it reads or drives; the configuration, field and event encodings are in :mod:`panama.hw.layout`,
the ingress buffer in :mod:`panama.hw.ingress`, the adders in :mod:`panama.hw.fp32`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from amaranth import Array, Cat, Const, Elaboratable, Module, Signal, Value

from panama.core.codec import HEADER_BYTES
from panama.core.packet import KNOWN_FLAGS
from panama.hw.beats import build_beat_pipeline
from panama.hw.control import build_control
from panama.hw.header_fsm import build_header_fsm
from panama.hw.ingress import IngressBuffer
from panama.hw.layout import (
    EV,
    EVENTS,
    FIELDS,
    KEY_BYTES,
    MAGIC,
    VERSION,
    HwConfig,
    _bits_for,
)

if TYPE_CHECKING:
    from panama.hw.beats import BeatPipeline

__all__ = ["AggregationDatapath", "Flight", "Header", "Internals", "Latched", "Lookup", "SlotTable", "TreeTable"]


class AggregationDatapath(Elaboratable):
    """The aggregation datapath of configuration ``cfg``: its ports are the signal attributes
    set in ``__init__`` (see the module docstring); ``elaborate`` builds the tables, header
    parse and lookup here, then the beat pipeline, the control interface and the header FSM."""

    def __init__(self, cfg: HwConfig = HwConfig()):
        self.cfg = cfg
        W, P = cfg.width, cfg.ports
        self.in_data = Signal(W)
        self.in_valid = Signal()
        self.in_ready = Signal()
        self.in_last = Signal()
        self.in_port = Signal(_bits_for(P))
        self.in_ecn = Signal(2)
        self.in_length = Signal(17)
        self.out_data = Signal(W)
        self.out_valid = Signal()
        self.out_ready = Signal()
        self.out_last = Signal()
        self.out_dests = Signal(P)
        self.out_ecn = Signal(2)
        self.event_valid = Signal()
        self.event_code = Signal(range(len(EVENTS)))
        self.event_emit = Signal()  # this packet emits one packet (in order on the egress)
        self.ctl_valid = Signal()
        self.ctl_ready = Signal()
        self.ctl_we = Signal()
        self.ctl_tree = Signal(_bits_for(cfg.max_trees))
        self.ctl_field = Signal(range(len(FIELDS)))
        self.ctl_index = Signal(_bits_for(cfg.max_children))
        self.ctl_wdata = Signal(33)
        self.ctl_rdata = Signal(33)
        self.host_req = Signal()
        self.busy = Signal()  # a packet is in the ingress buffer or not yet issued to the beat pipeline
        self.bad_key_drops = Signal(32)  # datagrams dropped for a wrong key trailer (wraps)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        tree = _tree_table(cfg)
        slots = _slot_table(cfg)
        ing, fsm_busy = _ingress(m, self)
        hdr = _header_parse(m, self)
        look = _lookup(m, cfg, tree, slots, hdr)
        lat = _latched(cfg, hdr)
        pkt = _packet_in_flight(m, self, fsm_busy, tree, hdr, lat)
        beats = build_beat_pipeline(m, self, tree, hdr, pkt)
        grow_done = build_control(m, self, tree, slots)
        parts = Internals(tree, slots, ing, hdr, look, lat, pkt, beats, grow_done)
        build_header_fsm(m, self, parts)
        return m


@dataclass
class TreeTable:
    """The tree table: ``max_trees`` entries of registers (one :class:`~amaranth.hdl.Array`
    per field, indexed by the tree's entry), written by the host through the control
    interface and by the header FSM. ``chport`` and ``ack`` are per child, indexed by
    ``Cat(child, tree)``. Hold mode, sequence and cap (``hmode``, ``hseq``, ``hcap``) are
    the core's share hold; ``keyhi``/``keylo`` the job's key trailer."""

    valid: Array
    job: Array
    tid: Array
    nch: Array  # children
    chport: Array  # a child's port, index Cat(child, tree)
    mask: Array  # the children's ports as a bitmask (the results' multicast group)
    parent: Array
    root: Array
    floor: Array
    ack: Array  # a child's ack, index Cat(child, tree)
    atfloor: Array  # children whose ack equals the floor
    used: Array  # slots held
    limit: Array
    target: Array
    cap: Array
    capsent: Array
    hmode: Array
    hseq: Array
    hcap: Array
    keyhi: Array
    keylo: Array


@dataclass
class SlotTable:
    """The slot table: ``slots`` entries of registers (one Array per field, indexed by the
    slot), looked up by content on ``(tree, seq)``; the slot's sum is in the beat
    pipeline's slot memory."""

    valid: Array
    tree: Array
    seq: Array
    gen: Array
    count: Array
    seen: Array  # the children that contributed, a bitmask
    nseen: Array
    ce: Array
    retx: Array  # a contribution (or the parent's result) was a retransmission
    cap: Array
    state: Array  # S_FREE, S_AGG, S_PARTIAL or S_RESULT


@dataclass
class Header:
    """The datagram taken by the header FSM: its registers (beat 0 and the side-band),
    the header fields read from ``beat`` (big-endian slices, no registers of their own)
    and the codec's verdict on it (``mal``: the codec reason, 0 when well formed)."""

    beat: Signal  # beat 0 of the datagram
    key: Signal  # the key trailer, read by the ingress buffer
    port: Signal
    ecn: Signal
    length: Signal
    last: Signal  # beat 0 is the last beat
    flags: Value
    job: Value
    tid: Value
    cap: Value
    gen: Value
    seq: Value
    ack: Value
    count: Value
    mal: Signal


@dataclass
class Lookup:
    """The combinational lookup of the taken datagram against the tables: the per-entry hit
    vectors and the first hit's index of its tree (``t_*``), child (``c_*``) and slot
    (``s_*``), the first free slot, whether its job is known and whether its key is bad."""

    t_hit: Value
    job_known: Value
    key_bad: Value
    t_idx: Signal
    c_hit: Value
    c_idx: Signal
    s_hit: Value
    s_idx: Signal
    f_idx: Signal


@dataclass
class Latched:
    """The :class:`Lookup` registered in state LOOKUP (and the codec verdict), read from
    DECIDE on: hit flags and indices of tree, child and slot, the free slot."""

    mal: Signal
    badkey: Signal
    thit: Signal
    jobk: Signal  # the job is known
    t: Signal
    chit: Signal
    c: Signal
    shit: Signal
    s: Signal
    free: Signal


@dataclass
class Flight:
    """The packet in flight through the header FSM: its slot, verdict, what its beats do
    (``op``, ``wr``, ``emit``), the header it emits (``e_*``), the continuation after an
    ack, the floor scratch, and the masks derived from its tree and child. ``busy`` is
    driven by the FSM while it holds a packet (made by :func:`_ingress`, whose statement
    ORs it into the port ``busy``)."""

    busy: Signal
    slot: Signal  # the slot this packet works on
    ev: Signal  # the verdict (event code)
    op: Signal  # the adders' operation
    wr: Signal  # write the beats back to slot memory
    emit: Signal
    e_flags: Signal
    e_cap: Signal
    e_ack: Signal
    e_seq: Signal
    e_count: Signal
    e_dests: Signal
    e_ecn: Signal
    cont: Signal  # continuation after taking an ack
    f_new: Signal  # the new floor (FLOOR1 -> FLOOR2)
    room_limit: Signal  # the tree's limit before the ack of a share-limited packet
    moved: Signal  # this packet raised the tree's floor
    tree: Signal  # the packet's tree entry (the latched lookup's)
    ack_idx: Value  # Cat(child, tree): the child's ack in the tree table
    bit: Signal  # the child's bit
    port_mask: Signal  # the ingress port's bit
    parent_mask: Signal  # the tree's parent's bit


@dataclass
class Internals:
    """Every internal part of the datapath, for the header FSM, which reads or drives all
    of them: the tables, the ingress buffer, the taken header, its lookup (combinational
    and latched), the packet in flight, the beat pipeline and the host's ``grow_done``."""

    tree: TreeTable
    slots: SlotTable
    ing: IngressBuffer
    hdr: Header
    look: Lookup
    lat: Latched
    pkt: Flight
    beats: BeatPipeline
    grow_done: Signal


def _table(name: str, width: int, n: int, reset: int = 0) -> Array:
    """``n`` registers ``name0``, ``name1``, ... of ``width`` bits, indexable by a signal."""
    return Array(Signal(width, name=f"{name}{i}", init=reset) for i in range(n))


def _tree_table(cfg: HwConfig) -> TreeTable:
    """The tree table: ``max_trees`` entries; per-child fields are indexed by ``Cat(child, tree)``."""
    T, C, S, NP = cfg.max_trees, cfg.max_children, cfg.slots, cfg.ports
    cbits, tbits, sbits, pbits = _bits_for(C), _bits_for(T), _bits_for(S), _bits_for(NP)
    TC = (1 << tbits) * (1 << cbits)  # (tree, child) arrays indexed by Cat(child, tree)
    return TreeTable(
        valid=_table("t_valid", 1, T),
        job=_table("t_job", 32, T),
        tid=_table("t_tid", 16, T),
        nch=_table("t_nch", cbits + 1, T),
        chport=_table("t_chport", pbits, TC),
        mask=_table("t_mask", NP, T),
        parent=_table("t_parent", pbits, T),
        root=_table("t_root", 1, T),
        floor=_table("t_floor", 32, T),
        ack=_table("t_ack", 32, TC),
        atfloor=_table("t_atfloor", cbits + 1, T),
        used=_table("t_used", sbits + 1, T),
        limit=_table("t_limit", sbits + 1, T),
        target=_table("t_target", sbits + 1, T),
        cap=_table("t_cap", 16, T),
        capsent=_table("t_capsent", 16, T),
        hmode=_table("t_hmode", 2, T),
        hseq=_table("t_hseq", 33, T),
        hcap=_table("t_hcap", 16, T),
        keyhi=_table("t_keyhi", 32, T),
        keylo=_table("t_keylo", 32, T),
    )


def _slot_table(cfg: HwConfig) -> SlotTable:
    """The slot table: ``slots`` entries, looked up by content on ``(tree, seq)``."""
    C, S = cfg.max_children, cfg.slots
    cbits, tbits = _bits_for(C), _bits_for(cfg.max_trees)
    return SlotTable(
        valid=_table("s_valid", 1, S),
        tree=_table("s_tree", tbits, S),
        seq=_table("s_seq", 32, S),
        gen=_table("s_gen", 32, S),
        count=_table("s_count", 16, S),
        seen=_table("s_seen", C, S),
        nseen=_table("s_nseen", cbits + 1, S),
        ce=_table("s_ce", 1, S),
        retx=_table("s_retx", 1, S),
        cap=_table("s_cap", 16, S),
        state=_table("s_state", 2, S),
    )


def _ingress(m: Module, dp: AggregationDatapath) -> tuple[IngressBuffer, Signal]:
    """The ingress buffer (whole datagrams, key read) behind the ingress ports, and the header
    FSM's busy flag (the port ``busy`` is either's): ``(buffer, fsm_busy)``."""
    ing = IngressBuffer(dp.cfg)
    m.submodules.ingress = ing
    m.d.comb += [
        ing.in_data.eq(dp.in_data),
        ing.in_valid.eq(dp.in_valid),
        ing.in_last.eq(dp.in_last),
        ing.in_port.eq(dp.in_port),
        ing.in_ecn.eq(dp.in_ecn),
        ing.in_length.eq(dp.in_length),
        dp.in_ready.eq(ing.in_ready),
    ]
    fsm_busy = Signal()
    m.d.comb += dp.busy.eq(fsm_busy | ing.busy)
    return ing, fsm_busy


def _header_parse(m: Module, dp: AggregationDatapath) -> Header:
    """The header register (beat 0 and side-band of the datagram taken), its fields and the
    codec's checks."""
    W, pbits = dp.cfg.width, _bits_for(dp.cfg.ports)
    hbeat = Signal(W)
    hkey = Signal(64)
    hport = Signal(pbits)
    hecn = Signal(2)
    hlen = Signal(17)
    hlast = Signal()

    def byte(j):
        return hbeat[8 * j : 8 * j + 8]

    def be16(o):
        return Cat(byte(o + 1), byte(o))

    def be32(o):
        return Cat(byte(o + 3), byte(o + 2), byte(o + 1), byte(o))

    h_magic, h_version, h_flags = be16(0), byte(2), byte(3)
    h_job, h_tid, h_cap, h_gen = be32(4), be16(8), be16(10), be32(12)
    h_seq, h_ack, h_count, h_res = be32(16), be32(20), be16(24), be16(26)
    body = Signal(18)
    m.d.comb += body.eq(hlen - HEADER_BYTES - KEY_BYTES)
    need = Signal(18)
    m.d.comb += need.eq(h_count << 2)
    mal = Signal(range(len(EVENTS)))
    with m.If(hlen < HEADER_BYTES + KEY_BYTES):
        m.d.comb += mal.eq(EV["codec_short"])
    with m.Elif(h_magic != MAGIC):
        m.d.comb += mal.eq(EV["codec_bad_magic"])
    with m.Elif(h_version != VERSION):
        m.d.comb += mal.eq(EV["codec_bad_version"])
    with m.Elif((h_flags & ~KNOWN_FLAGS & 0xFF) != 0):
        m.d.comb += mal.eq(EV["codec_unknown_flags"])
    with m.Elif(h_res != 0):
        m.d.comb += mal.eq(EV["codec_reserved_nonzero"])
    with m.Elif(body < need):
        m.d.comb += mal.eq(EV["codec_count_mismatch"])
    with m.Elif(body > need):
        m.d.comb += mal.eq(EV["codec_trailing_bytes"])
    return Header(
        hbeat, hkey, hport, hecn, hlen, hlast, h_flags, h_job, h_tid, h_cap, h_gen, h_seq, h_ack, h_count, mal
    )


def _lookup(m: Module, cfg: HwConfig, tree: TreeTable, slots: SlotTable, hdr: Header) -> Lookup:
    """The combinational lookup of the packet's tree, child, slot and a free slot (and the
    key check)."""
    T, C, S = cfg.max_trees, cfg.max_children, cfg.slots
    cbits, tbits, sbits = _bits_for(C), _bits_for(T), _bits_for(S)
    h_job, h_tid = hdr.job, hdr.tid
    t_hit_v = Cat(tree.valid[i] & (tree.job[i] == h_job) & (tree.tid[i] == h_tid) for i in range(T))
    job_known = Cat(tree.valid[i] & (tree.job[i] == h_job) for i in range(T)).any()
    # the codec's key check: a known job's datagram must carry the job's key (every entry of a
    # job holds the same key: the host writes the job's key into each of its trees)
    key_bad = Cat(
        tree.valid[i] & (tree.job[i] == h_job) & (Cat(tree.keylo[i], tree.keyhi[i]) != hdr.key) for i in range(T)
    ).any()
    t_idx = Signal(tbits)
    for i in reversed(range(T)):
        with m.If(t_hit_v[i]):
            m.d.comb += t_idx.eq(i)
    c_hit_v = Cat(
        (Const(c, cbits + 1) < tree.nch[t_idx]) & (tree.chport[Cat(Const(c, cbits), t_idx)] == hdr.port)
        for c in range(C)
    )
    c_idx = Signal(cbits)
    for c in reversed(range(C)):
        with m.If(c_hit_v[c]):
            m.d.comb += c_idx.eq(c)
    s_hit_v = Cat(slots.valid[s] & (slots.tree[s] == t_idx) & (slots.seq[s] == hdr.seq) for s in range(S))
    s_idx = Signal(sbits)
    for s in reversed(range(S)):
        with m.If(s_hit_v[s]):
            m.d.comb += s_idx.eq(s)
    f_idx = Signal(sbits)
    for s in reversed(range(S)):
        with m.If(~slots.valid[s]):
            m.d.comb += f_idx.eq(s)
    return Lookup(t_hit_v, job_known, key_bad, t_idx, c_hit_v, c_idx, s_hit_v, s_idx, f_idx)


def _latched(cfg: HwConfig, hdr: Header) -> Latched:
    """The registers that hold the lookup from LOOKUP on (the header FSM writes them)."""
    cbits, tbits, sbits = _bits_for(cfg.max_children), _bits_for(cfg.max_trees), _bits_for(cfg.slots)
    l_mal = Signal.like(hdr.mal)
    l_badkey = Signal()
    l_thit = Signal()
    l_jobk = Signal()
    l_t = Signal(tbits)
    l_chit = Signal()
    l_c = Signal(cbits)
    l_shit = Signal()
    l_s = Signal(sbits)
    l_free = Signal(sbits)
    return Latched(l_mal, l_badkey, l_thit, l_jobk, l_t, l_chit, l_c, l_shit, l_s, l_free)


def _packet_in_flight(
    m: Module, dp: AggregationDatapath, fsm_busy: Signal, tree: TreeTable, hdr: Header, lat: Latched
) -> Flight:
    """The state of the packet in flight: its slot, verdict, emitted header and continuation
    (with ``fsm_busy``, made by :func:`_ingress`)."""
    C, NP, sbits = dp.cfg.max_children, dp.cfg.ports, _bits_for(dp.cfg.slots)
    w_s = Signal(sbits)
    ev = Signal.like(dp.event_code)
    op = Signal(2)
    wr = Signal()
    emit = Signal()
    e_flags = Signal(8)
    e_cap = Signal(16)
    e_ack = Signal(32)
    e_seq = Signal(32)
    e_count = Signal(16)
    e_dests = Signal(NP)
    e_ecn = Signal(2)
    cont = Signal(3)
    f_new = Signal(32)
    room_limit = Signal(sbits + 1)
    moved = Signal()

    bit = Signal(C)
    m.d.comb += bit.eq(Const(1, C) << lat.c)
    port_mask = Signal(NP)
    m.d.comb += port_mask.eq(Const(1, NP) << hdr.port)
    parent_mask = Signal(NP)
    m.d.comb += parent_mask.eq(Const(1, NP) << tree.parent[lat.t])
    return Flight(
        fsm_busy,
        w_s,
        ev,
        op,
        wr,
        emit,
        e_flags,
        e_cap,
        e_ack,
        e_seq,
        e_count,
        e_dests,
        e_ecn,
        cont,
        f_new,
        room_limit,
        moved,
        tree=lat.t,
        ack_idx=Cat(lat.c, lat.t),
        bit=bit,
        port_mask=port_mask,
        parent_mask=parent_mask,
    )
