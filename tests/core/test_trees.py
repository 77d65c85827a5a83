"""Tree construction on random placements: shape, roots, state in real accelerators, balance."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panama.core.accelerator import Accelerator
from panama.core.controller import Controller, JobPlan, TreePlan, install, uninstall
from panama.core.topology import Topology, fat_tree, leaf_spine

TOPOLOGIES = {
    "ft4": fat_tree(4),
    "ft8": fat_tree(8),
    "ls": leaf_spine(6, 4, 4),
}
BIG = 10**9  # bytes, well above the threshold


def accelerators(topo: Topology) -> dict[str, Accelerator]:
    return {s: Accelerator(256, name=s, store_payloads=False) for s in topo.switches}


def check_tree(topo: Topology, plan: JobPlan, tree: TreePlan) -> None:
    """The tree spans exactly the job's ToRs, each worker under its ToR, rooted at tree.root."""
    hosts = set(plan.hosts)
    tors = {topo.tor_of(h) for h in hosts}
    g = nx.DiGraph(list(tree.edges))
    assert len(tree.edges) == g.number_of_edges(), "duplicate edge"
    assert nx.is_tree(g.to_undirected()), "not a tree (cycle or disconnected)"
    assert [n for n in g if g.out_degree(n) == 0] == [tree.root]
    assert all(g.out_degree(n) == 1 for n in g if n != tree.root), "a node with two parents"
    leaves = {n for n in g if g.in_degree(n) == 0}
    assert leaves == hosts or (len(tors) == 1 and leaves == hosts)
    for h in hosts:
        assert g.has_edge(h, topo.tor_of(h))
    assert {n for n in g if topo.tier(n) == "tor"} == tors, "tree must span exactly the job's ToRs"
    for child, parent in tree.edges:
        assert topo.graph.has_edge(child, parent), (child, parent)
        assert topo.level(child) < topo.level(parent), "edges point upward"
    # Host edges come first, then switch edges bottom-up; the root is last in switches.
    levels = [topo.level(c) for c, _ in tree.edges]
    assert levels == sorted(levels)
    assert tree.switches[-1] == tree.root
    assert set(tree.entries) == set(g) - hosts
    for sw, entry in tree.entries.items():
        assert entry.switch == sw and entry.job_id == plan.job_id and entry.tree_id == tree.tree_id
        assert entry.group == tree.group
        assert set(entry.children) == set(g.predecessors(sw))
        assert entry.parent == (None if sw == tree.root else next(g.successors(sw)))


def check_root_scope(topo: Topology, plan: JobPlan) -> None:
    tors = {topo.tor_of(h) for h in plan.hosts}
    roots = [t.root for t in plan.trees]
    if len(tors) == 1:
        assert plan.scope == "rack" and roots == [next(iter(tors))]
        return
    assert len(set(roots)) == len(roots), "distinct trees of a job need distinct roots"
    pods = {topo.pod(t) for t in tors}
    if topo.spines:
        assert plan.scope == "fabric" and all(topo.tier(r) == "spine" for r in roots)
    elif len(pods) == 1:
        assert plan.scope == "pod"
        assert all(topo.tier(r) == "agg" and topo.pod(r) in pods for r in roots)
    else:
        assert plan.scope == "fabric" and all(topo.tier(r) == "core" for r in roots)


def check_installed(accs: dict[str, Accelerator], plans: list[JobPlan]) -> None:
    """Accelerator state exists exactly on each tree's switches, with the plan's children/parent."""
    expected = {(s, p.job_id, t.tree_id): t.entries[s] for p in plans for t in p.trees for s in t.entries}
    for sw, acc in accs.items():
        for p in plans:
            for t in p.trees:
                key = (sw, p.job_id, t.tree_id)
                assert acc.has_tree(p.job_id, t.tree_id) == (key in expected), key
                if key in expected:
                    assert acc.children_of(p.job_id, t.tree_id) == expected[key].children
                    assert acc.parent_of(p.job_id, t.tree_id) == expected[key].parent


