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
the :class:`~panama.hw.datapath.AggregationDatapath`; the FSM reads and drives every
internal record of it (:class:`~panama.hw.datapath.Internals`), and each function takes
only the records it uses.
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
    from panama.hw.beats import BeatPipeline
    from panama.hw.datapath import (
        AggregationDatapath,
        Flight,
        Header,
        Internals,
        Latched,
        Lookup,
        SlotTable,
        TreeTable,
    )
    from panama.hw.ingress import IngressBuffer

__all__ = ["build_header_fsm"]

# Continuation after taking an ack (``pkt.cont``, read in state NEXT).
K_NONE, K_COMPLETE, K_RECHECK, K_DUPEMIT, K_ACKEMIT = range(5)


def build_header_fsm(m: Module, dp: AggregationDatapath, parts: Internals) -> None:
    """Add the header FSM to ``m`` (after the beat pipeline and the control interface,
    whose signals it drives and reads): one function per state, in the order of a packet."""
    tree, slots, ing, hdr, look, lat, pkt = (
        parts.tree,
        parts.slots,
        parts.ing,
        parts.hdr,
        parts.look,
        parts.lat,
        parts.pkt,
    )
    beats, grow_done = parts.beats, parts.grow_done
    m.d.comb += [dp.event_code.eq(pkt.ev)]
    with m.FSM(name="hdr"):
        with m.State("ACCEPT"):
            _accept(m, dp, ing, hdr, beats)
        with m.State("LOOKUP"):
            _lookup(m, hdr, look, lat, pkt)
        with m.State("DECIDE"):
            _decide(m, dp, tree, slots, hdr, lat, pkt)
        with m.State("FLOOR1"):
            _floor_minimum(m, dp, tree, pkt)
        with m.State("FLOOR2"):
            _floor_advance(m, dp, tree, slots, pkt)
        with m.State("HOSTWAIT"):
            _host_wait(m, dp, pkt, grow_done)
        with m.State("NEXT"):
            _finish(m, tree, slots, hdr, look, pkt)
        with m.State("START"):
            _start(m, dp, hdr, pkt, beats)
        with m.State("STREAM"):
            _stream(m, ing, pkt, beats)


# ------------------------------------------------------------ the core's helpers, as statements


def _take_ack(m: Module, tree: TreeTable, hdr: Header, pkt: Flight, next_cont):
    """Statements of the core's _take_ack for (l_t, l_c, h_ack), then go on to next_cont."""
    old = tree.ack[pkt.ack_idx]
    with m.If((hdr.ack > old) & (old == tree.floor[pkt.tree])):
        m.d.sync += [tree.ack[pkt.ack_idx].eq(hdr.ack), tree.atfloor[pkt.tree].eq(tree.atfloor[pkt.tree] - 1)]
        with m.If(tree.atfloor[pkt.tree] == 1):
            m.next = "FLOOR1"
        with m.Else():
            m.next = "NEXT"
    with m.Else():
        with m.If(hdr.ack > old):
            m.d.sync += tree.ack[pkt.ack_idx].eq(hdr.ack)
        m.next = "NEXT"
    m.d.sync += pkt.cont.eq(next_cont)


def _results_to(m: Module, tree: TreeTable, hdr: Header, pkt: Flight, slot_cap, dests, ecn, ce, pop, retx):
    """The core's _results_to: header of a result and its side effects on the tree."""
    cap = Signal(16)
    m.d.comb += cap.eq(Mux(slot_cap < tree.cap[pkt.tree], slot_cap, tree.cap[pkt.tree]))
    m.d.sync += [
        pkt.emit.eq(1),
        pkt.op.eq(pop),
        pkt.e_flags.eq(Mux(ce, FLAG_RESULT | FLAG_ECE, FLAG_RESULT) | Mux(retx, FLAG_RETRANSMIT, 0)),
        pkt.e_cap.eq(cap),
        pkt.e_ack.eq(0),
        pkt.e_dests.eq(dests),
        pkt.e_ecn.eq(ecn),
    ]
    with m.If(cap > tree.capsent[pkt.tree]):
        m.d.sync += tree.capsent[pkt.tree].eq(cap)
    with m.If(tree.hmode[pkt.tree] == HOLD_WAIT_RESULT):
        m.d.sync += [tree.hmode[pkt.tree].eq(HOLD_SEQ), tree.hseq[pkt.tree].eq(hdr.seq + tree.hcap[pkt.tree])]


