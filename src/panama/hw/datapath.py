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
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Elaboratable, Module, Mux, Signal, signed
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory

from panama.core import accelerator as core_acc
from panama.core import codec
from panama.core.codec import HEADER_BYTES
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, KNOWN_FLAGS
from panama.hw.fp32 import LATENCY, OP_ADD, OP_PASS_A, OP_PASS_B, Fp32Adder
from panama.hw.ingress import IngressBuffer, max_beats
from panama.hw.layout import (
    EV,
    EVENTS,
    FIELDS,
    HEADER_WORDS,
    HOLD_NONE,
    HOLD_SEQ,
    HOLD_WAIT_RESULT,
    KEY_BYTES,
    KEY_WORDS,
    MAGIC,
    S_AGG,
    S_FREE,
    S_PARTIAL,
    S_RESULT,
    VERSION,
    F,
    HwConfig,
    _bits_for,
)


class AggregationDatapath(Elaboratable):
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

    def elaborate(self, platform):  # noqa: C901 - one FSM, kept in one place on purpose
        cfg = self.cfg
        m = Module()
        W, LN, T, C, S, NP = cfg.width, cfg.lanes, cfg.max_trees, cfg.max_children, cfg.slots, cfg.ports
        BPS = cfg.beats_per_slot
        cbits = _bits_for(C)
        tbits = _bits_for(T)
        sbits = _bits_for(S)
        pbits = _bits_for(NP)
        mbeats = max_beats(cfg)
        TC = (1 << tbits) * (1 << cbits)  # (tree, child) arrays indexed by Cat(child, tree)

        # ------------------------------------------------------------ tree table
        def tarr(name, width, n=T, reset=0):
            return Array(Signal(width, name=f"{name}{i}", init=reset) for i in range(n))

        t_valid = tarr("t_valid", 1)
        t_job = tarr("t_job", 32)
        t_tid = tarr("t_tid", 16)
        t_nch = tarr("t_nch", cbits + 1)
        t_chport = tarr("t_chport", pbits, TC)  # index Cat(child, tree)
        t_mask = tarr("t_mask", NP)
        t_parent = tarr("t_parent", pbits)
        t_root = tarr("t_root", 1)
        t_floor = tarr("t_floor", 32)
        t_ack = tarr("t_ack", 32, TC)
        t_atfloor = tarr("t_atfloor", cbits + 1)
        t_used = tarr("t_used", sbits + 1)
        t_limit = tarr("t_limit", sbits + 1)
        t_target = tarr("t_target", sbits + 1)
        t_cap = tarr("t_cap", 16)
        t_capsent = tarr("t_capsent", 16)
        t_hmode = tarr("t_hmode", 2)
        t_hseq = tarr("t_hseq", 33)
        t_hcap = tarr("t_hcap", 16)
        t_keyhi = tarr("t_keyhi", 32)
        t_keylo = tarr("t_keylo", 32)

        # ------------------------------------------------------------ slot table
        s_valid = tarr("s_valid", 1, S)
        s_tree = tarr("s_tree", tbits, S)
        s_seq = tarr("s_seq", 32, S)
        s_gen = tarr("s_gen", 32, S)
        s_count = tarr("s_count", 16, S)
        s_seen = tarr("s_seen", C, S)
        s_nseen = tarr("s_nseen", cbits + 1, S)
        s_ce = tarr("s_ce", 1, S)
        s_retx = tarr("s_retx", 1, S)  # a contribution (or the parent's result) was a retransmission
        s_cap = tarr("s_cap", 16, S)
        s_state = tarr("s_state", 2, S)

        # ------------------------------------------------------------ ingress buffer (whole datagrams, key read)
        ing = IngressBuffer(cfg)
        m.submodules.ingress = ing
        m.d.comb += [
            ing.in_data.eq(self.in_data),
            ing.in_valid.eq(self.in_valid),
            ing.in_last.eq(self.in_last),
            ing.in_port.eq(self.in_port),
            ing.in_ecn.eq(self.in_ecn),
            ing.in_length.eq(self.in_length),
            self.in_ready.eq(ing.in_ready),
        ]
        fsm_busy = Signal()
        m.d.comb += self.busy.eq(fsm_busy | ing.busy)

        # ------------------------------------------------------------ header register and parse
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

        # ------------------------------------------------------------ lookup (combinational, registered in LOOKUP)
        t_hit_v = Cat(t_valid[i] & (t_job[i] == h_job) & (t_tid[i] == h_tid) for i in range(T))
        job_known = Cat(t_valid[i] & (t_job[i] == h_job) for i in range(T)).any()
        # the codec's key check: a known job's datagram must carry the job's key (every entry of a
        # job holds the same key: the host writes the job's key into each of its trees)
        key_bad = Cat(t_valid[i] & (t_job[i] == h_job) & (Cat(t_keylo[i], t_keyhi[i]) != hkey) for i in range(T)).any()
        t_idx = Signal(tbits)
        for i in reversed(range(T)):
            with m.If(t_hit_v[i]):
                m.d.comb += t_idx.eq(i)
        c_hit_v = Cat(
            (Const(c, cbits + 1) < t_nch[t_idx]) & (t_chport[Cat(Const(c, cbits), t_idx)] == hport) for c in range(C)
        )
        c_idx = Signal(cbits)
        for c in reversed(range(C)):
            with m.If(c_hit_v[c]):
                m.d.comb += c_idx.eq(c)
        s_hit_v = Cat(s_valid[s] & (s_tree[s] == t_idx) & (s_seq[s] == h_seq) for s in range(S))
        s_idx = Signal(sbits)
        for s in reversed(range(S)):
            with m.If(s_hit_v[s]):
                m.d.comb += s_idx.eq(s)
        f_idx = Signal(sbits)
        for s in reversed(range(S)):
            with m.If(~s_valid[s]):
                m.d.comb += f_idx.eq(s)

        l_mal = Signal.like(mal)
        l_badkey = Signal()
        l_thit = Signal()
        l_jobk = Signal()
        l_t = Signal(tbits)
        l_chit = Signal()
        l_c = Signal(cbits)
        l_shit = Signal()
        l_s = Signal(sbits)
        l_free = Signal(sbits)

        # ------------------------------------------------------------ state of the packet in flight
        w_s = Signal(sbits)  # the slot this packet works on
        ev = Signal.like(self.event_code)
        op = Signal(2)
        wr = Signal()  # write the beats back to slot memory
        emit = Signal()
        e_flags = Signal(8)
        e_cap = Signal(16)
        e_ack = Signal(32)
        e_seq = Signal(32)
        e_count = Signal(16)
        e_dests = Signal(NP)
        e_ecn = Signal(2)
        cont = Signal(3)  # continuation after taking an ack
        K_NONE, K_COMPLETE, K_RECHECK, K_DUPEMIT, K_ACKEMIT = range(5)
        f_new = Signal(32)
        room_limit = Signal(sbits + 1)  # the tree's limit before the ack of a share-limited packet
        moved = Signal()  # this packet raised the tree's floor

        T_ = l_t
        cur_ack_idx = Cat(l_c, l_t)
        bit = Signal(C)
        m.d.comb += bit.eq(Const(1, C) << l_c)
        port_mask = Signal(NP)
        m.d.comb += port_mask.eq(Const(1, NP) << hport)
        parent_mask = Signal(NP)
        m.d.comb += parent_mask.eq(Const(1, NP) << t_parent[T_])

        def take_ack(next_cont):
            """Statements of the core's _take_ack for (l_t, l_c, h_ack), then go on to next_cont."""
            old = t_ack[cur_ack_idx]
            with m.If((h_ack > old) & (old == t_floor[T_])):
                m.d.sync += [t_ack[cur_ack_idx].eq(h_ack), t_atfloor[T_].eq(t_atfloor[T_] - 1)]
                with m.If(t_atfloor[T_] == 1):
                    m.next = "FLOOR1"
                with m.Else():
                    m.next = "NEXT"
            with m.Else():
                with m.If(h_ack > old):
                    m.d.sync += t_ack[cur_ack_idx].eq(h_ack)
                m.next = "NEXT"
            m.d.sync += cont.eq(next_cont)

        def results_to(slot_cap, dests, ecn, ce, pop, retx):
            """The core's _results_to: header of a result and its side effects on the tree."""
            cap = Signal(16)
            m.d.comb += cap.eq(Mux(slot_cap < t_cap[T_], slot_cap, t_cap[T_]))
            m.d.sync += [
                emit.eq(1),
                op.eq(pop),
                e_flags.eq(Mux(ce, FLAG_RESULT | FLAG_ECE, FLAG_RESULT) | Mux(retx, FLAG_RETRANSMIT, 0)),
                e_cap.eq(cap),
                e_ack.eq(0),
                e_dests.eq(dests),
                e_ecn.eq(ecn),
            ]
            with m.If(cap > t_capsent[T_]):
                m.d.sync += t_capsent[T_].eq(cap)
            with m.If(t_hmode[T_] == HOLD_WAIT_RESULT):
                m.d.sync += [t_hmode[T_].eq(HOLD_SEQ), t_hseq[T_].eq(h_seq + t_hcap[T_])]

        def partial(flags, pop, floor):
            m.d.sync += [
                emit.eq(1),
                op.eq(pop),
                e_flags.eq(flags),
                e_cap.eq(s_cap[w_s]),
                e_ack.eq(floor),
                e_dests.eq(parent_mask),
                e_ecn.eq(Mux(s_ce[w_s], CE, ECT0)),
            ]

        def allocate(slot):
            m.d.sync += [
                s_valid[slot].eq(1),
                s_tree[slot].eq(T_),
                s_seq[slot].eq(h_seq),
                s_gen[slot].eq(h_gen),
                s_count[slot].eq(h_count),
                s_seen[slot].eq(bit),
                s_nseen[slot].eq(1),
                s_ce[slot].eq(hecn == CE),
                s_retx[slot].eq((h_flags & FLAG_RETRANSMIT) != 0),
                s_cap[slot].eq(Mux(h_cap < t_cap[T_], h_cap, t_cap[T_])),
                s_state[slot].eq(S_AGG),
                t_used[T_].eq(t_used[T_] + 1),
                w_s.eq(slot),
                op.eq(OP_PASS_B),
                wr.eq(1),
            ]

        # ------------------------------------------------------------ beat pipeline
        mem = Memory(shape=W, depth=S * BPS, init=[])
        m.submodules.mem = mem
        rd = mem.read_port()
        wp = mem.write_port()
        iss_valid = Signal()
        iss_data = Signal(W)
        iss_beat = Signal(range(max(2, 1 << 11)))
        beat_no = Signal(range(max(2, 1 << 11)))  # beats issued for the current packet
        m.d.comb += rd.addr.eq(w_s * BPS + iss_beat)
        side_w = (
            1 + 2 + 1 + 1 + 1 + 1 + NP + 2 + 8 + 64 + len(wp.addr)
        )  # valid op wr emit last beat0 dests ecn words key addr
        side0 = Signal(side_w)
        words_left = Signal(signed(20))
        m.d.comb += words_left.eq(HEADER_WORDS + e_count)
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
                op,
                wr & (iss_beat < BPS),
                emit,
                iss_last,
                iss_beat == 0,
                e_dests,
                e_ecn,
                nwords,
                t_keylo[l_t],
                t_keyhi[l_t],
                (w_s * BPS + iss_beat)[: len(wp.addr)],
            )
        )
        p1_side = Signal(side_w)
        p1_data = Signal(W)
        m.d.sync += [p1_side.eq(side0), p1_data.eq(iss_data)]
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
        o_side = pipe[-1]
        o_valid, o_wr, o_emit, o_last = o_side[0], o_side[3], o_side[4], o_side[5]
        o_dests = o_side[7 : 7 + NP]
        o_ecn = o_side[7 + NP : 9 + NP]
        o_words = o_side[9 + NP : 17 + NP]
        o_key = o_side[17 + NP : 81 + NP]
        o_addr = o_side[81 + NP :]
        result = Cat(a.result for a in adders)
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
            self.out_data.eq(fifo.r_data[:W]),
            self.out_last.eq(fifo.r_data[W]),
            self.out_dests.eq(fifo.r_data[W + 1 : W + 1 + NP]),
            self.out_ecn.eq(fifo.r_data[W + 1 + NP :]),
            self.out_valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.out_ready),
        ]
        # Read-after-write hazard: a packet that reads its slot waits while beats of that
        # slot are still between the read port and the write port.
        hazard = Signal()
        m.d.comb += hazard.eq(
            Cat(st[0] & st[3] & (st[81 + NP :] >= w_s * BPS) & (st[81 + NP :] < w_s * BPS + BPS) for st in pipe).any()
        )
        room_out = Signal()
        m.d.comb += room_out.eq(fifo.level <= fifo_depth - (mbeats + LATENCY + 4))

        # emitted header: the codec layout, replacing words 0..6 of beat 0
        def be_bytes(value, n):
            return [value[8 * (n - 1 - k) : 8 * (n - k)] for k in range(n)]

        e_hdr = Cat(
            *be_bytes(Const(MAGIC, 16), 2),
            Const(VERSION, 8),
            e_flags,
            *be_bytes(t_job[T_], 4),
            *be_bytes(t_tid[T_], 2),
            *be_bytes(e_cap, 2),
            *be_bytes(h_gen, 4),
            *be_bytes(e_seq, 4),
            *be_bytes(e_ack, 4),
            *be_bytes(e_count, 2),
            Const(0, 16),
        )
        beat0 = Cat(e_hdr, hbeat[HEADER_BYTES * 8 :])

        # ------------------------------------------------------------ control interface
        ct = self.ctl_tree
        cidx = Cat(self.ctl_index, ct)
        rsel = {
            "valid": t_valid[ct],
            "job_id": t_job[ct],
            "tree_id": t_tid[ct],
            "nchildren": t_nch[ct],
            "child_port": t_chport[cidx],
            "child_mask": t_mask[ct],
            "parent": t_parent[ct],
            "is_root": t_root[ct],
            "target": t_target[ct],
            "limit": t_limit[ct],
            "cap": t_cap[ct],
            "cap_sent": t_capsent[ct],
            "hold_mode": t_hmode[ct],
            "hold_seq": t_hseq[ct],
            "hold_cap": t_hcap[ct],
            "used": t_used[ct],
            "floor": t_floor[ct],
            "key_hi": t_keyhi[ct],
            "key_lo": t_keylo[ct],
        }
        with m.Switch(self.ctl_field):
            for name, sig in rsel.items():
                with m.Case(F[name]):
                    m.d.comb += self.ctl_rdata.eq(sig)
        wdat = self.ctl_wdata
        ctl_fire = self.ctl_valid & self.ctl_ready & self.ctl_we
        grow_done = Signal()
        with m.If(ctl_fire):
            with m.Switch(self.ctl_field):
                for name in (
                    "valid",
                    "job_id",
                    "tree_id",
                    "nchildren",
                    "child_mask",
                    "parent",
                    "is_root",
                    "target",
                    "limit",
                    "cap",
                    "cap_sent",
                    "hold_mode",
                    "hold_seq",
                    "hold_cap",
                    "key_hi",
                    "key_lo",
                ):
                    with m.Case(F[name]):
                        m.d.sync += rsel[name].eq(wdat)
                with m.Case(F["child_port"]):
                    m.d.sync += t_chport[cidx].eq(wdat)
                with m.Case(F["init"]):
                    m.d.sync += [
                        t_floor[ct].eq(0),
                        t_atfloor[ct].eq(t_nch[ct]),
                        t_used[ct].eq(0),
                        t_capsent[ct].eq(0),
                        t_hmode[ct].eq(HOLD_NONE),
                        t_limit[ct].eq(0),
                    ]
                    for c in range(C):
                        m.d.sync += t_ack[Cat(Const(c, cbits), ct)].eq(0)
                with m.Case(F["release"]):
                    for s in range(S):
                        with m.If(s_valid[s] & (s_tree[s] == ct)):
                            m.d.sync += [s_valid[s].eq(0), s_state[s].eq(S_FREE)]
                    m.d.sync += [t_used[ct].eq(0), t_limit[ct].eq(0)]
                with m.Case(F["grow_done"]):
                    m.d.comb += grow_done.eq(1)

        # ------------------------------------------------------------ the header FSM
        m.d.comb += [self.event_code.eq(ev)]
        with m.FSM(name="hdr"):
            with m.State("ACCEPT"):
                m.d.comb += self.ctl_ready.eq(1)
                with m.If(ing.b_valid & ing.d_valid & ~self.ctl_valid & room_out):
                    m.d.comb += [ing.b_ready.eq(1), ing.d_ready.eq(1)]
                    m.d.sync += [
                        hbeat.eq(ing.b_data),
                        hport.eq(ing.d_port),
                        hecn.eq(ing.d_ecn),
                        hlen.eq(ing.d_length),
                        hkey.eq(ing.d_key),
                        hlast.eq(ing.b_last),
                    ]
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.d.comb += fsm_busy.eq(1)
                m.d.sync += [
                    l_mal.eq(mal),
                    l_badkey.eq(key_bad),
                    l_thit.eq(t_hit_v.any()),
                    l_jobk.eq(job_known),
                    l_t.eq(t_idx),
                    l_chit.eq(c_hit_v.any()),
                    l_c.eq(c_idx),
                    l_shit.eq(s_hit_v.any()),
                    l_s.eq(s_idx),
                    l_free.eq(f_idx),
                    emit.eq(0),
                    wr.eq(0),
                    moved.eq(0),
                    op.eq(OP_PASS_B),
                    ev.eq(EV["ok"]),
                    w_s.eq(s_idx),
                    e_seq.eq(h_seq),
                    e_count.eq(h_count),
                ]
                m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.comb += fsm_busy.eq(1)
                sl = l_s
                drop = Signal()
                drop_code = Signal.like(ev)
                with m.If(l_mal != 0):
                    m.d.comb += [drop.eq(1), drop_code.eq(l_mal)]
                with m.Elif(l_badkey):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV["codec_" + codec.BAD_KEY])]
                    m.d.sync += self.bad_key_drops.eq(self.bad_key_drops + 1)
                with m.Elif(~l_thit):
                    m.d.comb += drop.eq(1)
                    with m.If(h_flags & FLAG_ACK):
                        m.d.comb += drop_code.eq(EV["ack_unmatched"])
                    with m.Elif(l_jobk):
                        m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_TREE])
                    with m.Else():
                        m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_JOB])
                with m.Elif(h_flags & FLAG_RESULT):
                    with m.If(t_root[T_] | (hport != t_parent[T_])):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_PARENT])]
                    with m.Elif(~l_shit):
                        m.d.comb += [
                            drop.eq(1),
                            drop_code.eq(Mux(h_seq < t_floor[T_], EV[core_acc.STALE], EV[core_acc.UNEXPECTED_RESULT])),
                        ]
                    with m.Elif(s_gen[sl] != h_gen):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
                    with m.Elif(s_count[sl] != h_count):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
                    with m.Elif(s_state[sl] == S_RESULT):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE_RESULT])]
                    with m.Elif(s_state[sl] != S_PARTIAL):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.UNEXPECTED_RESULT])]
                    with m.Else():
                        ce = (h_flags & FLAG_ECE) != 0
                        retx = (h_flags & FLAG_RETRANSMIT) != 0
                        m.d.sync += [
                            s_state[sl].eq(S_RESULT),
                            s_ce[sl].eq(ce),
                            s_retx[sl].eq(retx),
                            s_cap[sl].eq(h_cap),
                            wr.eq(1),
                        ]
                        results_to(h_cap, t_mask[T_], Mux(hecn == CE, CE, ECT0), ce, OP_PASS_B, retx)
                        m.next = "START"
                with m.Elif(~l_chit):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_CHILD])]
                with m.Elif(h_flags & FLAG_ACK):
                    with m.If((h_count != 0) | (h_ack != h_seq)):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
                    with m.Else():
                        take_ack(K_ACKEMIT)
                with m.Elif(h_count > cfg.payload_elems):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.TOO_LARGE])]
                with m.Elif(h_ack > h_seq):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
                with m.Elif(~l_shit):
                    with m.If(h_seq < t_floor[T_]):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.STALE])]
                    with m.Elif(t_used[T_] + (h_seq != h_ack) >= t_limit[T_]):
                        # the core re-checks against the room computed before the ack,
                        # even when the ack's floor advance shrinks the limit
                        m.d.sync += room_limit.eq(t_limit[T_])
                        take_ack(K_RECHECK)
                    with m.Else():
                        allocate(l_free)
                        take_ack(K_COMPLETE)
                with m.Elif(s_gen[sl] != h_gen):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
                with m.Elif(s_count[sl] != h_count):
                    m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
                with m.Elif((s_seen[sl] & bit) != 0):
                    with m.If(((h_flags & FLAG_RETRANSMIT) == 0) | (s_state[sl] == S_AGG)):
                        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE])]
                    with m.Else():
                        take_ack(K_DUPEMIT)
                with m.Else():
                    m.d.sync += [
                        s_seen[sl].eq(s_seen[sl] | bit),
                        s_nseen[sl].eq(s_nseen[sl] + 1),
                        s_ce[sl].eq(s_ce[sl] | (hecn == CE)),
                        s_retx[sl].eq(s_retx[sl] | ((h_flags & FLAG_RETRANSMIT) != 0)),
                        s_cap[sl].eq(Mux(h_cap < s_cap[sl], h_cap, s_cap[sl])),
                        op.eq(OP_ADD),
                        wr.eq(1),
                    ]
                    take_ack(K_COMPLETE)
                with m.If(drop):
                    m.d.sync += ev.eq(drop_code)
                    m.next = "START"
            with m.State("FLOOR1"):
                m.d.comb += fsm_busy.eq(1)
                mins = [t_ack[Cat(Const(c, cbits), T_)] for c in range(C)]
                cur = mins[0]
                for c in range(1, C):
                    v = mins[c]
                    cur = Mux((Const(c, cbits + 1) < t_nch[T_]) & (v < cur), v, cur)
                m.d.sync += f_new.eq(cur)
                m.next = "FLOOR2"
            with m.State("FLOOR2"):
                m.d.comb += fsm_busy.eq(1)
                at = sum(
                    (Const(c, cbits + 1) < t_nch[T_]) & (t_ack[Cat(Const(c, cbits), T_)] == f_new) for c in range(C)
                )
                m.d.sync += [t_atfloor[T_].eq(at), t_floor[T_].eq(f_new), moved.eq(1)]
                stale_v = Cat(s_valid[s] & (s_tree[s] == T_) & (s_seq[s] < f_new) for s in range(S))
                for s in range(S):
                    with m.If(stale_v[s]):
                        m.d.sync += [s_valid[s].eq(0), s_state[s].eq(S_FREE)]
                freed = Signal(sbits + 1)
                m.d.comb += freed.eq(sum(stale_v[s] for s in range(S)))
                used_after = Signal(sbits + 1)
                m.d.comb += used_after.eq(t_used[T_] - freed)
                m.d.sync += t_used[T_].eq(used_after)
                keep = (
                    (used_after != 0)
                    & (t_hmode[T_] != HOLD_NONE)
                    & ((t_hmode[T_] == HOLD_WAIT_RESULT) | (f_new <= t_hseq[T_]))
                )
                with m.If((freed != 0) & (t_limit[T_] > t_target[T_]) & ~keep):
                    m.d.sync += [
                        t_hmode[T_].eq(HOLD_NONE),
                        t_limit[T_].eq(Mux(t_target[T_] > used_after, t_target[T_], used_after)),
                    ]
                    m.next = "HOSTWAIT"
                with m.Else():
                    m.next = "NEXT"
            with m.State("HOSTWAIT"):
                m.d.comb += [fsm_busy.eq(1), self.host_req.eq(1), self.ctl_ready.eq(1)]
                with m.If(grow_done):
                    m.next = "NEXT"
            with m.State("NEXT"):
                m.d.comb += fsm_busy.eq(1)
                m.next = "START"
                with m.Switch(cont):
                    with m.Case(K_RECHECK):
                        with m.If(t_used[T_] + (h_seq != h_ack) >= room_limit):
                            m.d.sync += ev.eq(EV[core_acc.SHARE_EXCEEDED])
                        with m.Else():
                            allocate(f_idx)  # now: the floor advance may have freed the only free slots
                            m.d.sync += cont.eq(K_COMPLETE)
                            m.next = "NEXT"
                    with m.Case(K_COMPLETE):
                        with m.If(s_nseen[w_s] == t_nch[T_]):
                            with m.If(t_root[T_]):
                                m.d.sync += s_state[w_s].eq(S_RESULT)
                                results_to(s_cap[w_s], t_mask[T_], ECT0, s_ce[w_s], op, s_retx[w_s])
                            with m.Else():
                                m.d.sync += s_state[w_s].eq(S_PARTIAL)
                                partial(Mux(s_retx[w_s], FLAG_RETRANSMIT, 0), op, t_floor[T_])
                    with m.Case(K_DUPEMIT):
                        with m.If(s_state[w_s] == S_RESULT):
                            results_to(s_cap[w_s], port_mask, ECT0, s_ce[w_s], OP_PASS_A, s_retx[w_s])
                        with m.Else():
                            partial(FLAG_RETRANSMIT, OP_PASS_A, t_floor[T_])
                    with m.Case(K_ACKEMIT):
                        with m.If(~t_root[T_] & moved):
                            m.d.sync += [
                                emit.eq(1),
                                op.eq(OP_PASS_B),
                                e_flags.eq(FLAG_ACK),
                                e_cap.eq(t_cap[T_]),
                                e_ack.eq(t_floor[T_]),
                                e_seq.eq(t_floor[T_]),
                                e_dests.eq(parent_mask),
                                e_ecn.eq(ECT0),
                            ]
            with m.State("START"):
                m.d.comb += fsm_busy.eq(1)
                reads = op != OP_PASS_B
                with m.If(~(reads & hazard)):
                    m.d.comb += [
                        iss_valid.eq(1),
                        iss_data.eq(beat0),
                        iss_beat.eq(0),
                        iss_last.eq(hlast),
                        self.event_valid.eq(1),
                        self.event_emit.eq(emit),
                    ]
                    m.d.sync += beat_no.eq(1)
                    with m.If(hlast):
                        m.next = "ACCEPT"
                    with m.Else():
                        m.next = "STREAM"
            with m.State("STREAM"):
                m.d.comb += [fsm_busy.eq(1), ing.b_ready.eq(1)]
                with m.If(ing.b_valid):
                    m.d.comb += [
                        iss_valid.eq(1),
                        iss_data.eq(ing.b_data),
                        iss_beat.eq(beat_no),
                        iss_last.eq(ing.b_last),
                    ]
                    m.d.sync += beat_no.eq(beat_no + 1)
                    with m.If(ing.b_last):
                        m.next = "ACCEPT"
        return m
