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
(header FSM), in that order, sharing the internal signals through one namespace
(``st``); the configuration, field and event encodings are in :mod:`panama.hw.layout`,
the ingress buffer in :mod:`panama.hw.ingress`, the adders in :mod:`panama.hw.fp32`.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Elaboratable, Module, Signal

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

__all__ = ["AggregationDatapath"]


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
        # the internal signals the parts share: tables, parsed header, lookup, packet in flight
        st = SimpleNamespace()
        _tree_table(self.cfg, st)
        _slot_table(self.cfg, st)
        _ingress(m, self, st)
        _header_parse(m, self, st)
        _lookup(m, self.cfg, st)
        _packet_in_flight(m, self, st)
        build_beat_pipeline(m, self, st)
        build_control(m, self, st)
        build_header_fsm(m, self, st)
        return m


def _table(name: str, width: int, n: int, reset: int = 0) -> Array:
    """``n`` registers ``name0``, ``name1``, ... of ``width`` bits, indexable by a signal."""
    return Array(Signal(width, name=f"{name}{i}", init=reset) for i in range(n))


def _tree_table(cfg: HwConfig, st: SimpleNamespace) -> None:
    """The tree table: ``max_trees`` entries; per-child fields are indexed by ``Cat(child, tree)``."""
    T, C, S, NP = cfg.max_trees, cfg.max_children, cfg.slots, cfg.ports
    cbits, tbits, sbits, pbits = _bits_for(C), _bits_for(T), _bits_for(S), _bits_for(NP)
    TC = (1 << tbits) * (1 << cbits)  # (tree, child) arrays indexed by Cat(child, tree)
    st.t_valid = _table("t_valid", 1, T)
    st.t_job = _table("t_job", 32, T)
    st.t_tid = _table("t_tid", 16, T)
    st.t_nch = _table("t_nch", cbits + 1, T)
    st.t_chport = _table("t_chport", pbits, TC)  # index Cat(child, tree)
    st.t_mask = _table("t_mask", NP, T)
    st.t_parent = _table("t_parent", pbits, T)
    st.t_root = _table("t_root", 1, T)
    st.t_floor = _table("t_floor", 32, T)
    st.t_ack = _table("t_ack", 32, TC)
    st.t_atfloor = _table("t_atfloor", cbits + 1, T)
    st.t_used = _table("t_used", sbits + 1, T)
    st.t_limit = _table("t_limit", sbits + 1, T)
    st.t_target = _table("t_target", sbits + 1, T)
    st.t_cap = _table("t_cap", 16, T)
    st.t_capsent = _table("t_capsent", 16, T)
    st.t_hmode = _table("t_hmode", 2, T)
    st.t_hseq = _table("t_hseq", 33, T)
    st.t_hcap = _table("t_hcap", 16, T)
    st.t_keyhi = _table("t_keyhi", 32, T)
    st.t_keylo = _table("t_keylo", 32, T)


def _slot_table(cfg: HwConfig, st: SimpleNamespace) -> None:
    """The slot table: ``slots`` entries, looked up by content on ``(tree, seq)``."""
    C, S = cfg.max_children, cfg.slots
    cbits, tbits = _bits_for(C), _bits_for(cfg.max_trees)
    st.s_valid = _table("s_valid", 1, S)
    st.s_tree = _table("s_tree", tbits, S)
    st.s_seq = _table("s_seq", 32, S)
    st.s_gen = _table("s_gen", 32, S)
    st.s_count = _table("s_count", 16, S)
    st.s_seen = _table("s_seen", C, S)
    st.s_nseen = _table("s_nseen", cbits + 1, S)
    st.s_ce = _table("s_ce", 1, S)
    st.s_retx = _table("s_retx", 1, S)  # a contribution (or the parent's result) was a retransmission
    st.s_cap = _table("s_cap", 16, S)
    st.s_state = _table("s_state", 2, S)


