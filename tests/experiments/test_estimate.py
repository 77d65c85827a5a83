"""The run-time estimate printed before a shared-cluster experiment (issue 34)."""

from __future__ import annotations

import pytest

from panama.experiments import estimate as est
from panama.sim.scenario import JobConfig, Scenario, TopologyConfig
from panama.sim.workload import load_cdf


def _scenario(**kw) -> Scenario:
    return Scenario(topology=TopologyConfig(spec="leaf-spine:leaves=2,spines=2,hosts_per_leaf=2"), **kw)


def test_background_hops_are_the_drawn_flows_packets_over_the_mean_path_with_acks():
    sc = _scenario(duration_ms=10.0, jobs=[])
    e = est.estimate_hops(sc)
    # 4 hosts at 10 Gb/s (the spec's rate), load 0.3, 10 ms; every pair 2 (same leaf) or 4 links.
    cdf = load_cdf(sc.background.workload)
    flows = 4 * 10e9 * sc.background.load * 0.010 / (8 * cdf.mean_bytes)
    assert 2 <= e.mean_path_links <= 4
    assert e.background_hops == pytest.approx(flows * est.packets_per_flow(cdf) * e.mean_path_links * 2)
    # Without truncation the packets are about the offered bytes in full segments.
    assert e.background_hops == pytest.approx(flows * cdf.mean_bytes / 1460 * e.mean_path_links * 2, rel=0.01)
    assert e.job_hops == 0 and e.tree_hops == 0 and e.hops == e.background_hops


def test_background_on_some_hosts_and_at_no_load():
    sc = _scenario(duration_ms=10.0, jobs=[])
    half = sc.model_copy(update={"background": sc.background.model_copy(update={"hosts": ["h0", "h1"]})})
    # Two source hosts draw half the flows (the mean path is the topology's either way).
    assert est.estimate_hops(half).background_hops == pytest.approx(est.estimate_hops(sc).background_hops / 2)
    assert est.estimate_hops(sc.with_overrides(["background.load=0"])).background_hops == 0
    # A name that is no host of the topology is left to the run to refuse: the estimate
    # counts the others and does not fail first.
    odd = sc.model_copy(
        update={"background": sc.background.model_copy(update={"hosts": ["h0", "h1", "nowhere", "leaf0"]})}
    )
    assert est.estimate_hops(odd).background_hops == pytest.approx(est.estimate_hops(half).background_hops)


def test_truncated_flows_offer_only_the_packets_they_send():
    sc = _scenario(duration_ms=10.0, jobs=[])
    short = sc.with_overrides(["background.max_flow_bytes=100000"])
    cdf = load_cdf(sc.background.workload)
    # web-search cut at 100 KB: 44 packets a flow on average, not the 1,172 of the mean size.
    assert est.packets_per_flow(cdf, 100_000) == pytest.approx(43.9, abs=0.5)
    assert est.packets_per_flow(cdf, 1) == 1.0
    ratio = est.estimate_hops(short).background_hops / est.estimate_hops(sc).background_hops
    assert ratio == pytest.approx(est.packets_per_flow(cdf, 100_000) / est.packets_per_flow(cdf))
    assert ratio < 0.05


def test_jobs_add_ring_or_tree_traffic_and_the_floor_has_none():
    job = JobConfig(workers=4, gradient_bytes=10_000_000, iterations=2)
    sc = _scenario(jobs=[job]).with_overrides(["panama.threshold_bytes=1000000"])
    ring = est.estimate_hops(sc, "ring")
    tree = est.estimate_hops(sc, "panama")
    floor = est.estimate_hops(sc, "panama", with_jobs=False)
    assert ring.job_hops == pytest.approx(4 * 2 * 3 / 4 * 20_000_000 / 1460 * ring.mean_path_links * 2)
    assert tree.job_hops == tree.tree_hops == pytest.approx(4 * 20_000_000 / 1444 * 2 * 2)
    assert ring.tree_hops == 0
    assert floor.job_hops == 0 and floor.background_hops == ring.background_hops
    # A job below the aggregation threshold runs ring allreduce under panama too.
    small = _scenario(jobs=[JobConfig(workers=4, gradient_bytes=1000, iterations=2)])
    assert est.estimate_hops(small, "panama").job_hops == est.estimate_hops(small, "ring").job_hops


def test_cpu_seconds_use_the_measured_speed_of_each_path_and_kind_of_hop():
    assert est.estimate_cpu_s(4.7e6, compiled=True) == pytest.approx(1.0)
    assert est.estimate_cpu_s(0.4e6, compiled=False) == pytest.approx(1.0)
    # In-network aggregation's hops cost the accelerators' and workers' work too.
    assert est.estimate_cpu_s(6.9e6, compiled=True, tree_hops=2.2e6) == pytest.approx(2.0)
    assert est.estimate_cpu_s(0.57e6, compiled=False, tree_hops=0.17e6) == pytest.approx(2.0)


def test_the_line_says_runs_processes_and_what_it_is_based_on():
    sc = _scenario(duration_ms=10.0, jobs=[])
    runs = [(sc, "panama", True)] * 3
    line = est.describe_runs(runs, 2, compiled=True, what="shared-cluster")
    assert line.startswith("shared-cluster: 3 runs, 2 at a time: about ")
    assert "estimate" in line and "M packet hops per CPU second" in line and "compiled" in line
    assert "in-network aggregation" in line
    assert "already finished" in est.describe_runs([], 2, compiled=True, what="x")
