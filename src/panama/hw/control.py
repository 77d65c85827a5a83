"""The control interface of the aggregation datapath: the host CPU's register access to
the tree table.

Contract: :func:`build_control` adds to the datapath's module ``m`` the register file view
of the tree table: ``ctl_rdata`` shows field ``ctl_field`` (:data:`~panama.hw.layout.FIELDS`)
of tree ``ctl_tree`` (child ``ctl_index`` for ``child_port``) combinationally; a write
(``ctl_valid & ctl_ready & ctl_we``) sets the field to ``ctl_wdata``. Three commands are
fields too: ``init`` clears a tree's floor, acks, counters and hold, ``release`` frees
every slot of the tree, ``grow_done`` (``st.grow_done``) ends the header FSM's wait for
the host (``HOSTWAIT``). ``ctl_ready`` is driven by the header FSM
(:mod:`panama.hw.header_fsm`): control access happens between packets. ``dp`` is the
:class:`~panama.hw.datapath.AggregationDatapath`, ``st`` the namespace of internal
signals it shares with its parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amaranth import Cat, Const, Module, Signal

from panama.hw.layout import HOLD_NONE, S_FREE, F, _bits_for

if TYPE_CHECKING:
    from types import SimpleNamespace

    from panama.hw.datapath import AggregationDatapath

__all__ = ["build_control"]


def build_control(m: Module, dp: AggregationDatapath, st: SimpleNamespace) -> None:
    """Add the control interface to ``m``; sets ``st.grow_done``."""
    cfg = dp.cfg
    C, S = cfg.max_children, cfg.slots
    cbits = _bits_for(C)
    # ------------------------------------------------------------ control interface
    ct = dp.ctl_tree
    cidx = Cat(dp.ctl_index, ct)
    rsel = {
        "valid": st.t_valid[ct],
        "job_id": st.t_job[ct],
        "tree_id": st.t_tid[ct],
        "nchildren": st.t_nch[ct],
        "child_port": st.t_chport[cidx],
        "child_mask": st.t_mask[ct],
        "parent": st.t_parent[ct],
        "is_root": st.t_root[ct],
        "target": st.t_target[ct],
        "limit": st.t_limit[ct],
        "cap": st.t_cap[ct],
        "cap_sent": st.t_capsent[ct],
        "hold_mode": st.t_hmode[ct],
        "hold_seq": st.t_hseq[ct],
        "hold_cap": st.t_hcap[ct],
        "used": st.t_used[ct],
        "floor": st.t_floor[ct],
        "key_hi": st.t_keyhi[ct],
        "key_lo": st.t_keylo[ct],
    }
    with m.Switch(dp.ctl_field):
        for name, sig in rsel.items():
            with m.Case(F[name]):
                m.d.comb += dp.ctl_rdata.eq(sig)
    wdat = dp.ctl_wdata
    ctl_fire = dp.ctl_valid & dp.ctl_ready & dp.ctl_we
    st.grow_done = Signal()
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
                m.d.sync += st.t_chport[cidx].eq(wdat)
            with m.Case(F["init"]):
                m.d.sync += [
                    st.t_floor[ct].eq(0),
                    st.t_atfloor[ct].eq(st.t_nch[ct]),
                    st.t_used[ct].eq(0),
                    st.t_capsent[ct].eq(0),
                    st.t_hmode[ct].eq(HOLD_NONE),
                    st.t_limit[ct].eq(0),
                ]
                for c in range(C):
                    m.d.sync += st.t_ack[Cat(Const(c, cbits), ct)].eq(0)
            with m.Case(F["release"]):
                for s in range(S):
                    with m.If(st.s_valid[s] & (st.s_tree[s] == ct)):
                        m.d.sync += [st.s_valid[s].eq(0), st.s_state[s].eq(S_FREE)]
                m.d.sync += [st.t_used[ct].eq(0), st.t_limit[ct].eq(0)]
            with m.Case(F["grow_done"]):
                m.d.comb += st.grow_done.eq(1)
