"""Shortest-path next-hop tables and ECMP hashing for the simulated network.

Contract
--------
* :func:`next_hops` returns, for every node and every destination host, the neighbours
  that lie on *some* shortest path (hop count) to that host: the equal-cost set ECMP
  chooses from. Computed with one BFS per ToR (hosts behind one ToR share all entries
  except at that ToR), so a k=16 fat-tree (1024 hosts) needs 64 BFS runs, not 1024.
* :func:`flow_hash` maps a flow id and a seeded salt to a 64-bit integer (splitmix64);
  :func:`ecmp_index` maps (flow hash, per-switch salt, set size) to an index. Each switch
  has its own salt so that choices at successive tiers are independent (no
  polarisation). The hash is computed once per flow; per hop only
  :func:`ecmp_index`'s arithmetic runs, and only where the set has more than one member.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import networkx as nx

__all__ = ["next_hops", "flow_hash", "ecmp_index", "splitmix64", "MASK64"]

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(x: int) -> int:
    """The splitmix64 finaliser: a fast, well-mixing bijection on 64-bit integers."""
    x = (x + _GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def flow_hash(flow_id: int, salt: int) -> int:
    """64-bit hash of a flow id under a seeded salt (stands in for the 5-tuple hash)."""
    return splitmix64((flow_id & MASK64) ^ splitmix64(salt & MASK64))


def ecmp_index(h: int, switch_salt: int, n: int) -> int:
    """Index in ``range(n)`` chosen for flow hash ``h`` at a switch with ``switch_salt``.

    Same formula as the inlined hot path in :meth:`panama.sim.network.Switch.receive`."""
    return ((((h ^ switch_salt) * _GOLDEN) & MASK64) >> 32) % n


def next_hops(
    graph: nx.Graph,
    hosts: Iterable[Hashable],
    attach: Mapping[Hashable, Hashable] | None = None,
) -> dict[Hashable, dict[Hashable, tuple[Hashable, ...]]]:
    """``table[node][host]`` = sorted tuple of neighbours of ``node`` on a shortest path to
    ``host`` (empty tuple for ``node == host``).

    ``attach`` maps each host to its access switch; hosts sharing an access switch share a
    BFS. Hosts with several links (no ``attach`` entry) get their own BFS.
    """
    hosts = list(hosts)
    attach = dict(attach or {})
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(sorted(nodes, key=str))}
    table: dict[Hashable, dict[Hashable, tuple[Hashable, ...]]] = {n: {} for n in nodes}
    groups: dict[Hashable, list[Hashable]] = {}
    for h in hosts:
        a = attach.get(h)
        if a is None or graph.degree(h) != 1:
            groups.setdefault(("host", h), []).append(h)
        else:
            groups.setdefault(a, []).append(h)
    for key, members in groups.items():
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "host" and key[1] in members:
            root = key[1]
        else:
            root = key
        dist = nx.single_source_shortest_path_length(graph, root)
        shared: dict[Hashable, tuple[Hashable, ...]] = {}
        for n in nodes:
            d = dist.get(n)
            if d is None or d == 0:
                continue
            hops = tuple(sorted((m for m in graph.adj[n] if dist.get(m) == d - 1), key=order.__getitem__))
            shared[n] = hops
        for h in members:
            for n, hops in shared.items():
                table[n][h] = hops
            if root != h:
                # Correct the entries that differ for a host behind a shared access switch:
                # the access switch itself forwards straight to the host, and the host's
                # own entry is empty; other hosts on the same switch reach it via the switch.
                table[root][h] = (h,)
                table[h][h] = ()
            else:
                table[h][h] = ()
    return table