def _partial(m: Module, slots: SlotTable, pkt: Flight, flags, pop, floor):
    """The core's partial emission: the slot's sum towards the parent, acking ``floor``."""
    m.d.sync += [
        pkt.emit.eq(1),
        pkt.op.eq(pop),
        pkt.e_flags.eq(flags),
        pkt.e_cap.eq(slots.cap[pkt.slot]),
        pkt.e_ack.eq(floor),
        pkt.e_dests.eq(pkt.parent_mask),
        pkt.e_ecn.eq(Mux(slots.ce[pkt.slot], CE, ECT0)),
    ]


def _allocate(m: Module, tree: TreeTable, slots: SlotTable, hdr: Header, pkt: Flight, slot):
    """The core's slot allocation: ``slot`` takes this contribution (copied into slot memory)."""
    m.d.sync += [
        slots.valid[slot].eq(1),
        slots.tree[slot].eq(pkt.tree),
        slots.seq[slot].eq(hdr.seq),
        slots.gen[slot].eq(hdr.gen),
        slots.count[slot].eq(hdr.count),
        slots.seen[slot].eq(pkt.bit),
        slots.nseen[slot].eq(1),
        slots.ce[slot].eq(hdr.ecn == CE),
        slots.retx[slot].eq((hdr.flags & FLAG_RETRANSMIT) != 0),
        slots.cap[slot].eq(Mux(hdr.cap < tree.cap[pkt.tree], hdr.cap, tree.cap[pkt.tree])),
        slots.state[slot].eq(S_AGG),
        tree.used[pkt.tree].eq(tree.used[pkt.tree] + 1),
        pkt.slot.eq(slot),
        pkt.op.eq(OP_PASS_B),
        pkt.wr.eq(1),
    ]


# ------------------------------------------------------------ the states


def _accept(m: Module, dp: AggregationDatapath, ing: IngressBuffer, hdr: Header, beats: BeatPipeline) -> None:
    """Take a whole datagram from the ingress buffer when the egress has room for its emission."""
    m.d.comb += dp.ctl_ready.eq(1)
    with m.If(ing.b_valid & ing.d_valid & ~dp.ctl_valid & beats.room_out):
        m.d.comb += [ing.b_ready.eq(1), ing.d_ready.eq(1)]
        m.d.sync += [
            hdr.beat.eq(ing.b_data),
            hdr.port.eq(ing.d_port),
            hdr.ecn.eq(ing.d_ecn),
            hdr.length.eq(ing.d_length),
            hdr.key.eq(ing.d_key),
            hdr.last.eq(ing.b_last),
        ]
        m.next = "LOOKUP"


def _lookup(m: Module, hdr: Header, look: Lookup, lat: Latched, pkt: Flight) -> None:
    """Register the lookup of the packet's tree, child and slot and clear the packet's verdict."""
    m.d.comb += pkt.busy.eq(1)
    m.d.sync += [
        lat.mal.eq(hdr.mal),
        lat.badkey.eq(look.key_bad),
        lat.thit.eq(look.t_hit.any()),
        lat.jobk.eq(look.job_known),
        lat.t.eq(look.t_idx),
        lat.chit.eq(look.c_hit.any()),
        lat.c.eq(look.c_idx),
        lat.shit.eq(look.s_hit.any()),
        lat.s.eq(look.s_idx),
        lat.free.eq(look.f_idx),
        pkt.emit.eq(0),
        pkt.wr.eq(0),
        pkt.moved.eq(0),
        pkt.op.eq(OP_PASS_B),
        pkt.ev.eq(EV["ok"]),
        pkt.slot.eq(look.s_idx),
        pkt.e_seq.eq(hdr.seq),
        pkt.e_count.eq(hdr.count),
    ]
    m.next = "DECIDE"