@st.composite
def placements(draw, topo: Topology):
    """A job placement biased towards one rack, one pod, or anywhere."""
    where = draw(st.sampled_from(["rack", "pod", "any"]))
    if where == "rack":
        tor = draw(st.sampled_from(topo.tors))
        pool = topo.hosts_of(tor)
    elif where == "pod" and not topo.spines:
        pod = draw(st.sampled_from(sorted({topo.pod(t) for t in topo.tors})))
        pool = [h for h in topo.hosts if topo.pod(h) == pod]
    else:
        pool = topo.hosts
    n = draw(st.integers(2, min(len(pool), 12)))
    return draw(st.permutations(pool))[:n]


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_placements_give_valid_trees(name, data):
    topo = TOPOLOGIES[name]
    ctl = Controller(topo, max_jobs_per_switch=64, packet_memory=4096)
    accs = accelerators(topo)
    plans = []
    for j in range(data.draw(st.integers(1, 4), label="jobs")):
        hosts = data.draw(placements(topo), label=f"hosts{j}")
        trees = data.draw(st.integers(1, 6), label=f"trees{j}")
        plan = ctl.admit(f"job{j}", hosts, BIG, trees)
        assert plan.admitted, plan.reason
        assert 1 <= len(plan.trees) <= trees
        assert [t.tree_id for t in plan.trees] == list(range(len(plan.trees)))
        for tree in plan.trees:
            check_tree(topo, plan, tree)
        check_root_scope(topo, plan)
        if len(plan.trees) < trees:
            assert plan.warnings and "clamped" in plan.warnings[0]
        install(plan, accs)
        plans.append(plan)
        check_installed(accs, plans)
    ctl.check_invariants()
    groups = [t.group for p in plans for t in p.trees]
    assert len(set(groups)) == len(groups)
    for p in plans:
        uninstall(p, accs)
        ctl.release(p.name)
    assert all(acc.jobs() == [] for acc in accs.values())
    assert ctl.is_empty()


def test_fat_tree_tree_shapes_k4():
    topo = TOPOLOGIES["ft4"]
    ctl = Controller(topo)
    rack = ctl.admit("rack", ["h0", "h1"], BIG, 3)
    assert [t.root for t in rack.trees] == ["tor0"] and rack.trees[0].edges == (("h0", "tor0"), ("h1", "tor0"))
    assert "clamped from 3 to 1" in rack.warnings[0]
    pod = ctl.admit("pod", ["h4", "h6", "h7"], BIG, 2)
    assert sorted(t.root for t in pod.trees) == ["agg2", "agg3"]
    for t in pod.trees:
        assert set(t.switches) == {"tor2", "tor3", t.root}
    across = ctl.admit("across", ["h0", "h8", "h15"], BIG, 2)
    assert {t.root for t in across.trees} == {"core0", "core2"}  # different agg groups: disjoint uplinks
    t0 = next(t for t in across.trees if t.root == "core0")
    assert t0.edges == (
        ("h0", "tor0"), ("h8", "tor4"), ("h15", "tor7"),
        ("tor0", "agg0"), ("tor4", "agg4"), ("tor7", "agg6"),
        ("agg0", "core0"), ("agg4", "core0"), ("agg6", "core0"),
    )  # fmt: skip
    too_many = ctl.admit("many", ["h1", "h9"], BIG, 9)
    assert len(too_many.trees) == 4 and "clamped from 9 to 4" in too_many.warnings[0]


def test_leaf_spine_one_tree_per_spine():
    topo = leaf_spine(4, 3, 2)
    ctl = Controller(topo)
    plan = ctl.admit("j", ["h0", "h3", "h7"], BIG, 3)
    assert [t.root for t in plan.trees] == ["spine0", "spine1", "spine2"]
    for t in plan.trees:
        assert t.edges[:3] == (("h0", "leaf0"), ("h3", "leaf1"), ("h7", "leaf3"))
        assert t.entries["leaf1"].children == ("h3",) and t.entries["leaf1"].parent == t.root
        assert t.entries[t.root].children == ("leaf0", "leaf1", "leaf3") and t.entries[t.root].parent is None


def uplinks(tree: TreePlan, topo: Topology) -> set[tuple[str, str]]:
    return {(c, p) for c, p in tree.edges if not topo.is_host(c)}


