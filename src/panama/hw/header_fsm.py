"""The header FSM of the aggregation datapath: every per-packet decision of the core
accelerator, in hardware.

Contract: :func:`build_header_fsm` adds to the datapath's module ``m`` the FSM that takes
a datagram from the ingress buffer (``ACCEPT``), registers the lookup of its tree, child
and slot (``LOOKUP``), decides it as :class:`panama.core.accelerator.Accelerator` does
(``DECIDE``: drop with the core's reason, or aggregate, allocate, take an ack, store a
result), advances the tree's floor when an ack completes it (``FLOOR1``, ``FLOOR2``:
frees stale slots, shrinks the limit and asks the host to redistribute memory,
``HOSTWAIT``), finishes the decision (``NEXT``: complete a slot, emit a partial or a
result, re-emit for a retransmission, forward an ack) and issues the packet's beats to
the beat pipeline (``START``, ``STREAM``; :mod:`panama.hw.beats`). One event per packet
(``event_valid``, ``event_code``, ``event_emit``); ``busy`` while a packet is in
flight. One function builds each state (``_accept`` ... ``_stream``; DECIDE's three
longer branches in ``_decide_result``, ``_decide_new_slot`` and ``_aggregate``); the
helpers ``_take_ack``, ``_results_to``, ``_partial`` and ``_allocate`` are the core's
``_take_ack``, ``_results_to``, partial emission and slot allocation. ``dp`` is
the :class:`~panama.hw.datapath.AggregationDatapath`, ``st`` the namespace of internal
signals it shares with its parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amaranth import Cat, Const, Module, Mux, Signal

from panama.core import accelerator as core_acc
from panama.core import codec
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT
from panama.hw.fp32 import OP_ADD, OP_PASS_A, OP_PASS_B
from panama.hw.layout import (
    EV,
    HOLD_NONE,
    HOLD_SEQ,
    HOLD_WAIT_RESULT,
    S_AGG,
    S_FREE,
    S_PARTIAL,
    S_RESULT,
    _bits_for,
)

if TYPE_CHECKING:
    from types import SimpleNamespace

    from panama.hw.datapath import AggregationDatapath

__all__ = ["build_header_fsm"]

# Continuation after taking an ack (``st.cont``, read in state NEXT).
K_NONE, K_COMPLETE, K_RECHECK, K_DUPEMIT, K_ACKEMIT = range(5)


def build_header_fsm(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Add the header FSM to ``m`` (after the beat pipeline and the control interface,
    whose signals it drives and reads): one function per state, in the order of a packet."""
    m.d.comb += [dp.event_code.eq(st.ev)]
    with m.FSM(name="hdr"):
        with m.State("ACCEPT"):
            _accept(m, dp, st)
        with m.State("LOOKUP"):
            _lookup(m, st)
        with m.State("DECIDE"):
            _decide(m, dp, st)
        with m.State("FLOOR1"):
            _floor_minimum(m, dp, st)
        with m.State("FLOOR2"):
            _floor_advance(m, dp, st)
        with m.State("HOSTWAIT"):
            _host_wait(m, dp, st)
        with m.State("NEXT"):
            _finish(m, st)
        with m.State("START"):
            _start(m, dp, st)
        with m.State("STREAM"):
            _stream(m, st)


# ------------------------------------------------------------ the core's helpers, as statements


def _take_ack(m: Module, st: SimpleNamespace, next_cont):
    """Statements of the core's _take_ack for (l_t, l_c, h_ack), then go on to next_cont."""
    old = st.t_ack[st.cur_ack_idx]
    with m.If((st.h_ack > old) & (old == st.t_floor[st.T_])):
        m.d.sync += [st.t_ack[st.cur_ack_idx].eq(st.h_ack), st.t_atfloor[st.T_].eq(st.t_atfloor[st.T_] - 1)]
        with m.If(st.t_atfloor[st.T_] == 1):
            m.next = "FLOOR1"
        with m.Else():
            m.next = "NEXT"
    with m.Else():
        with m.If(st.h_ack > old):
            m.d.sync += st.t_ack[st.cur_ack_idx].eq(st.h_ack)
        m.next = "NEXT"
    m.d.sync += st.cont.eq(next_cont)