def _ingress(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """The ingress buffer (whole datagrams, key read) behind the ingress ports; ``busy``."""
    cfg = dp.cfg
    st.ing = IngressBuffer(cfg)
    m.submodules.ingress = st.ing
    m.d.comb += [
        st.ing.in_data.eq(dp.in_data),
        st.ing.in_valid.eq(dp.in_valid),
        st.ing.in_last.eq(dp.in_last),
        st.ing.in_port.eq(dp.in_port),
        st.ing.in_ecn.eq(dp.in_ecn),
        st.ing.in_length.eq(dp.in_length),
        dp.in_ready.eq(st.ing.in_ready),
    ]
    st.fsm_busy = Signal()
    m.d.comb += dp.busy.eq(st.fsm_busy | st.ing.busy)


def _header_parse(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """The header register (beat 0 and side-band of the datagram taken), its fields and the
    codec's checks (``st.mal``: the codec reason, 0 when well formed)."""
    W, pbits = dp.cfg.width, _bits_for(dp.cfg.ports)
    st.hbeat = Signal(W)
    st.hkey = Signal(64)
    st.hport = Signal(pbits)
    st.hecn = Signal(2)
    st.hlen = Signal(17)
    st.hlast = Signal()

    def byte(j):
        return st.hbeat[8 * j : 8 * j + 8]

    def be16(o):
        return Cat(byte(o + 1), byte(o))

    def be32(o):
        return Cat(byte(o + 3), byte(o + 2), byte(o + 1), byte(o))

    h_magic, h_version, st.h_flags = be16(0), byte(2), byte(3)
    st.h_job, st.h_tid, st.h_cap, st.h_gen = be32(4), be16(8), be16(10), be32(12)
    st.h_seq, st.h_ack, st.h_count, h_res = be32(16), be32(20), be16(24), be16(26)
    body = Signal(18)
    m.d.comb += body.eq(st.hlen - HEADER_BYTES - KEY_BYTES)
    need = Signal(18)
    m.d.comb += need.eq(st.h_count << 2)
    st.mal = Signal(range(len(EVENTS)))
    with m.If(st.hlen < HEADER_BYTES + KEY_BYTES):
        m.d.comb += st.mal.eq(EV["codec_short"])
    with m.Elif(h_magic != MAGIC):
        m.d.comb += st.mal.eq(EV["codec_bad_magic"])
    with m.Elif(h_version != VERSION):
        m.d.comb += st.mal.eq(EV["codec_bad_version"])
    with m.Elif((st.h_flags & ~KNOWN_FLAGS & 0xFF) != 0):
        m.d.comb += st.mal.eq(EV["codec_unknown_flags"])
    with m.Elif(h_res != 0):
        m.d.comb += st.mal.eq(EV["codec_reserved_nonzero"])
    with m.Elif(body < need):
        m.d.comb += st.mal.eq(EV["codec_count_mismatch"])
    with m.Elif(body > need):
        m.d.comb += st.mal.eq(EV["codec_trailing_bytes"])


def _lookup(m: Module, cfg: HwConfig, st: SimpleNamespace) -> None:
    """The combinational lookup of the packet's tree, child, slot and a free slot (and the
    key check), and the registers that hold it from LOOKUP on."""
    T, C, S = cfg.max_trees, cfg.max_children, cfg.slots
    cbits, tbits, sbits = _bits_for(C), _bits_for(T), _bits_for(S)
    h_job, h_tid = st.h_job, st.h_tid
    st.t_hit_v = Cat(st.t_valid[i] & (st.t_job[i] == h_job) & (st.t_tid[i] == h_tid) for i in range(T))
    st.job_known = Cat(st.t_valid[i] & (st.t_job[i] == h_job) for i in range(T)).any()
    # the codec's key check: a known job's datagram must carry the job's key (every entry of a
    # job holds the same key: the host writes the job's key into each of its trees)
    st.key_bad = Cat(
        st.t_valid[i] & (st.t_job[i] == h_job) & (Cat(st.t_keylo[i], st.t_keyhi[i]) != st.hkey) for i in range(T)
    ).any()
    st.t_idx = Signal(tbits)
    for i in reversed(range(T)):
        with m.If(st.t_hit_v[i]):
            m.d.comb += st.t_idx.eq(i)
    st.c_hit_v = Cat(
        (Const(c, cbits + 1) < st.t_nch[st.t_idx]) & (st.t_chport[Cat(Const(c, cbits), st.t_idx)] == st.hport)
        for c in range(C)
    )
    st.c_idx = Signal(cbits)
    for c in reversed(range(C)):
        with m.If(st.c_hit_v[c]):
            m.d.comb += st.c_idx.eq(c)
    st.s_hit_v = Cat(st.s_valid[s] & (st.s_tree[s] == st.t_idx) & (st.s_seq[s] == st.h_seq) for s in range(S))
    st.s_idx = Signal(sbits)
    for s in reversed(range(S)):
        with m.If(st.s_hit_v[s]):
            m.d.comb += st.s_idx.eq(s)
    st.f_idx = Signal(sbits)
    for s in reversed(range(S)):
        with m.If(~st.s_valid[s]):
            m.d.comb += st.f_idx.eq(s)

    st.l_mal = Signal.like(st.mal)
    st.l_badkey = Signal()
    st.l_thit = Signal()
    st.l_jobk = Signal()
    st.l_t = Signal(tbits)
    st.l_chit = Signal()
    st.l_c = Signal(cbits)
    st.l_shit = Signal()
    st.l_s = Signal(sbits)
    st.l_free = Signal(sbits)


def _packet_in_flight(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """The state of the packet in flight: its slot, verdict, emitted header and continuation."""
    C, NP, sbits = dp.cfg.max_children, dp.cfg.ports, _bits_for(dp.cfg.slots)
    st.w_s = Signal(sbits)  # the slot this packet works on
    st.ev = Signal.like(dp.event_code)
    st.op = Signal(2)
    st.wr = Signal()  # write the beats back to slot memory
    st.emit = Signal()
    st.e_flags = Signal(8)
    st.e_cap = Signal(16)
    st.e_ack = Signal(32)
    st.e_seq = Signal(32)
    st.e_count = Signal(16)
    st.e_dests = Signal(NP)
    st.e_ecn = Signal(2)
    st.cont = Signal(3)  # continuation after taking an ack
    st.f_new = Signal(32)
    st.room_limit = Signal(sbits + 1)  # the tree's limit before the ack of a share-limited packet
    st.moved = Signal()  # this packet raised the tree's floor

    st.T_ = st.l_t
    st.cur_ack_idx = Cat(st.l_c, st.l_t)
    st.bit = Signal(C)
    m.d.comb += st.bit.eq(Const(1, C) << st.l_c)
    st.port_mask = Signal(NP)
    m.d.comb += st.port_mask.eq(Const(1, NP) << st.hport)
    st.parent_mask = Signal(NP)
    m.d.comb += st.parent_mask.eq(Const(1, NP) << st.t_parent[st.T_])
