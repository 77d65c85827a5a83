"""The window that fills a tree's path without a queue (pure: topology and plan in, packets out).

Contract
--------
:func:`path_windows` gives, for every tree of one job's plan, the number of packets a
worker must keep in flight on that tree so that the tree's bottleneck share is busy
when no queue has formed anywhere: its *path bandwidth-delay product*. The
``dctcp-path`` congestion control (:mod:`panama.core.cc`) uses it as the ceiling and the
starting point of every tree's window (docs/design.md, "ECN"). The controller knows
every link's rate and propagation delay and every tree's hops, so this needs no
measurement and is the same on every worker of a tree (lock-step).

Model (per tree, every quantity from the topology):

- a link crossed by ``n`` trees of the job gives each of them ``rate / n`` (a host's
  link is crossed by every tree; on a fat-tree the trees part above the ToR);
- the tree's bottleneck share is the smallest such share over its links (a slot
  completes only when every worker's path delivered, so the slowest link paces all);
- the base round trip of a worker is, over the links from its host to the root and
  back, ``2 x (propagation + serialisation of one packet)`` plus ``hop_latency_ps``
  for every accelerator a contribution or result passes (each non-root switch twice,
  the root once); the tree's base RTT is the largest over its workers;
- window = ``ceil(bottleneck share x base RTT / packet bits)``, at least 1.

Results are integers of packets and do not depend on the order of hosts or trees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from panama.core.plans import TreePlan
from panama.core.topology import Topology
from panama.core.units import PS_PER_S

__all__ = ["path_windows", "tree_base_rtt_ps"]


def _parents(tree: TreePlan) -> dict[str, str]:
    return {child: parent for child, parent in tree.edges}


def tree_base_rtt_ps(topology: Topology, tree: TreePlan, packet_bytes: int, hop_latency_ps: int = 0) -> int:
    """Largest base round trip (ps) over the tree's workers: no queue anywhere (see module docstring)."""
    parent = _parents(tree)
    worst = 0
    for child, _ in tree.edges:
        if not topology.is_host(child):
            continue
        rtt = 0
        node = child
        while node != tree.root:
            up = parent[node]
            rate = topology.rate_bps(node, up)
            rtt += 2 * (topology.delay_ps(node, up) + round(packet_bytes * 8 * PS_PER_S / rate))
            if up != tree.root:
                rtt += 2 * hop_latency_ps
            node = up
        rtt += hop_latency_ps  # the root aggregates once
        worst = max(worst, rtt)
    return worst


def path_windows(
    topology: Topology, trees: Sequence[TreePlan], packet_bytes: int, hop_latency_ps: int = 0
) -> list[int]:
    """Per tree of one job (in the order given): its path bandwidth-delay product in packets."""
    if packet_bytes <= 0:
        raise ValueError(f"packet_bytes must be > 0, got {packet_bytes}")
    if hop_latency_ps < 0:
        raise ValueError(f"hop_latency_ps must be >= 0, got {hop_latency_ps}")
    crossing: dict[frozenset[str], int] = {}
    for tree in trees:
        for child, parent in tree.edges:
            key = frozenset((child, parent))
            crossing[key] = crossing.get(key, 0) + 1
    windows = []
    for tree in trees:
        share_bps = min(topology.rate_bps(c, p) / crossing[frozenset((c, p))] for c, p in tree.edges)
        rtt_ps = tree_base_rtt_ps(topology, tree, packet_bytes, hop_latency_ps)
        windows.append(max(1, math.ceil(share_bps * rtt_ps / PS_PER_S / (8 * packet_bytes))))
    return windows