def _results_to(m: Module, st: SimpleNamespace, slot_cap, dests, ecn, ce, pop, retx):
    """The core's _results_to: header of a result and its side effects on the tree."""
    cap = Signal(16)
    m.d.comb += cap.eq(Mux(slot_cap < st.t_cap[st.T_], slot_cap, st.t_cap[st.T_]))
    m.d.sync += [
        st.emit.eq(1),
        st.op.eq(pop),
        st.e_flags.eq(Mux(ce, FLAG_RESULT | FLAG_ECE, FLAG_RESULT) | Mux(retx, FLAG_RETRANSMIT, 0)),
        st.e_cap.eq(cap),
        st.e_ack.eq(0),
        st.e_dests.eq(dests),
        st.e_ecn.eq(ecn),
    ]
    with m.If(cap > st.t_capsent[st.T_]):
        m.d.sync += st.t_capsent[st.T_].eq(cap)
    with m.If(st.t_hmode[st.T_] == HOLD_WAIT_RESULT):
        m.d.sync += [st.t_hmode[st.T_].eq(HOLD_SEQ), st.t_hseq[st.T_].eq(st.h_seq + st.t_hcap[st.T_])]


def _partial(m: Module, st: SimpleNamespace, flags, pop, floor):
    """The core's partial emission: the slot's sum towards the parent, acking ``floor``."""
    m.d.sync += [
        st.emit.eq(1),
        st.op.eq(pop),
        st.e_flags.eq(flags),
        st.e_cap.eq(st.s_cap[st.w_s]),
        st.e_ack.eq(floor),
        st.e_dests.eq(st.parent_mask),
        st.e_ecn.eq(Mux(st.s_ce[st.w_s], CE, ECT0)),
    ]


def _allocate(m: Module, st: SimpleNamespace, slot):
    """The core's slot allocation: ``slot`` takes this contribution (copied into slot memory)."""
    m.d.sync += [
        st.s_valid[slot].eq(1),
        st.s_tree[slot].eq(st.T_),
        st.s_seq[slot].eq(st.h_seq),
        st.s_gen[slot].eq(st.h_gen),
        st.s_count[slot].eq(st.h_count),
        st.s_seen[slot].eq(st.bit),
        st.s_nseen[slot].eq(1),
        st.s_ce[slot].eq(st.hecn == CE),
        st.s_retx[slot].eq((st.h_flags & FLAG_RETRANSMIT) != 0),
        st.s_cap[slot].eq(Mux(st.h_cap < st.t_cap[st.T_], st.h_cap, st.t_cap[st.T_])),
        st.s_state[slot].eq(S_AGG),
        st.t_used[st.T_].eq(st.t_used[st.T_] + 1),
        st.w_s.eq(slot),
        st.op.eq(OP_PASS_B),
        st.wr.eq(1),
    ]


# ------------------------------------------------------------ the states


