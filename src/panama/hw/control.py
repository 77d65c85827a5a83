"""The control interface of the aggregation datapath: the host CPU's register access to
the tree table.

Contract: :func:`build_control` adds to the datapath's module ``m`` the register file view
of the tree table: ``ctl_rdata`` shows field ``ctl_field`` (:data:`~panama.hw.layout.FIELDS`)
of tree ``ctl_tree`` (child ``ctl_index`` for ``child_port``) combinationally; a write
(``ctl_valid & ctl_ready & ctl_we``) sets the field to ``ctl_wdata``. Three commands are
fields too: ``init`` clears a tree's floor, acks, counters and hold, ``release`` frees
every slot of the tree, ``grow_done`` (the signal returned) ends the header FSM's wait
for the host (``HOSTWAIT``). ``ctl_ready`` is driven by the header FSM
(:mod:`panama.hw.header_fsm`): control access happens between packets. ``dp`` is the
:class:`~panama.hw.datapath.AggregationDatapath`; the tree and slot tables are its
records (:class:`~panama.hw.datapath.TreeTable`, :class:`~panama.hw.datapath.SlotTable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amaranth import Cat, Const, Module, Signal

from panama.hw.layout import HOLD_NONE, S_FREE, F, _bits_for

if TYPE_CHECKING:
    from panama.hw.datapath import AggregationDatapath, SlotTable, TreeTable

__all__ = ["build_control"]


def build_control(m: Module, dp: AggregationDatapath, tree: TreeTable, slots: SlotTable) -> Signal:
    """Add the control interface to ``m``; returns ``grow_done``."""
    cfg = dp.cfg
    C, S = cfg.max_children, cfg.slots
    cbits = _bits_for(C)
    # ------------------------------------------------------------ control interface
    ct = dp.ctl_tree
    cidx = Cat(dp.ctl_index, ct)
    rsel = {
        "valid": tree.valid[ct],
        "job_id": tree.job[ct],
        "tree_id": tree.tid[ct],
        "nchildren": tree.nch[ct],
        "child_port": tree.chport[cidx],
        "child_mask": tree.mask[ct],
        "parent": tree.parent[ct],
        "is_root": tree.root[ct],
        "target": tree.target[ct],
        "limit": tree.limit[ct],
        "cap": tree.cap[ct],
        "cap_sent": tree.capsent[ct],
        "hold_mode": tree.hmode[ct],
        "hold_seq": tree.hseq[ct],
        "hold_cap": tree.hcap[ct],
        "used": tree.used[ct],
        "floor": tree.floor[ct],
        "key_hi": tree.keyhi[ct],
        "key_lo": tree.keylo[ct],
    }
    with m.Switch(dp.ctl_field):
        for name, sig in rsel.items():
            with m.Case(F[name]):
                m.d.comb += dp.ctl_rdata.eq(sig)
    wdat = dp.ctl_wdata
    ctl_fire = dp.ctl_valid & dp.ctl_ready & dp.ctl_we
    grow_done = Signal()
    with m.If(ctl_fire):
        with m.Switch(dp.ctl_field):
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
                m.d.sync += tree.chport[cidx].eq(wdat)
            with m.Case(F["init"]):
                m.d.sync += [
                    tree.floor[ct].eq(0),
                    tree.atfloor[ct].eq(tree.nch[ct]),
                    tree.used[ct].eq(0),
                    tree.capsent[ct].eq(0),
                    tree.hmode[ct].eq(HOLD_NONE),
                    tree.limit[ct].eq(0),
                ]
                for c in range(C):
                    m.d.sync += tree.ack[Cat(Const(c, cbits), ct)].eq(0)
            with m.Case(F["release"]):
                for s in range(S):
                    with m.If(slots.valid[s] & (slots.tree[s] == ct)):
                        m.d.sync += [slots.valid[s].eq(0), slots.state[s].eq(S_FREE)]
                m.d.sync += [tree.used[ct].eq(0), tree.limit[ct].eq(0)]
            with m.Case(F["grow_done"]):
                m.d.comb += grow_done.eq(1)
    return grow_done
