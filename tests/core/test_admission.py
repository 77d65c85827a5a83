"""Admission (threshold, capacity), errors, groups, ids, shares, and teardown properties."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panama.core.accelerator import Accelerator
from panama.core.controller import (
    DEFAULT_THRESHOLD_BYTES,
    MAX_TREES,
    Controller,
    ControllerError,
    install,
    uninstall,
)
from panama.core.topology import fat_tree, leaf_spine

FT4 = fat_tree(4)
LS = leaf_spine(4, 2, 4)
BIG = 10**9


def test_threshold_boundary():
    ctl = Controller(LS)
    at = ctl.admit("at", ["h0", "h4"], DEFAULT_THRESHOLD_BYTES, 1)
    below = ctl.admit("below", ["h0", "h4"], DEFAULT_THRESHOLD_BYTES - 1, 1)
    assert at.admitted and at.mode == "in-network" and at.reason.startswith("in-network")
    assert not below.admitted and below.trees == [] and below.mode == "host"
    assert "below threshold_bytes 40000000" in below.reason
    small = Controller(LS, threshold_bytes=1000).admit("s", ["h0", "h4"], 1000, 1)
    assert small.admitted


@pytest.mark.parametrize(
    "hosts, words",
    [
        (["h3"], "single worker"),
        (["h3", "h3", "h3"], "all 3 workers are on host h3"),
        (["h1", "h2", "h1"], "host h1 runs 2 workers"),
    ],
)
def test_not_admitted_placements(hosts, words):
    ctl = Controller(LS)
    plan = ctl.admit("j", hosts, BIG, 2)
    assert not plan.admitted and words in plan.reason and not plan.trees
    assert "j" in ctl.plans  # still a live job (using host-based allreduce) until released
    ctl.release("j")
    assert ctl.is_empty()


@pytest.mark.parametrize(
    "args, field, words",
    [
        (("j", ["h0", "h99"], BIG, 1), "hosts", "unknown host 'h99'"),
        (("j", ["h0", "leaf1"], BIG, 1), "hosts", "'leaf1' is a tor switch"),
        (("j", [], BIG, 1), "hosts", "no workers"),
        (("j", "h0,h1", BIG, 1), "hosts", "sequence of host names"),
        (("", ["h0", "h4"], BIG, 1), "name", "non-empty"),
        (("j", ["h0", "h4"], -1, 1), "size_bytes", ">= 0"),
        (("j", ["h0", "h4"], 1.5, 1), "size_bytes", "integer"),
        (("j", ["h0", "h4"], True, 1), "size_bytes", "integer"),
        (("j", ["h0", "h4"], BIG, 0), "num_trees", ">= 1"),
        (("j", ["h0", "h4"], BIG, MAX_TREES + 1), "num_trees", "16-bit"),
    ],
)
def test_bad_requests_raise_naming_the_field(args, field, words):
    ctl = Controller(LS)
    with pytest.raises(ControllerError) as info:
        ctl.admit(*args)
    assert info.value.field == field and words in str(info.value)
    assert ctl.is_empty()  # a refused request leaves nothing behind


def test_duplicate_and_unknown_jobs():
    ctl = Controller(LS)
    ctl.admit("j", ["h0", "h4"], BIG, 1)
    with pytest.raises(ControllerError, match="already exists") as info:
        ctl.admit("j", ["h1", "h5"], BIG, 1)
    assert info.value.field == "name"
    with pytest.raises(ControllerError, match="unknown job 'k'"):
        ctl.release("k")
    ctl.release("j")
    with pytest.raises(ControllerError, match="unknown job 'j'"):
        ctl.release("j")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"group_pool": "10.0.0.0/8"}, "group_pool"),
        ({"group_pool": "239.1.0.1/16"}, "group_pool"),
        ({"group_pool": "nonsense"}, "group_pool"),
        ({"threshold_bytes": -1}, "threshold_bytes"),
        ({"max_jobs_per_switch": 0}, "max_jobs_per_switch"),
        ({"packet_memory": 1}, "packet_memory"),
    ],
)
def test_bad_controller_settings(kwargs, field):
    with pytest.raises(ControllerError) as info:
        Controller(LS, **kwargs)
    assert info.value.field == field


def test_capacity_by_job_limit_and_recovery():
    ctl = Controller(LS, max_jobs_per_switch=2)
    assert ctl.admit("a", ["h0", "h4"], BIG, 1).admitted  # leaf0, leaf1, spine0
    assert ctl.admit("b", ["h1", "h8"], BIG, 1).admitted  # leaf0, leaf2, spine1
    c = ctl.admit("c", ["h2", "h12"], BIG, 1)  # leaf0 is full
    assert not c.admitted
    assert "leaf0 already serves 2 jobs (max_jobs_per_switch=2)" in c.reason
    d = ctl.admit("d", ["h5", "h9"], BIG, 2)  # leaf1, leaf2 have room; spines each hold 1 job
    assert d.admitted and len(d.trees) == 2
    e = ctl.admit("e", ["h13", "h6"], BIG, 1)  # leaf3 free, leaf1 now at 2 jobs
    assert not e.admitted and "leaf1" in e.reason
    ctl.release("c")
    ctl.release("a")
    assert ctl.admit("c2", ["h2", "h12"], BIG, 1).admitted
    ctl.check_invariants()


def test_full_roots_are_skipped_and_trees_clamped():
    ctl = Controller(FT4, max_jobs_per_switch=1)
    a = ctl.admit("a", ["h0", "h8"], BIG, 1)
    assert [t.root for t in a.trees] == ["core0"]
    b = ctl.admit("b", ["h4", "h12"], BIG, 4)  # pods 1 and 3: core0 is full
    assert b.admitted and sorted(t.root for t in b.trees) == ["core1", "core2", "core3"]
    assert any("clamped from 4 to 3" in w and "usable roots" in w for w in b.warnings)
    assert any("skipped for lack of accelerator room" in w and "core0" in w for w in b.warnings)
    c = ctl.admit("c", ["h2", "h6"], BIG, 1)  # pods 0 and 1: every core is full
    assert not c.admitted and "no usable root" in c.reason


def test_capacity_by_packet_memory():
    ctl = Controller(LS, packet_memory=8)
    a = ctl.admit("a", ["h0", "h4"], BIG, 2)  # 2 trees x 2 slots fit in 8
    assert a.admitted
    b = ctl.admit("b", ["h1", "h5"], BIG, 2)  # share 8 // 2 = 4 = 2 trees x 2 slots: fits
    assert b.admitted
    c = ctl.admit("c", ["h2", "h6"], BIG, 1)  # share 8 // 3 = 2 < 4 needed by a and b
    assert not c.admitted and "packet_memory=8" in c.reason
    clamp = Controller(LS, packet_memory=4).admit("x", ["h0", "h4"], BIG, 2)
    assert clamp.admitted and len(clamp.trees) == 2
    clamp = Controller(leaf_spine(2, 4, 2), packet_memory=6).admit("x", ["h0", "h2"], BIG, 4)
    assert len(clamp.trees) == 3 and "slots at leaf0 holds at most 3 trees" in clamp.warnings[0]


def test_group_pool_round_robin_and_exhaustion():
    ctl = Controller(FT4, group_pool="239.9.9.0/30")  # 4 addresses
    a = ctl.admit("a", ["h0", "h8"], BIG, 3)
    assert [t.group for t in a.trees] == ["239.9.9.0", "239.9.9.1", "239.9.9.2"]
    b = ctl.admit("b", ["h1", "h9"], BIG, 2)
    assert [t.group for t in b.trees] == ["239.9.9.3"] and "free addresses" in b.warnings[0]
    c = ctl.admit("c", ["h2", "h10"], BIG, 1)
    assert not c.admitted and "exhausted" in c.reason
    ctl.release("a")
    d = ctl.admit("d", ["h3", "h11"], BIG, 1)
    assert [t.group for t in d.trees] == ["239.9.9.0"]
    ctl.release("c")
    e = ctl.admit("e", ["h3", "h12"], BIG, 1)
    assert [t.group for t in e.trees] == ["239.9.9.1"]  # round robin: next after the last handed out


def test_groups_not_reused_soon_after_release():
    ctl = Controller(LS)
    first = ctl.admit("a", ["h0", "h4"], BIG, 2)
    ctl.release("a")
    second = ctl.admit("b", ["h0", "h4"], BIG, 2)
    assert not {t.group for t in first.trees} & {t.group for t in second.trees}
    assert second.job_id == first.job_id + 1  # job ids move on too


def test_shares_and_forwarding_table():
    ctl = Controller(LS, packet_memory=1000)
    a = ctl.admit("a", ["h0", "h4"], BIG, 2)
    b = ctl.admit("b", ["h1", "h8"], BIG, 1)
    assert ctl.jobs_at("leaf0") == [a.job_id, b.job_id]
    assert ctl.share_slots("leaf0") == 500 and ctl.share_slots("leaf1") == 1000
    assert ctl.job_shares("leaf0") == {a.job_id: 500, b.job_id: 500}
    assert ctl.share_slots("leaf3") == 1000 and ctl.job_shares("leaf3") == {}
    table = ctl.forwarding_table("leaf0")
    assert table["upstream"] == {(a.job_id, 0): "spine0", (a.job_id, 1): "spine1", (b.job_id, 0): "spine0"}
    assert table["downstream"][(a.job_id, 1)] == ("h0",) and table["downstream"][(b.job_id, 0)] == ("h1",)
    root = ctl.switch_entries("spine0")
    assert [(e.job_id, e.parent, e.children) for e in root] == [
        (a.job_id, None, ("leaf0", "leaf1")),
        (b.job_id, None, ("leaf0", "leaf2")),
    ]
    ctl.release("a")
    assert ctl.share_slots("leaf0") == 1000 and ctl.jobs_at("leaf1") == []
    with pytest.raises(ControllerError, match="unknown switch"):
        ctl.share_slots("h0")


def test_tree_caps_follow_the_shares_as_jobs_come_and_go():
    """A live job's caps shrink when a later job shares its switches and grow back when it
    leaves; each answer is the plan's rule on the shares of that moment (the controller
    keeps one answer per job and state)."""
    from panama.core.plans import tree_cwnd_cap

    ctl = Controller(LS, packet_memory=1000)
    ctl.admit("a", ["h0", "h4"], BIG, 2)

    def fresh(name: str) -> list[int]:  # the rule written plainly, from the public queries
        plan = ctl.plans[name]
        caps = []
        for t in plan.trees:
            slots = {}
            for sw in t.entries:
                mine = sum(1 for e in ctl.switch_entries(sw) if e.job_id == plan.job_id)
                slots[sw] = ctl.share_slots(sw) // mine
            caps.append(tree_cwnd_cap(t, slots))
        return caps

    alone = ctl.tree_caps("a")
    assert alone == fresh("a")
    ctl.tree_caps("a").clear()  # a copy: the next answer is whole
    assert ctl.tree_caps("a") == alone
    ctl.admit("b", ["h1", "h5"], BIG, 2)  # the same leaves and spines
    shared = ctl.tree_caps("a")
    assert shared == fresh("a") and all(s < c for s, c in zip(shared, alone))
    assert ctl.tree_caps("b") == fresh("b")
    ctl.release("b")
    assert ctl.tree_caps("a") == alone
    with pytest.raises(ControllerError, match="unknown job"):
        ctl.tree_caps("b")


@pytest.mark.parametrize("reserve", [0, 1, 2])
def test_accelerator_shares_follow_the_controller(reserve):
    """The nominal share the controller reports is what the accelerator computes, reserve included."""
    accs = {s: Accelerator(90, name=s, store_payloads=False, reserve_shares=reserve) for s in LS.switches}
    ctl = Controller(LS, packet_memory=90, reserve_shares=reserve)
    plans = [
        ctl.admit(n, hosts, BIG, 2) for n, hosts in (("a", ["h0", "h4"]), ("b", ["h1", "h8"]), ("c", ["h2", "h12"]))
    ]
    for p in plans:
        install(p, accs)
    for s, acc in accs.items():
        assert sorted(acc.jobs()) == ctl.jobs_at(s)
        assert acc.job_share() == ctl.share_slots(s)
    assert ctl.share_slots("leaf0") == 90 // (3 + reserve)


def test_admission_counts_the_reserved_shares():
    """A share is packet_memory // (jobs + reserve): the reserve refuses a job that fits without it."""
    plain = Controller(LS, packet_memory=12)
    held = Controller(LS, packet_memory=12, reserve_shares=5)
    for ctl in (plain, held):
        assert ctl.admit("a", ["h0", "h4"], BIG, 1).admitted  # 12 // 1 and 12 // 6 = 2 slots: both fit
    assert plain.admit("b", ["h1", "h5"], BIG, 1).admitted  # 12 // 2 = 6 slots
    late = held.admit("b", ["h1", "h5"], BIG, 1)  # 12 // 7 = 1 slot < MIN_SLOTS_PER_TREE
    assert not late.admitted and "slots" in late.reason
    assert held.share_slots("leaf0") == 2 and plain.share_slots("leaf0") == 6
    with pytest.raises(ControllerError):
        Controller(LS, reserve_shares=-1)