def _accept(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Take a whole datagram from the ingress buffer when the egress has room for its emission."""
    m.d.comb += dp.ctl_ready.eq(1)
    with m.If(st.ing.b_valid & st.ing.d_valid & ~dp.ctl_valid & st.room_out):
        m.d.comb += [st.ing.b_ready.eq(1), st.ing.d_ready.eq(1)]
        m.d.sync += [
            st.hbeat.eq(st.ing.b_data),
            st.hport.eq(st.ing.d_port),
            st.hecn.eq(st.ing.d_ecn),
            st.hlen.eq(st.ing.d_length),
            st.hkey.eq(st.ing.d_key),
            st.hlast.eq(st.ing.b_last),
        ]
        m.next = "LOOKUP"


def _lookup(m: Module, st: SimpleNamespace) -> None:
    """Register the lookup of the packet's tree, child and slot and clear the packet's verdict."""
    m.d.comb += st.fsm_busy.eq(1)
    m.d.sync += [
        st.l_mal.eq(st.mal),
        st.l_badkey.eq(st.key_bad),
        st.l_thit.eq(st.t_hit_v.any()),
        st.l_jobk.eq(st.job_known),
        st.l_t.eq(st.t_idx),
        st.l_chit.eq(st.c_hit_v.any()),
        st.l_c.eq(st.c_idx),
        st.l_shit.eq(st.s_hit_v.any()),
        st.l_s.eq(st.s_idx),
        st.l_free.eq(st.f_idx),
        st.emit.eq(0),
        st.wr.eq(0),
        st.moved.eq(0),
        st.op.eq(OP_PASS_B),
        st.ev.eq(EV["ok"]),
        st.w_s.eq(st.s_idx),
        st.e_seq.eq(st.h_seq),
        st.e_count.eq(st.h_count),
    ]
    m.next = "DECIDE"


def _decide(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """The core's decision: drop with its reason, or store a result, take an ack, allocate or aggregate."""
    cfg = dp.cfg
    m.d.comb += st.fsm_busy.eq(1)
    sl = st.l_s
    drop = Signal()
    drop_code = Signal.like(st.ev)
    with m.If(st.l_mal != 0):
        m.d.comb += [drop.eq(1), drop_code.eq(st.l_mal)]
    with m.Elif(st.l_badkey):
        m.d.comb += [drop.eq(1), drop_code.eq(EV["codec_" + codec.BAD_KEY])]
        m.d.sync += dp.bad_key_drops.eq(dp.bad_key_drops + 1)
    with m.Elif(~st.l_thit):
        m.d.comb += drop.eq(1)
        with m.If(st.h_flags & FLAG_ACK):
            m.d.comb += drop_code.eq(EV["ack_unmatched"])
        with m.Elif(st.l_jobk):
            m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_TREE])
        with m.Else():
            m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_JOB])
    with m.Elif(st.h_flags & FLAG_RESULT):
        _decide_result(m, st, drop, drop_code)
    with m.Elif(~st.l_chit):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_CHILD])]
    with m.Elif(st.h_flags & FLAG_ACK):
        with m.If((st.h_count != 0) | (st.h_ack != st.h_seq)):
            m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
        with m.Else():
            _take_ack(m, st, K_ACKEMIT)
    with m.Elif(st.h_count > cfg.payload_elems):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.TOO_LARGE])]
    with m.Elif(st.h_ack > st.h_seq):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
    with m.Elif(~st.l_shit):
        _decide_new_slot(m, st, drop, drop_code)
    with m.Elif(st.s_gen[sl] != st.h_gen):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
    with m.Elif(st.s_count[sl] != st.h_count):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
    with m.Elif((st.s_seen[sl] & st.bit) != 0):
        with m.If(((st.h_flags & FLAG_RETRANSMIT) == 0) | (st.s_state[sl] == S_AGG)):
            m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE])]
        with m.Else():
            _take_ack(m, st, K_DUPEMIT)
    with m.Else():
        _aggregate(m, st)
    with m.If(drop):
        m.d.sync += st.ev.eq(drop_code)
        m.next = "START"


def _decide_result(m: Module, st: SimpleNamespace, drop: Signal, drop_code: Signal) -> None:
    """DECIDE for a result from the parent: drop it, or store it in its slot and send it to the children."""
    sl = st.l_s
    with m.If(st.t_root[st.T_] | (st.hport != st.t_parent[st.T_])):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_PARENT])]
    with m.Elif(~st.l_shit):
        m.d.comb += [
            drop.eq(1),
            drop_code.eq(Mux(st.h_seq < st.t_floor[st.T_], EV[core_acc.STALE], EV[core_acc.UNEXPECTED_RESULT])),
        ]
    with m.Elif(st.s_gen[sl] != st.h_gen):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
    with m.Elif(st.s_count[sl] != st.h_count):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
    with m.Elif(st.s_state[sl] == S_RESULT):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE_RESULT])]
    with m.Elif(st.s_state[sl] != S_PARTIAL):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.UNEXPECTED_RESULT])]
    with m.Else():
        ce = (st.h_flags & FLAG_ECE) != 0
        retx = (st.h_flags & FLAG_RETRANSMIT) != 0
        m.d.sync += [
            st.s_state[sl].eq(S_RESULT),
            st.s_ce[sl].eq(ce),
            st.s_retx[sl].eq(retx),
            st.s_cap[sl].eq(st.h_cap),
            st.wr.eq(1),
        ]
        _results_to(m, st, st.h_cap, st.t_mask[st.T_], Mux(st.hecn == CE, CE, ECT0), ce, OP_PASS_B, retx)
        m.next = "START"