def _decide(
    m: Module, dp: AggregationDatapath, tree: TreeTable, slots: SlotTable, hdr: Header, lat: Latched, pkt: Flight
) -> None:
    """The core's decision: drop with its reason, or store a result, take an ack, allocate or aggregate."""
    cfg = dp.cfg
    m.d.comb += pkt.busy.eq(1)
    sl = lat.s
    drop = Signal()
    drop_code = Signal.like(pkt.ev)
    with m.If(lat.mal != 0):
        m.d.comb += [drop.eq(1), drop_code.eq(lat.mal)]
    with m.Elif(lat.badkey):
        m.d.comb += [drop.eq(1), drop_code.eq(EV["codec_" + codec.BAD_KEY])]
        m.d.sync += dp.bad_key_drops.eq(dp.bad_key_drops + 1)
    with m.Elif(~lat.thit):
        m.d.comb += drop.eq(1)
        with m.If(hdr.flags & FLAG_ACK):
            m.d.comb += drop_code.eq(EV["ack_unmatched"])
        with m.Elif(lat.jobk):
            m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_TREE])
        with m.Else():
            m.d.comb += drop_code.eq(EV[core_acc.UNKNOWN_JOB])
    with m.Elif(hdr.flags & FLAG_RESULT):
        _decide_result(m, tree, slots, hdr, lat, pkt, drop, drop_code)
    with m.Elif(~lat.chit):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_CHILD])]
    with m.Elif(hdr.flags & FLAG_ACK):
        with m.If((hdr.count != 0) | (hdr.ack != hdr.seq)):
            m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
        with m.Else():
            _take_ack(m, tree, hdr, pkt, K_ACKEMIT)
    with m.Elif(hdr.count > cfg.payload_elems):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.TOO_LARGE])]
    with m.Elif(hdr.ack > hdr.seq):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.BAD_ACK])]
    with m.Elif(~lat.shit):
        _decide_new_slot(m, tree, slots, hdr, lat, pkt, drop, drop_code)
    with m.Elif(slots.gen[sl] != hdr.gen):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
    with m.Elif(slots.count[sl] != hdr.count):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
    with m.Elif((slots.seen[sl] & pkt.bit) != 0):
        with m.If(((hdr.flags & FLAG_RETRANSMIT) == 0) | (slots.state[sl] == S_AGG)):
            m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE])]
        with m.Else():
            _take_ack(m, tree, hdr, pkt, K_DUPEMIT)
    with m.Else():
        _aggregate(m, tree, slots, hdr, lat, pkt)
    with m.If(drop):
        m.d.sync += pkt.ev.eq(drop_code)
        m.next = "START"


def _decide_result(
    m: Module,
    tree: TreeTable,
    slots: SlotTable,
    hdr: Header,
    lat: Latched,
    pkt: Flight,
    drop: Signal,
    drop_code: Signal,
) -> None:
    """DECIDE for a result from the parent: drop it, or store it in its slot and send it to the children."""
    sl = lat.s
    with m.If(tree.root[pkt.tree] | (hdr.port != tree.parent[pkt.tree])):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.NOT_PARENT])]
    with m.Elif(~lat.shit):
        m.d.comb += [
            drop.eq(1),
            drop_code.eq(Mux(hdr.seq < tree.floor[pkt.tree], EV[core_acc.STALE], EV[core_acc.UNEXPECTED_RESULT])),
        ]
    with m.Elif(slots.gen[sl] != hdr.gen):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.GENERATION_MISMATCH])]
    with m.Elif(slots.count[sl] != hdr.count):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.COUNT_MISMATCH])]
    with m.Elif(slots.state[sl] == S_RESULT):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.DUPLICATE_RESULT])]
    with m.Elif(slots.state[sl] != S_PARTIAL):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.UNEXPECTED_RESULT])]
    with m.Else():
        ce = (hdr.flags & FLAG_ECE) != 0
        retx = (hdr.flags & FLAG_RETRANSMIT) != 0
        m.d.sync += [
            slots.state[sl].eq(S_RESULT),
            slots.ce[sl].eq(ce),
            slots.retx[sl].eq(retx),
            slots.cap[sl].eq(hdr.cap),
            pkt.wr.eq(1),
        ]
        _results_to(m, tree, hdr, pkt, hdr.cap, tree.mask[pkt.tree], Mux(hdr.ecn == CE, CE, ECT0), ce, OP_PASS_B, retx)
        m.next = "START"


def _decide_new_slot(
    m: Module,
    tree: TreeTable,
    slots: SlotTable,
    hdr: Header,
    lat: Latched,
    pkt: Flight,
    drop: Signal,
    drop_code: Signal,
) -> None:
    """DECIDE for a contribution with no slot yet: stale, over the tree's share (re-checked after the ack),
    or allocate one."""
    with m.If(hdr.seq < tree.floor[pkt.tree]):
        m.d.comb += [drop.eq(1), drop_code.eq(EV[core_acc.STALE])]
    with m.Elif(tree.used[pkt.tree] + (hdr.seq != hdr.ack) >= tree.limit[pkt.tree]):
        # the core re-checks against the room computed before the ack,
        # even when the ack's floor advance shrinks the limit
        m.d.sync += pkt.room_limit.eq(tree.limit[pkt.tree])
        _take_ack(m, tree, hdr, pkt, K_RECHECK)
    with m.Else():
        _allocate(m, tree, slots, hdr, pkt, lat.free)
        _take_ack(m, tree, hdr, pkt, K_COMPLETE)


