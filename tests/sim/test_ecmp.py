"""ECMP: next-hop tables, hash quality, spreading flows over the core."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np

from panama.core.topology import fat_tree, leaf_spine
from panama.core.units import ms
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import Network
from panama.sim.routing import ecmp_index, flow_hash, next_hops


def test_next_hops_are_exactly_the_shortest_path_successors():
    for topo in (fat_tree(4), leaf_spine(3, 2, 2)):
        g = topo.graph
        attach = {h: topo.tor_of(h) for h in topo.hosts}
        table = next_hops(g, topo.hosts, attach)
        for h in topo.hosts:
            succ: dict[str, set[str]] = {}
            for n in g.nodes:
                if n == h:
                    continue
                for p in nx.all_shortest_paths(g, n, h):
                    succ.setdefault(n, set()).add(p[1])
            for n in g.nodes:
                if n == h:
                    assert table[n][h] == ()
                else:
                    assert set(table[n][h]) == succ[n], (n, h)


def test_ecmp_choices_are_uniform_and_independent_across_switches():
    rng = np.random.default_rng(0)
    salt_a, salt_b = (int(x) for x in rng.integers(0, 2**63 - 1, size=2))
    hashes = [flow_hash(i, 99) for i in range(8000)]
    joint = Counter((ecmp_index(h, salt_a, 2), ecmp_index(h, salt_b, 2)) for h in hashes)
    assert len(joint) == 4
    assert all(abs(c - 2000) < 200 for c in joint.values())  # about 4.5 sigma
    four = Counter(ecmp_index(h, salt_a, 4) for h in hashes)
    assert all(abs(c - 2000) < 200 for c in four.values())


def test_many_flows_spread_over_the_core():
    topo = fat_tree(4)  # 16 hosts, 4 cores
    rng = np.random.default_rng(7)
    eng = Engine()
    net = Network(eng, topo, rng=rng)
    tcp = Dctcp(net, rng=rng)
    hosts = topo.hosts
    flows = []
    pick = np.random.default_rng(1)
    while len(flows) < 200:
        a, b = (hosts[int(i)] for i in pick.integers(0, len(hosts), size=2))
        if topo.pod(a) != topo.pod(b):
            flows.append(tcp.start_flow(a, b, 15_000, int(pick.integers(0, ms(2)))))
    eng.run()
    assert all(f.done for f in flows)
    core_bytes = [sum(p.tx_bytes for p in net.node(c).ports) for c in topo.cores]
    mean = sum(core_bytes) / len(core_bytes)
    assert min(core_bytes) > 0
    assert max(core_bytes) / mean < 1.25
    # Aggregation uplinks of pod 0 are balanced too.
    up = [net.port(a, c).tx_bytes for a in topo.aggs[:2] for c in topo.up(a)]
    assert max(up) / (sum(up) / len(up)) < 1.5


def test_one_flow_one_path_and_seeded_choice():
    topo = fat_tree(4)

    def paths(seed):
        net = Network(Engine(), topo, rng=np.random.default_rng(seed))
        return [tuple(p.name for p in net.path(0, 15, flow_hash(i, 5))) for i in range(64)]

    assert paths(3) == paths(3)
    assert paths(3) != paths(4)
    assert len(set(paths(3))) > 1  # several of the 4 core paths are used