def _decide_new_slot(m: Module, st: SimpleNamespace, drop: Signal, drop_code: Signal) -> None:
    """DECIDE for a contribution with no slot yet: stale, over the tree's share (re-checked after the ack),
    or allocate one."""
    with m.If(st.h_seq < st.t_floor[st.T_]):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.STALE])]
    with m.Elif(st.t_used[st.T_] + (st.h_seq != st.h_ack) >= st.t_limit[st.T_]):
        # the core re-checks against the room computed before the ack,
        # even when the ack's floor advance shrinks the limit
        m.d.sync += st.room_limit.eq(st.t_limit[st.T_])
        _take_ack(m, st, K_RECHECK)
    with m.Else():
        _allocate(m, st, st.l_free)
        _take_ack(m, st, K_COMPLETE)


def _aggregate(m: Module, st: SimpleNamespace) -> None:
    """DECIDE for a new contribution to an existing slot: add it (the beats go through the adders)."""
    sl = st.l_s
    m.d.sync += [
        st.s_seen[sl].eq(st.s_seen[sl] | st.bit),
        st.s_nseen[sl].eq(st.s_nseen[sl] + 1),
        st.s_ce[sl].eq(st.s_ce[sl] | (st.hecn == CE)),
        st.s_retx[sl].eq(st.s_retx[sl] | ((st.h_flags & FLAG_RETRANSMIT) != 0)),
        st.s_cap[sl].eq(Mux(st.h_cap < st.s_cap[sl], st.h_cap, st.s_cap[sl])),
        st.op.eq(OP_ADD),
        st.wr.eq(1),
    ]
    _take_ack(m, st, K_COMPLETE)