def _aggregate(m: Module, tree: TreeTable, slots: SlotTable, hdr: Header, lat: Latched, pkt: Flight) -> None:
    """DECIDE for a new contribution to an existing slot: add it (the beats go through the adders)."""
    sl = lat.s
    m.d.sync += [
        slots.seen[sl].eq(slots.seen[sl] | pkt.bit),
        slots.nseen[sl].eq(slots.nseen[sl] + 1),
        slots.ce[sl].eq(slots.ce[sl] | (hdr.ecn == CE)),
        slots.retx[sl].eq(slots.retx[sl] | ((hdr.flags & FLAG_RETRANSMIT) != 0)),
        slots.cap[sl].eq(Mux(hdr.cap < slots.cap[sl], hdr.cap, slots.cap[sl])),
        pkt.op.eq(OP_ADD),
        pkt.wr.eq(1),
    ]
    _take_ack(m, tree, hdr, pkt, K_COMPLETE)


def _floor_minimum(m: Module, dp: AggregationDatapath, tree: TreeTable, pkt: Flight) -> None:
    """The tree's new floor: the minimum ack over its children."""
    C = dp.cfg.max_children
    cbits = _bits_for(C)
    m.d.comb += pkt.busy.eq(1)
    mins = [tree.ack[Cat(Const(c, cbits), pkt.tree)] for c in range(C)]
    cur = mins[0]
    for c in range(1, C):
        v = mins[c]
        cur = Mux((Const(c, cbits + 1) < tree.nch[pkt.tree]) & (v < cur), v, cur)
    m.d.sync += pkt.f_new.eq(cur)
    m.next = "FLOOR2"


def _floor_advance(m: Module, dp: AggregationDatapath, tree: TreeTable, slots: SlotTable, pkt: Flight) -> None:
    """Advance the floor: free stale slots, shrink the limit and ask the host to redistribute memory."""
    C, S = dp.cfg.max_children, dp.cfg.slots
    cbits = _bits_for(C)
    sbits = _bits_for(S)
    m.d.comb += pkt.busy.eq(1)
    at = sum(
        (Const(c, cbits + 1) < tree.nch[pkt.tree]) & (tree.ack[Cat(Const(c, cbits), pkt.tree)] == pkt.f_new)
        for c in range(C)
    )
    m.d.sync += [tree.atfloor[pkt.tree].eq(at), tree.floor[pkt.tree].eq(pkt.f_new), pkt.moved.eq(1)]
    stale_v = Cat(slots.valid[s] & (slots.tree[s] == pkt.tree) & (slots.seq[s] < pkt.f_new) for s in range(S))
    for s in range(S):
        with m.If(stale_v[s]):
            m.d.sync += [slots.valid[s].eq(0), slots.state[s].eq(S_FREE)]
    freed = Signal(sbits + 1)
    m.d.comb += freed.eq(sum(stale_v[s] for s in range(S)))
    used_after = Signal(sbits + 1)
    m.d.comb += used_after.eq(tree.used[pkt.tree] - freed)
    m.d.sync += tree.used[pkt.tree].eq(used_after)
    keep = (
        (used_after != 0)
        & (tree.hmode[pkt.tree] != HOLD_NONE)
        & ((tree.hmode[pkt.tree] == HOLD_WAIT_RESULT) | (pkt.f_new <= tree.hseq[pkt.tree]))
    )
    with m.If((freed != 0) & (tree.limit[pkt.tree] > tree.target[pkt.tree]) & ~keep):
        m.d.sync += [
            tree.hmode[pkt.tree].eq(HOLD_NONE),
            tree.limit[pkt.tree].eq(Mux(tree.target[pkt.tree] > used_after, tree.target[pkt.tree], used_after)),
        ]
        m.next = "HOSTWAIT"
    with m.Else():
        m.next = "NEXT"


def _host_wait(m: Module, dp: AggregationDatapath, pkt: Flight, grow_done: Signal) -> None:
    """Wait until the host has redistributed spare memory (``grow_done``)."""
    m.d.comb += [pkt.busy.eq(1), dp.host_req.eq(1), dp.ctl_ready.eq(1)]
    with m.If(grow_done):
        m.next = "NEXT"


