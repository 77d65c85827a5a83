"""R3, TCP friendliness: PANAMA trees and DCTCP flows sharing one bottleneck get fair shares.

Fabric: leaf-spine with 3 leaves and 1 spine at 10 Gbps. Tree ``i`` joins a worker
under leaf0 (``h{i}``) and one under leaf1 (``h{4+i}``); DCTCP flows go from leaf0
hosts to leaf2 hosts. The only link carried by both is leaf0 -> spine0 (contributions
of the leaf0 workers and TCP data), so the fair share is 10 Gbps / (trees + flows).
Rates are measured in wire bytes over [2 ms, 10 ms] (after slow start).
"""

from __future__ import annotations

import numpy as np
import pytest

from panama.core.controller import Controller, install
from panama.core.topology import parse_topology
from panama.core.transport import WorkerTransport
from panama.core.units import PS_PER_S, ms
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig
from panama.sim.panama_host import PanamaHost, PanamaWorker
from panama.sim.pswitch import PSwitchFabric, panama_wire_bytes

RATE_GBPS = 10.0
WARM, END = ms(2), ms(10)


def shares(trees: int, flows: int, latency_ps: int = 500_000):
    eng = Engine()
    topo = parse_topology("leaf-spine:leaves=3,spines=1,hosts_per_leaf=4")
    net = Network(eng, topo, NetworkConfig(lossless=True), rng=np.random.default_rng(0))
    fab = PSwitchFabric(net, 4096, latency_ps=latency_ps)
    ctl = Controller(topo, threshold_bytes=0)
    disp = {h: PanamaHost(net, h) for h in topo.hosts}
    leaders = []
    for j in range(trees):
        hosts = [f"h{j}", f"h{4 + j}"]
        plan = ctl.admit(f"job{j}", hosts, 1 << 30, 1)
        assert plan.admitted and len(plan.trees) == 1
        install(plan, fab.accelerators)
        for rank, h in enumerate(hosts):
            tr = WorkerTransport(plan.job_id, rank, [t.tree_id for t in plan.trees])
            w = PanamaWorker(eng, net, disp[h], topo.tor_of(h), tr)
            w.start(1 << 27)  # far more than the run can finish
            if rank == 0:
                leaders.append(w)
    tcp = Dctcp(net, rng=np.random.default_rng(1))
    fl = [tcp.start_flow(f"h{3 - i}", f"h{11 - i}", None) for i in range(flows)]
    eng.run(until_ps=WARM)
    t0 = [w.transport.stats["results"] for w in leaders]
    f0 = [f.delivered_bytes for f in fl]
    eng.run(until_ps=END)
    secs = (END - WARM) / PS_PER_S
    tree_gbps = [
        (w.transport.stats["results"] - a) * panama_wire_bytes(361) * 8 / secs / 1e9 for w, a in zip(leaders, t0)
    ]
    mss = tcp.config.mss_bytes
    wire = (mss + tcp.config.header_bytes) / mss
    flow_gbps = [(f.delivered_bytes - a) * wire * 8 / secs / 1e9 for f, a in zip(fl, f0)]
    assert net.counters()["drops_total"] == 0
    for w in leaders:
        assert w.transport.stats["timeouts"] == 0
    return tree_gbps, flow_gbps


@pytest.mark.parametrize("trees,flows", [(1, 1), (1, 3), (3, 1)])
def test_trees_and_dctcp_flows_share_a_bottleneck_fairly(trees, flows):
    tree_gbps, flow_gbps = shares(trees, flows)
    fair = RATE_GBPS / (trees + flows)
    for rate in tree_gbps + flow_gbps:
        assert rate == pytest.approx(fair, rel=0.25), (tree_gbps, flow_gbps, fair)
    # The bottleneck is used: together they get at least 90% of the link.
    assert sum(tree_gbps) + sum(flow_gbps) > 0.9 * RATE_GBPS