def _floor_minimum(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """The tree's new floor: the minimum ack over its children."""
    C = dp.cfg.max_children
    cbits = _bits_for(C)
    m.d.comb += st.fsm_busy.eq(1)
    mins = [st.t_ack[Cat(Const(c, cbits), st.T_)] for c in range(C)]
    cur = mins[0]
    for c in range(1, C):
        v = mins[c]
        cur = Mux((Const(c, cbits + 1) < st.t_nch[st.T_]) & (v < cur), v, cur)
    m.d.sync += st.f_new.eq(cur)
    m.next = "FLOOR2"


def _floor_advance(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Advance the floor: free stale slots, shrink the limit and ask the host to redistribute memory."""
    C, S = dp.cfg.max_children, dp.cfg.slots
    cbits = _bits_for(C)
    sbits = _bits_for(S)
    m.d.comb += st.fsm_busy.eq(1)
    at = sum(
        (Const(c, cbits + 1) < st.t_nch[st.T_]) & (st.t_ack[Cat(Const(c, cbits), st.T_)] == st.f_new) for c in range(C)
    )
    m.d.sync += [st.t_atfloor[st.T_].eq(at), st.t_floor[st.T_].eq(st.f_new), st.moved.eq(1)]
    stale_v = Cat(st.s_valid[s] & (st.s_tree[s] == st.T_) & (st.s_seq[s] < st.f_new) for s in range(S))
    for s in range(S):
        with m.If(stale_v[s]):
            m.d.sync += [st.s_valid[s].eq(0), st.s_state[s].eq(S_FREE)]
    freed = Signal(sbits + 1)
    m.d.comb += freed.eq(sum(stale_v[s] for s in range(S)))
    used_after = Signal(sbits + 1)
    m.d.comb += used_after.eq(st.t_used[st.T_] - freed)
    m.d.sync += st.t_used[st.T_].eq(used_after)
    keep = (
        (used_after != 0)
        & (st.t_hmode[st.T_] != HOLD_NONE)
        & ((st.t_hmode[st.T_] == HOLD_WAIT_RESULT) | (st.f_new <= st.t_hseq[st.T_]))
    )
    with m.If((freed != 0) & (st.t_limit[st.T_] > st.t_target[st.T_]) & ~keep):
        m.d.sync += [
            st.t_hmode[st.T_].eq(HOLD_NONE),
            st.t_limit[st.T_].eq(Mux(st.t_target[st.T_] > used_after, st.t_target[st.T_], used_after)),
        ]
        m.next = "HOSTWAIT"
    with m.Else():
        m.next = "NEXT"


def _host_wait(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Wait until the host has redistributed spare memory (``grow_done``)."""
    m.d.comb += [st.fsm_busy.eq(1), dp.host_req.eq(1), dp.ctl_ready.eq(1)]
    with m.If(st.grow_done):
        m.next = "NEXT"


def _finish(m: Module, st: SimpleNamespace) -> None:
    """Finish the decision (``st.cont``): complete a slot, emit a partial or a result, re-emit, forward an ack."""
    m.d.comb += st.fsm_busy.eq(1)
    m.next = "START"
    with m.Switch(st.cont):
        with m.Case(K_RECHECK):
            with m.If(st.t_used[st.T_] + (st.h_seq != st.h_ack) >= st.room_limit):
                m.d.sync += st.ev.eq(EV[core_acc.SHARE_EXCEEDED])
            with m.Else():
                _allocate(m, st, st.f_idx)  # now: the floor advance may have freed the only free slots
                m.d.sync += st.cont.eq(K_COMPLETE)
                m.next = "NEXT"
        with m.Case(K_COMPLETE):
            with m.If(st.s_nseen[st.w_s] == st.t_nch[st.T_]):
                with m.If(st.t_root[st.T_]):
                    m.d.sync += st.s_state[st.w_s].eq(S_RESULT)
                    _results_to(
                        m, st, st.s_cap[st.w_s], st.t_mask[st.T_], ECT0, st.s_ce[st.w_s], st.op, st.s_retx[st.w_s]
                    )
                with m.Else():
                    m.d.sync += st.s_state[st.w_s].eq(S_PARTIAL)
                    _partial(m, st, Mux(st.s_retx[st.w_s], FLAG_RETRANSMIT, 0), st.op, st.t_floor[st.T_])
        with m.Case(K_DUPEMIT):
            with m.If(st.s_state[st.w_s] == S_RESULT):
                _results_to(m, st, st.s_cap[st.w_s], st.port_mask, ECT0, st.s_ce[st.w_s], OP_PASS_A, st.s_retx[st.w_s])
            with m.Else():
                _partial(m, st, FLAG_RETRANSMIT, OP_PASS_A, st.t_floor[st.T_])
        with m.Case(K_ACKEMIT):
            with m.If(~st.t_root[st.T_] & st.moved):
                m.d.sync += [
                    st.emit.eq(1),
                    st.op.eq(OP_PASS_B),
                    st.e_flags.eq(FLAG_ACK),
                    st.e_cap.eq(st.t_cap[st.T_]),
                    st.e_ack.eq(st.t_floor[st.T_]),
                    st.e_seq.eq(st.t_floor[st.T_]),
                    st.e_dests.eq(st.parent_mask),
                    st.e_ecn.eq(ECT0),
                ]


def _start(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Issue beat 0 (the emitted header) and the packet's event, once its slot has no beat in flight."""
    m.d.comb += st.fsm_busy.eq(1)
    reads = st.op != OP_PASS_B
    with m.If(~(reads & st.hazard)):
        m.d.comb += [
            st.iss_valid.eq(1),
            st.iss_data.eq(st.beat0),
            st.iss_beat.eq(0),
            st.iss_last.eq(st.hlast),
            dp.event_valid.eq(1),
            dp.event_emit.eq(st.emit),
        ]
        m.d.sync += st.beat_no.eq(1)
        with m.If(st.hlast):
            m.next = "ACCEPT"
        with m.Else():
            m.next = "STREAM"


def _stream(m: Module, st: SimpleNamespace) -> None:
    """Issue the packet's remaining beats from the ingress buffer."""
    m.d.comb += [st.fsm_busy.eq(1), st.ing.b_ready.eq(1)]
    with m.If(st.ing.b_valid):
        m.d.comb += [
            st.iss_valid.eq(1),
            st.iss_data.eq(st.ing.b_data),
            st.iss_beat.eq(st.beat_no),
            st.iss_last.eq(st.ing.b_last),
        ]
        m.d.sync += st.beat_no.eq(st.beat_no + 1)
        with m.If(st.ing.b_last):
            m.next = "ACCEPT"