def _finish(m: Module, tree: TreeTable, slots: SlotTable, hdr: Header, look: Lookup, pkt: Flight) -> None:
    """Finish the decision (``pkt.cont``): complete a slot, emit a partial or a result, re-emit, forward an ack."""
    m.d.comb += pkt.busy.eq(1)
    # the packet's slot and tree entry; short names keep each _results_to call's lookups on one
    # source line: Amaranth shares an Array's index decoder only between lookups on the same line
    # (src_loc), and one line each keeps the netlist as it was
    sl, t = pkt.slot, pkt.tree
    m.next = "START"
    with m.Switch(pkt.cont):
        with m.Case(K_RECHECK):
            with m.If(tree.used[t] + (hdr.seq != hdr.ack) >= pkt.room_limit):
                m.d.sync += pkt.ev.eq(EV[core_acc.SHARE_EXCEEDED])
            with m.Else():
                # now: the floor advance may have freed the only free slots
                _allocate(m, tree, slots, hdr, pkt, look.f_idx)
                m.d.sync += pkt.cont.eq(K_COMPLETE)
                m.next = "NEXT"
        with m.Case(K_COMPLETE):
            with m.If(slots.nseen[sl] == tree.nch[t]):
                with m.If(tree.root[t]):
                    m.d.sync += slots.state[sl].eq(S_RESULT)
                    _results_to(
                        m, tree, hdr, pkt, slots.cap[sl], tree.mask[t], ECT0, slots.ce[sl], pkt.op, slots.retx[sl]
                    )
                with m.Else():
                    m.d.sync += slots.state[sl].eq(S_PARTIAL)
                    _partial(m, slots, pkt, Mux(slots.retx[sl], FLAG_RETRANSMIT, 0), pkt.op, tree.floor[t])
        with m.Case(K_DUPEMIT):
            with m.If(slots.state[sl] == S_RESULT):
                _results_to(
                    m, tree, hdr, pkt, slots.cap[sl], pkt.port_mask, ECT0, slots.ce[sl], OP_PASS_A, slots.retx[sl]
                )
            with m.Else():
                _partial(m, slots, pkt, FLAG_RETRANSMIT, OP_PASS_A, tree.floor[t])
        with m.Case(K_ACKEMIT):
            with m.If(~tree.root[t] & pkt.moved):
                m.d.sync += [
                    pkt.emit.eq(1),
                    pkt.op.eq(OP_PASS_B),
                    pkt.e_flags.eq(FLAG_ACK),
                    pkt.e_cap.eq(tree.cap[t]),
                    pkt.e_ack.eq(tree.floor[t]),
                    pkt.e_seq.eq(tree.floor[t]),
                    pkt.e_dests.eq(pkt.parent_mask),
                    pkt.e_ecn.eq(ECT0),
                ]


def _start(m: Module, dp: AggregationDatapath, hdr: Header, pkt: Flight, beats: BeatPipeline) -> None:
    """Issue beat 0 (the emitted header) and the packet's event, once its slot has no beat in flight."""
    m.d.comb += pkt.busy.eq(1)
    reads = pkt.op != OP_PASS_B
    with m.If(~(reads & beats.hazard)):
        m.d.comb += [
            beats.issue.valid.eq(1),
            beats.issue.data.eq(beats.beat0),
            beats.issue.beat.eq(0),
            beats.issue.last.eq(hdr.last),
            dp.event_valid.eq(1),
            dp.event_emit.eq(pkt.emit),
        ]
        m.d.sync += beats.issue.beat_no.eq(1)
        with m.If(hdr.last):
            m.next = "ACCEPT"
        with m.Else():
            m.next = "STREAM"


def _stream(m: Module, ing: IngressBuffer, pkt: Flight, beats: BeatPipeline) -> None:
    """Issue the packet's remaining beats from the ingress buffer."""
    m.d.comb += [pkt.busy.eq(1), ing.b_ready.eq(1)]
    with m.If(ing.b_valid):
        m.d.comb += [
            beats.issue.valid.eq(1),
            beats.issue.data.eq(ing.b_data),
            beats.issue.beat.eq(beats.issue.beat_no),
            beats.issue.last.eq(ing.b_last),
        ]
        m.d.sync += beats.issue.beat_no.eq(beats.issue.beat_no + 1)
        with m.If(ing.b_last):
            m.next = "ACCEPT"
