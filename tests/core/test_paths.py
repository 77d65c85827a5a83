"""Path windows: the packets in flight that fill a tree's bottleneck share with no queue."""

import math

import pytest

from panama.core.controller import Controller
from panama.core.paths import path_windows, tree_base_rtt_ps
from panama.core.topology import parse_topology
from panama.core.units import PS_PER_S

PACKET = 1500
LATENCY_PS = 500_000


def _plan(spec: str, hosts: list[str], trees: int):
    topo = parse_topology(spec)
    plan = Controller(topo).admit("j", hosts, 10**9, num_trees=trees)
    assert plan.admitted
    return topo, plan


def test_a_rack_job_by_hand():
    # One ToR: host -> tor -> host. RTT = 2 x (1 us + 1.2 us) + the root's 0.5 us = 4.9 us;
    # the host link carries the job's one tree: 10 Gb/s x 4.9 us / 12,000 bits = 4.08 -> 5.
    topo, plan = _plan("leaf-spine:leaves=2,spines=2,hosts_per_leaf=4", ["h0", "h1", "h2"], 1)
    (tree,) = plan.trees
    assert tree.root == "leaf0"
    assert tree_base_rtt_ps(topo, tree, PACKET, LATENCY_PS) == 2 * (1_000_000 + 1_200_000) + LATENCY_PS
    assert path_windows(topo, plan.trees, PACKET, LATENCY_PS) == [5]


@pytest.mark.parametrize("gbps, expected", [(10, 4), (40, 9), (100, 20)])
def test_fat_tree_trees_share_the_host_link(gbps, expected):
    # A job across pods on a k=8 fat-tree: 4 trees rooted at cores, 3 links up and down.
    # RTT = 6 x (1 us + serialisation) + 5 accelerators x 0.5 us; each tree gets a quarter
    # of the host link.
    topo, plan = _plan(f"fat-tree:k=8,gbps={gbps}", [f"h{i}" for i in range(0, 128, 8)], 4)
    rtt_ps = 6 * (1_000_000 + round(PACKET * 8 * PS_PER_S / (gbps * 1e9))) + 5 * LATENCY_PS
    assert {tree_base_rtt_ps(topo, t, PACKET, LATENCY_PS) for t in plan.trees} == {rtt_ps}
    want = math.ceil(gbps * 1e9 / 4 * rtt_ps / PS_PER_S / (8 * PACKET))
    assert want == expected
    assert path_windows(topo, plan.trees, PACKET, LATENCY_PS) == [expected] * 4


def test_more_trees_mean_smaller_windows_and_the_same_pipe():
    topo, one = _plan("fat-tree:k=8,gbps=100", [f"h{i}" for i in range(0, 128, 8)], 1)
    topo, four = _plan("fat-tree:k=8,gbps=100", [f"h{i}" for i in range(0, 128, 8)], 4)
    (w1,) = path_windows(topo, one.trees, PACKET, LATENCY_PS)
    w4 = path_windows(topo, four.trees, PACKET, LATENCY_PS)
    assert sum(w4) - 4 < w1 <= sum(w4)


def test_order_of_trees_does_not_matter_and_bad_sizes_are_refused():
    topo, plan = _plan("fat-tree:k=4", ["h0", "h5", "h9", "h13"], 2)
    assert path_windows(topo, plan.trees[::-1], PACKET)[::-1] == path_windows(topo, plan.trees, PACKET)
    with pytest.raises(ValueError, match="packet_bytes"):
        path_windows(topo, plan.trees, 0)
    with pytest.raises(ValueError, match="hop_latency_ps"):
        path_windows(topo, plan.trees, PACKET, -1)
