"""Shortest-path next-hop tables and ECMP hashing for the simulated network.

Contract
--------
* :func:`next_hops` returns, for every node and every destination host, the neighbours
  that lie on *some* shortest path (hop count) to that host: the equal-cost set ECMP
  chooses from. Computed with one BFS per ToR (hosts behind one ToR share all entries
  except at that ToR), so a k=16 fat-tree (1024 hosts) needs 128 BFS runs, not 1024.
* :func:`flow_hash` maps a flow id and a seeded salt to a 64-bit integer (splitmix64);
  :func:`ecmp_index` maps (flow hash, per-switch salt, set size) to an index. Each switch
  has its own salt so that choices at successive tiers are independent (no
  polarisation). The hash is computed once per flow; per hop only
  :func:`ecmp_index`'s arithmetic runs, and only where the set has more than one member.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import networkx as nx

__all__ = ["next_hops", "group_next_hops", "flow_hash", "ecmp_index", "splitmix64", "MASK64"]

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M64 = MASK64  # unsigned 64-bit C constants when compiled (routing.pxd)
_G64 = _GOLDEN


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

    The one ECMP choice of the simulator (:mod:`panama.sim.ports`,
    :mod:`panama.sim.lossless` and :mod:`panama.sim.nodes` call it). Compiled, ``h``
    and ``switch_salt`` are unsigned 64-bit integers (as :func:`flow_hash` and the
    network's salts are) and the product is taken in unsigned 64-bit arithmetic, which
    wraps as ``& MASK64`` does."""
    x = (h ^ switch_salt) & _M64
    return (((x * _G64) & _M64) >> 32) % n


def group_next_hops(
    graph: nx.Graph,
    hosts: Iterable[Hashable],
    attach: Mapping[Hashable, Hashable] | None = None,
) -> tuple[list[int], list[Hashable], dict[Hashable, list[tuple[Hashable, ...]]]]:
    """Shortest-path successors computed once per *group* of hosts.

    Hosts with the same access switch (``attach``) form one group whose root is that
    switch; other hosts are their own group and root. Returns ``(host_group, roots,
    table)``: ``host_group[i]`` is the group of the i-th host, ``roots[g]`` the group's
    root, ``table[node][g]`` the sorted neighbours of ``node`` on a shortest path to the
    root (empty at the root). Towards a host ``h`` in group ``g`` the successors are
    ``table[node][g]``, except at the root (``(h,)``) and at ``h`` itself (``()``).
    """
    hosts = list(hosts)
    attach = dict(attach or {})
    nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(sorted(nodes, key=str))}
    adj = {n: sorted(graph.adj[n], key=order.__getitem__) for n in nodes}
    roots: list[Hashable] = []
    group_of_root: dict[Hashable, int] = {}
    host_group: list[int] = []
    for h in hosts:
        a = attach.get(h)
        root = a if a is not None and graph.degree(h) == 1 else h
        g = group_of_root.get(root)
        if g is None:
            g = group_of_root[root] = len(roots)
            roots.append(root)
        host_group.append(g)
    table: dict[Hashable, list[tuple[Hashable, ...]]] = {n: [] for n in nodes}
    for root in roots:
        dist = nx.single_source_shortest_path_length(graph, root)
        get = dist.get
        for n in nodes:
            d = get(n)
            if d is None or d == 0:
                table[n].append(())
            else:
                d -= 1
                table[n].append(tuple(m for m in adj[n] if get(m) == d))
    return host_group, roots, table


def next_hops(
    graph: nx.Graph,
    hosts: Iterable[Hashable],
    attach: Mapping[Hashable, Hashable] | None = None,
) -> dict[Hashable, dict[Hashable, tuple[Hashable, ...]]]:
    """``table[node][host]`` = sorted tuple of neighbours of ``node`` on a shortest path to
    ``host`` (empty tuple for ``node == host``).

    ``attach`` maps each host to its access switch; hosts sharing an access switch share a
    BFS (see :func:`group_next_hops`). Hosts with several links get their own BFS.
    """
    hosts = list(hosts)
    host_group, roots, groups = group_next_hops(graph, hosts, attach)
    table: dict[Hashable, dict[Hashable, tuple[Hashable, ...]]] = {}
    for n, row in groups.items():
        table[n] = {h: row[g] for h, g in zip(hosts, host_group)}
    for h, g in zip(hosts, host_group):
        if roots[g] != h:
            table[roots[g]][h] = (h,)
        table[h][h] = ()
    return table
