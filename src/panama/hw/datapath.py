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
        cfg = self.cfg
        m = Module()
        W, T, C, S, NP = cfg.width, cfg.max_trees, cfg.max_children, cfg.slots, cfg.ports
        cbits = _bits_for(C)
        tbits = _bits_for(T)
        sbits = _bits_for(S)
        pbits = _bits_for(NP)
        # the internal signals the parts share: tables, parsed header, lookup, packet in flight
        st = SimpleNamespace()
        TC = (1 << tbits) * (1 << cbits)  # (tree, child) arrays indexed by Cat(child, tree)

        # ------------------------------------------------------------ tree table
        def tarr(name, width, n=T, reset=0):
            return Array(Signal(width, name=f"{name}{i}", init=reset) for i in range(n))

        st.t_valid = tarr("t_valid", 1)
        st.t_job = tarr("t_job", 32)
        st.t_tid = tarr("t_tid", 16)
        st.t_nch = tarr("t_nch", cbits + 1)
        st.t_chport = tarr("t_chport", pbits, TC)  # index Cat(child, tree)
        st.t_mask = tarr("t_mask", NP)
        st.t_parent = tarr("t_parent", pbits)
        st.t_root = tarr("t_root", 1)
        st.t_floor = tarr("t_floor", 32)
        st.t_ack = tarr("t_ack", 32, TC)
        st.t_atfloor = tarr("t_atfloor", cbits + 1)
        st.t_used = tarr("t_used", sbits + 1)
        st.t_limit = tarr("t_limit", sbits + 1)
        st.t_target = tarr("t_target", sbits + 1)
        st.t_cap = tarr("t_cap", 16)
        st.t_capsent = tarr("t_capsent", 16)
        st.t_hmode = tarr("t_hmode", 2)
        st.t_hseq = tarr("t_hseq", 33)
        st.t_hcap = tarr("t_hcap", 16)
        st.t_keyhi = tarr("t_keyhi", 32)
        st.t_keylo = tarr("t_keylo", 32)

        # ------------------------------------------------------------ slot table
        st.s_valid = tarr("s_valid", 1, S)
        st.s_tree = tarr("s_tree", tbits, S)
        st.s_seq = tarr("s_seq", 32, S)
        st.s_gen = tarr("s_gen", 32, S)
        st.s_count = tarr("s_count", 16, S)
        st.s_seen = tarr("s_seen", C, S)
        st.s_nseen = tarr("s_nseen", cbits + 1, S)
        st.s_ce = tarr("s_ce", 1, S)
        st.s_retx = tarr("s_retx", 1, S)  # a contribution (or the parent's result) was a retransmission
        st.s_cap = tarr("s_cap", 16, S)
        st.s_state = tarr("s_state", 2, S)

        # ------------------------------------------------------------ ingress buffer (whole datagrams, key read)
        st.ing = IngressBuffer(cfg)
        m.submodules.ingress = st.ing
        m.d.comb += [
            st.ing.in_data.eq(self.in_data),
            st.ing.in_valid.eq(self.in_valid),
            st.ing.in_last.eq(self.in_last),
            st.ing.in_port.eq(self.in_port),
            st.ing.in_ecn.eq(self.in_ecn),
            st.ing.in_length.eq(self.in_length),
            self.in_ready.eq(st.ing.in_ready),
        ]
        st.fsm_busy = Signal()
        m.d.comb += self.busy.eq(st.fsm_busy | st.ing.busy)

        # ------------------------------------------------------------ header register and parse
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
        h_job, h_tid, st.h_cap, st.h_gen = be32(4), be16(8), be16(10), be32(12)
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

        # ------------------------------------------------------------ lookup (combinational, registered in LOOKUP)
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

        # ------------------------------------------------------------ state of the packet in flight
        st.w_s = Signal(sbits)  # the slot this packet works on
        st.ev = Signal.like(self.event_code)
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

        build_beat_pipeline(m, self, st)
        build_control(m, self, st)
        build_header_fsm(m, self, st)
        return m
