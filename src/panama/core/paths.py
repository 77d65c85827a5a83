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


def tree_base_rtt_ps(topology: Topology, tree: TreePlan, packet_bytes: int, hop_latency_ps: int = 0) -> int:
    """Largest base round trip (ps) over the tree's workers: no queue anywhere (see module docstring).

    Each node's round trip to the root is its link's plus its parent's, so every link is
    costed once however many workers share it (integers: the sums are exact in any order).
    """
    root = tree.root
    parent = dict(tree.edges)
    rtt_to_root = {root: hop_latency_ps}  # the root aggregates once
    worst = 0
    for child, _ in tree.edges:
        if not topology.is_host(child):
            continue
        pending = []  # nodes from the host up to the first one already costed
        node = child
        while node not in rtt_to_root:
            pending.append(node)
            node = parent[node]
        for node in reversed(pending):
            up = parent[node]
            rate = topology.rate_bps(node, up)
            link_ps = 2 * (topology.delay_ps(node, up) + round(packet_bytes * 8 * PS_PER_S / rate))
            rtt_to_root[node] = link_ps + (2 * hop_latency_ps if up != root else 0) + rtt_to_root[up]
        worst = max(worst, rtt_to_root[child])
    return worst


def path_windows(
    topology: Topology, trees: Sequence[TreePlan], packet_bytes: int, hop_latency_ps: int = 0
) -> list[int]:
    """Per tree of one job (in the order given): its path bandwidth-delay product in packets."""
    if packet_bytes <= 0:
        raise ValueError(f"packet_bytes must be > 0, got {packet_bytes}")
    if hop_latency_ps < 0:
        raise ValueError(f"hop_latency_ps must be >= 0, got {hop_latency_ps}")
    # A link's key is its two ends in name order: the same whichever way round a tree crosses it.
    links = [[(c, p) if c < p else (p, c) for c, p in tree.edges] for tree in trees]
    crossing: dict[tuple[str, str], int] = {}
    for tree_links in links:
        for link in tree_links:
            crossing[link] = crossing.get(link, 0) + 1
    windows = []
    for tree, tree_links in zip(trees, links):
        share_bps = min(topology.rate_bps(c, p) / crossing[link] for (c, p), link in zip(tree.edges, tree_links))
        rtt_ps = tree_base_rtt_ps(topology, tree, packet_bytes, hop_latency_ps)
        windows.append(max(1, math.ceil(share_bps * rtt_ps / PS_PER_S / (8 * packet_bytes))))
    return windows