def test_install_is_all_or_nothing():
    ctl = Controller(LS)
    plan = ctl.admit("a", ["h0", "h4", "h8"], BIG, 2)
    accs = {s: Accelerator(64, name=s, store_payloads=False) for s in LS.switches if s != "leaf2"}
    with pytest.raises(ControllerError, match="no accelerator for switch leaf2"):
        install(plan, accs)
    assert all(acc.jobs() == [] for acc in accs.values())


OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "release"]),
        st.lists(st.integers(0, 15), min_size=1, max_size=6),  # worker hosts (duplicates allowed)
        st.sampled_from([1, DEFAULT_THRESHOLD_BYTES - 1, DEFAULT_THRESHOLD_BYTES, BIG]),
        st.integers(1, 5),
        st.integers(0, 1000),  # which live job to release
    ),
    max_size=30,
)


@pytest.mark.parametrize("topo", [FT4, LS], ids=["ft4", "ls"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, max_jobs=st.integers(1, 4), memory=st.sampled_from([4, 8, 64]))
def test_random_admit_release_sequences_leave_nothing_behind(topo, ops, max_jobs, memory):
    ctl = Controller(topo, max_jobs_per_switch=max_jobs, packet_memory=memory)
    accs = {s: Accelerator(memory, name=s, store_payloads=False) for s in topo.switches}
    n = 0
    for op, host_ids, size, trees, pick in ops:
        if op == "admit":
            plan = ctl.admit(f"j{n}", [f"h{i}" for i in host_ids], size, trees)
            n += 1
            if plan.admitted:
                assert size >= DEFAULT_THRESHOLD_BYTES and len(set(host_ids)) == len(host_ids) > 1
            install(plan, accs)
        elif ctl.plans:
            names = list(ctl.plans)
            plan = ctl.release(names[pick % len(names)])
            uninstall(plan, accs)
        ctl.check_invariants()
        live = [t.group for p in ctl.plans.values() for t in p.trees]
        assert len(live) == len(set(live)) and set(live) == set(ctl.groups())
        assert all(ipaddress.IPv4Address(g) in ipaddress.IPv4Network("239.1.0.0/16") for g in live)
        for s, acc in accs.items():
            assert sorted(acc.jobs()) == ctl.jobs_at(s)
            if acc.jobs():
                assert acc.job_share() == ctl.share_slots(s)
            acc.check_invariants()
    for name in list(ctl.plans):
        uninstall(ctl.release(name), accs)
    assert ctl.is_empty() and ctl.root_loads() == {} and ctl.groups() == {}
    assert all(ctl.switch_entries(s) == [] for s in topo.switches)
    assert all(acc.jobs() == [] and acc.used_slots == 0 for acc in accs.values())
