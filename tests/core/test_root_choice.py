"""Admission details the faster tree building must keep: intermediate switches that stop
the root choice, children in rank order, and round trips costed per link (core/paths)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from panama.core.controller import Controller
from panama.core.paths import tree_base_rtt_ps
from panama.core.topology import Topology, parse_topology
from panama.core.units import PS_PER_S


def test_intermediate_switches_without_room_stop_the_root_choice():
    # k=4 fat-tree, 6 slots per switch. j0 (pods 0, 1, 2) takes 3 trees: core0 and core1
    # cross agg4 (pod 2, position 0), core2 crosses agg5. j1 (pods 2, 3) finds agg4 full
    # (2 slots for j0's 2 trees, 3 for j1: 2 trees need 4); core2 and core3 both cross
    # agg5, where j1's share of 3 slots holds one tree: one tree, at the unloaded core3.
    topo = parse_topology("fat-tree:k=4")
    c = Controller(topo, threshold_bytes=0, packet_memory=6)
    j0 = c.admit("j0", ["h0", "h3", "h5", "h8"], 10, 4)
    assert [t.root for t in j0.trees] == ["core0", "core2", "core1"]
    j1 = c.admit("j1", ["h10", "h13", "h15"], 10, 4)
    assert [t.root for t in j1.trees] == ["core3"]
    assert j1.warnings[-1] == "only 1 trees fit: intermediate switches lack room for more"
    c.check_invariants()


def test_children_are_in_rank_order_whatever_the_order_of_the_hosts():
    topo = parse_topology("fat-tree:k=8")
    hosts = ["h10", "h2", "h9", "h33", "h1", "h40"]
    plan = Controller(topo, threshold_bytes=0).admit("j", hosts, 10, 4)
    assert plan.admitted and len(plan.trees) == 4
    for tree in plan.trees:
        for entry in tree.entries.values():
            assert list(entry.children) == sorted(entry.children, key=topo.rank)
    assert plan.trees[0].entries["tor0"].children == ("h1", "h2")
    assert plan.trees[0].entries["tor2"].children == ("h9", "h10")


def _rtt_per_worker(topo: Topology, tree, packet_bytes: int, hop_latency_ps: int) -> int:
    """The definition (module docstring of core/paths), walked from every worker."""
    parent = dict(tree.edges)
    worst = 0
    for child, _ in tree.edges:
        if not topo.is_host(child):
            continue
        rtt, node = 0, child
        while node != tree.root:
            up = parent[node]
            ser_ps = round(packet_bytes * 8 * PS_PER_S / topo.rate_bps(node, up))
            rtt += 2 * (topo.delay_ps(node, up) + ser_ps) + (2 * hop_latency_ps if up != tree.root else 0)
            node = up
        worst = max(worst, rtt + hop_latency_ps)
    return worst


def _irregular(seed: int) -> Topology:
    """Three tiers, random uplinks with mixed rates and delays (several paths per pair)."""
    rng = random.Random(seed)
    g = nx.Graph()
    tors, aggs, cores = [f"tor{i}" for i in range(6)], [f"agg{i}" for i in range(4)], ["core0", "core1"]
    for n, kind in [(t, "tor") for t in tors] + [(a, "agg") for a in aggs] + [(c, "core") for c in cores]:
        g.add_node(n, kind=kind, pod=None)
    for i, t in enumerate(tors):
        for k in range(3):
            g.add_node(f"h{3 * i + k}", kind="host", pod=None)
            g.add_edge(f"h{3 * i + k}", t, rate_bps=rng.choice([10e9, 25e9]), delay_ps=rng.choice([500_000, 1_000_000]))
        for a in rng.sample(aggs, rng.randint(1, 2)):
            g.add_edge(t, a, rate_bps=rng.choice([10e9, 40e9]), delay_ps=rng.choice([1_000_000, 3_000_000]))
    for a in aggs:
        for c in cores:
            g.add_edge(a, c, rate_bps=100e9, delay_ps=2_000_000)
    return Topology(g)


@pytest.mark.parametrize("seed", range(12))
def test_round_trips_costed_per_link_equal_the_per_worker_walk(seed):
    try:
        topo = _irregular(seed)
    except Exception:  # a random draw that is not connected
        pytest.skip("disconnected draw")
    rng = random.Random(seed)
    hosts = rng.sample(topo.hosts, 8)
    plan = Controller(topo, threshold_bytes=0).admit("j", hosts, 10, 3)
    assert plan.admitted
    for tree in plan.trees:
        for packet_bytes, latency_ps in [(1500, 0), (1500, 500_000), (64, 1_000)]:
            got = tree_base_rtt_ps(topo, tree, packet_bytes, latency_ps)
            assert got == _rtt_per_worker(topo, tree, packet_bytes, latency_ps)


def test_rate_and_delay_of_a_missing_link_raise_key_error():
    topo = parse_topology("fat-tree:k=4")
    assert topo.rate_bps("h0", "tor0") == topo.rate_bps("tor0", "h0") == 10e9
    assert topo.delay_ps("agg0", "core0") == 1_000_000
    with pytest.raises(KeyError, match="no link h0-tor1"):
        topo.rate_bps("h0", "tor1")
    with pytest.raises(KeyError, match="no link nowhere-tor0"):
        topo.delay_ps("nowhere", "tor0")