@pytest.mark.parametrize("k", [4, 8])
@settings(max_examples=25, deadline=None)
@given(jobs=st.integers(1, 24), trees=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_core_load_balanced_across_pods(k, jobs, trees, seed):
    """J jobs x T trees across pods: trees per core differ by at most one."""
    topo = TOPOLOGIES[f"ft{k}"]
    rng = np.random.default_rng(seed)
    ctl = Controller(topo, max_jobs_per_switch=1000, packet_memory=1 << 20)
    pods = k
    per_pod = len(topo.hosts) // pods
    for j in range(jobs):
        chosen_pods = rng.choice(pods, size=rng.integers(2, pods + 1), replace=False)
        hosts = [f"h{p * per_pod + int(rng.integers(per_pod))}" for p in chosen_pods]
        plan = ctl.admit(f"j{j}", hosts, BIG, trees)
        assert plan.scope == "fabric"
        assert len(plan.trees) == min(trees, len(topo.cores))
        if trees <= k // 2:  # enough roots in distinct agg groups: no shared uplink
            ups = [uplinks(t, topo) for t in plan.trees]
            for a in range(len(ups)):
                for b in range(a + 1, len(ups)):
                    assert not ups[a] & ups[b], (plan.trees[a].root, plan.trees[b].root)
    loads = [ctl.root_load(c) for c in topo.cores]
    assert sum(loads) == jobs * min(trees, len(topo.cores))
    assert max(loads) - min(loads) <= 1, loads


@settings(max_examples=25, deadline=None)
@given(jobs=st.integers(1, 20), trees=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_spine_load_balanced(jobs, trees, seed):
    topo = TOPOLOGIES["ls"]
    rng = np.random.default_rng(seed)
    ctl = Controller(topo, max_jobs_per_switch=1000, packet_memory=1 << 20)
    for j in range(jobs):
        leaves = rng.choice(len(topo.tors), size=rng.integers(2, len(topo.tors) + 1), replace=False)
        hosts = [topo.hosts_of(topo.tors[leaf])[0] for leaf in leaves]
        ctl.admit(f"j{j}", hosts, BIG, trees)
    loads = [ctl.root_load(s) for s in topo.spines]
    assert max(loads) - min(loads) <= 1, loads


def test_pod_jobs_spread_over_aggs():
    topo = TOPOLOGIES["ft8"]
    ctl = Controller(topo)
    for j in range(8):
        ctl.admit(f"j{j}", ["h0", "h4"], BIG, 1)  # pod 0: tor0, tor1
    assert [ctl.root_load(f"agg{i}") for i in range(4)] == [2, 2, 2, 2]


def test_bench_plan_k16(benchmark):
    """Planning on fat-tree k=16 (1024 hosts): a 64-worker cross-pod job with 8 trees."""
    topo = fat_tree(16)
    hosts = [f"h{i * 16}" for i in range(64)]

    def plan():
        ctl = Controller(topo)
        return ctl.admit("big", hosts, BIG, 8)

    result = benchmark.pedantic(plan, rounds=5, iterations=1)
    assert result.admitted and len(result.trees) == 8


def test_file_topology_with_redundant_paths():
    from panama.core.topology import topology_from_toml

    topo = topology_from_toml(
        """
links = [["h0", "t0"], ["h1", "t1"], ["h2", "t2"],
         ["t0", "a0"], ["t0", "a1"], ["t1", "a0"], ["t1", "a1"], ["t2", "a1"],
         ["a0", "c0"], ["a1", "c0"]]
[nodes]
tor = ["t0", "t1", "t2"]
agg = ["a0", "a1"]
core = ["c0"]
"""
    )
    ctl = Controller(topo)
    two = ctl.admit("two", ["h0", "h1"], BIG, 3)  # both aggs reach t0 and t1: the lowest roots
    assert [t.root for t in two.trees] == ["a0", "a1"] and "clamped from 3 to 2" in two.warnings[0]
    three = ctl.admit("three", ["h0", "h1", "h2"], BIG, 2)  # only a1 reaches all three ToRs
    assert [t.root for t in three.trees] == ["a1"]
    for plan in (two, three):
        for tree in plan.trees:
            check_tree(topo, plan, tree)


def test_no_common_root_is_host_based():
    from panama.core.topology import topology_from_edge_list

    topo = topology_from_edge_list("h0 tor0\nh1 tor1\ntor0 tor1\n")
    plan = Controller(topo).admit("j", ["h0", "h1"], BIG, 1)
    assert not plan.admitted and "no switch lies above all of the job's ToRs (tor0, tor1)" in plan.reason
