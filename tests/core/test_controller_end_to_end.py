"""End to end: controller plans installed into real Accelerators, driven by real WorkerTransports.

Packets move by hand along the plan's entries only: a worker sends to its ToR, an
accelerator's output goes to the node it names (checked to be a tree edge), results come
back down to the workers. The result must be the sum: this proves the controller's output
is exactly what the core accelerator and transport take.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from panama.core.accelerator import Accelerator
from panama.core.controller import Controller, JobPlan, install, uninstall
from panama.core.topology import Topology, fat_tree, leaf_spine
from panama.core.transport import WorkerTransport
from panama.core.units import us

BIG = 10**9


class HandPump:
    """Workers of every job plus the accelerators, joined only by the plans' tree edges."""

    def __init__(self, topo: Topology, accs: dict[str, Accelerator], plans: list[JobPlan]):
        self.topo = topo
        self.accs = accs
        self.plans = plans
        self.edges = {(p.job_id, t.tree_id): set(t.edges) for p in plans for t in p.trees}
        self.workers = {
            (p.job_id, h): WorkerTransport(p.job_id, rank, p.tree_ids, cwnd_caps=p.cwnd_caps, cc="dctcp")
            for p in plans
            for rank, h in enumerate(p.hosts)
        }
        self.now = 0
        self.hops = 0

    def allreduce(self, data: dict[str, list[np.ndarray]]) -> dict[str, list[np.ndarray]]:
        """One allreduce of every job at once; returns {job: [result of each worker]}."""
        topo = self.topo
        for p in self.plans:
            for rank, h in enumerate(p.hosts):
                self.workers[(p.job_id, h)].start(self.now, data[p.name][rank])
        queue: deque = deque()
        for _ in range(100_000):
            self.now += us(1)
            for (_, h), w in self.workers.items():
                for pkt in w.poll(self.now):
                    queue.append((h, topo.tor_of(h), pkt))  # first hop: the worker's ToR
            if not queue:
                break
            while queue:
                src, dst, pkt = queue.popleft()
                tree_edges = self.edges[(pkt.job_id, pkt.tree_id)]
                assert (src, dst) in tree_edges or (dst, src) in tree_edges, f"hop {src}->{dst} is not on the tree"
                self.hops += 1
                if topo.is_host(dst):
                    self.workers[(pkt.job_id, dst)].receive(pkt, self.now)
                else:
                    for destinations, out in self.accs[dst].receive(pkt, src):
                        for to in destinations:
                            queue.append((dst, to, out))
        assert all(w.done for w in self.workers.values()), "allreduce did not finish"
        return {p.name: [self.workers[(p.job_id, h)].result() for h in p.hosts] for p in self.plans}


def check_sums(plans, data, results):
    for p in plans:
        expect = np.sum(np.stack(data[p.name]).astype(np.float64), axis=0)
        first = results[p.name][0]
        for r in results[p.name]:
            assert r.dtype == np.float32
            np.testing.assert_array_equal(r, first)  # every worker holds the same bits
            np.testing.assert_allclose(r, expect, rtol=1e-5, atol=1e-5)


def test_two_tier_job_on_leaf_spine_sums_exactly():
    topo = leaf_spine(4, 2, 4)
    ctl = Controller(topo)
    plan = ctl.admit("job", ["h0", "h1", "h5", "h10", "h15"], BIG, 2)
    assert plan.admitted and [t.root for t in plan.trees] == ["spine0", "spine1"]
    accs = {s: Accelerator(256, name=s) for s in topo.switches}
    install(plan, accs)
    rng = np.random.default_rng(7)
    n = 5000  # 14 packets per worker over 2 trees
    ints = {"job": [rng.integers(-1000, 1000, n).astype(np.float32) for _ in plan.hosts]}
    pump = HandPump(topo, accs, [plan])
    results = pump.allreduce(ints)
    expect = np.sum(np.stack(ints["job"]), axis=0, dtype=np.float32)
    for r in results["job"]:
        np.testing.assert_array_equal(r, expect)  # integer-valued: exact in float32
    packets = -(-n // 361)
    # Up: 5 host hops + 4 ToR->spine partials; down: the same again, per packet. Then
    # the closing acks, per tree: one from each worker, one from each ToR to the spine.
    assert pump.hops == packets * 2 * (5 + 4) + 2 * (5 + 4)
    # A second allreduce (next generation) with real-valued data over the same state.
    floats = {"job": [rng.standard_normal(n).astype(np.float32) for _ in plan.hosts]}
    check_sums([plan], floats, pump.allreduce(floats))
    for s, acc in accs.items():
        acc.check_invariants()
        assert sum(acc.drops.values()) == 0, (s, acc.drops)
    uninstall(plan, accs)
    ctl.release("job")
    assert all(acc.jobs() == [] for acc in accs.values()) and ctl.is_empty()


@pytest.mark.parametrize("trees", [1, 3])
def test_three_tier_jobs_share_switches_on_fat_tree(trees):
    topo = fat_tree(4)
    ctl = Controller(topo)
    a = ctl.admit("a", ["h0", "h2", "h5", "h9", "h14"], BIG, trees)  # four pods: core roots
    b = ctl.admit("b", ["h1", "h3"], BIG, trees)  # pod 0: agg roots, sharing tor0/tor1 with a
    c = ctl.admit("c", ["h6", "h7"], BIG, trees)  # one rack: tor3 root
    assert (a.scope, b.scope, c.scope) == ("fabric", "pod", "rack")
    plans = [a, b, c]
    accs = {s: Accelerator(512, name=s) for s in topo.switches}
    for p in plans:
        install(p, accs)
    rng = np.random.default_rng(trees)
    data = {p.name: [rng.standard_normal(1500).astype(np.float32) for _ in p.hosts] for p in plans}
    check_sums(plans, data, HandPump(topo, accs, plans).allreduce(data))
    for acc in accs.values():
        acc.check_invariants()
        assert sum(acc.drops.values()) == 0
    for p in plans:
        uninstall(p, accs)
        ctl.release(p.name)
    assert all(acc.jobs() == [] for acc in accs.values()) and ctl.is_empty()
