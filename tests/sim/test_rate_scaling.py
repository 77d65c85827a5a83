"""Issue 18, 100 Gb/s: queue limits scale with link rate like the ECN threshold, so at
every rate ECN (not PFC) is the first to act on a growing queue.

Before the fix the ECN threshold scaled (65 packets at 10 Gbps -> 975 KB at 100 Gbps)
while the buffer stayed 450 KB per port: at 100 Gbps an idle leaf paused an ingress at
about 307 KB, below the 975 KB threshold, so PFC bounded the queues, pauses reached the
hosts' NIC queues, PANAMA's RTT exceeded its 500 us RTO floor and every timeout was
spurious (docs/experiments.md, "100 Gb/s hosts and fabric")."""

from __future__ import annotations

import pytest

from panama.sim.netconfig import NetworkConfig
from panama.sim.outputs import collect
from panama.sim.runner import Simulation
from panama.sim.scenario import Scenario

SPEC = "leaf-spine:leaves=2,spines=2,hosts_per_leaf=4"  # a leaf has 6 ports, a spine 2


def scenario(rate: float, **network) -> Scenario:
    return Scenario.model_validate(
        {
            "duration_ms": 0.1,
            "topology": {"spec": SPEC, "host_rate_gbps": rate, "fabric_rate_gbps": rate},
            "network": {"pfc": True} | network,
            "background": {"load": 0.0},
            "jobs": [],
        }
    )


def test_queue_limit_for_scales_only_with_a_reference_rate():
    assert NetworkConfig().queue_limit_for(100e9) == 450_000  # unit-test default: absolute
    cfg = NetworkConfig(queue_limit_ref_bps=10e9)
    assert cfg.queue_limit_for(10e9) == 450_000
    assert cfg.queue_limit_for(100e9) == 4_500_000
    assert cfg.queue_limit_for(1e3) == 1500  # never below one MTU
    with pytest.raises(ValueError, match="queue_limit_ref_bps"):
        NetworkConfig(queue_limit_ref_bps=0)


@pytest.mark.parametrize("rate", [10.0, 25.0, 100.0, 400.0])
def test_ecn_acts_before_pfc_at_every_rate(rate):
    net = Simulation(scenario(rate)).net
    k = round(65 * 1500 * rate / 10)  # ECN threshold in bytes
    for sw in net.switches:
        n = len(sw.ports)
        assert sw.buffer_bytes == n * round(450_000 * rate / 10)  # computed, not read back
        headroom = n * (int(3.0 * rate * 1e9 * 1e-6 / 8) + 2 * 1500)  # 1 us links
        assert sw.pool_bytes == sw.buffer_bytes - headroom
        # An idle switch pauses an ingress above alpha x free = pool / 8: above K.
        assert sw.pool_bytes / 8 > k, (sw.name, sw.pool_bytes, k)
        for p in sw.ports:
            assert p.k_ps == p.tx_time(k)


def test_fixed_bytes_buffer_puts_pfc_before_ecn_at_100g():
    """The old behaviour (queue_limit_scales_with_rate=false): a leaf's pause threshold at
    100 Gbps is below the ECN threshold; at 10 Gbps the two agree with the new default."""
    net = Simulation(scenario(100.0, queue_limit_scales_with_rate=False)).net
    leaf = next(sw for sw in net.switches if len(sw.ports) == 6)
    assert leaf.buffer_bytes == 6 * 450_000
    assert leaf.pool_bytes / 8 < 975_000
    old10 = Simulation(scenario(10.0, queue_limit_scales_with_rate=False)).net
    new10 = Simulation(scenario(10.0)).net
    assert [s.buffer_bytes for s in old10.switches] == [s.buffer_bytes for s in new10.switches]


def quick_100g(**network) -> Scenario:
    """The shared-cluster ``--quick`` preset at 100 Gbps, cut to 3 ms of background."""
    jobs = [
        ("vgg16", 6, 2767152, 2077.922, 0.0),
        ("alexnet", 4, 1222016, 857.047, 500.0),
        ("resnet50", 4, 511140, 1461.187, 1000.0),
        ("rl-policy", 4, 40000, 300.0, 250.0),
        ("kmeans", 4, 100000, 600.0, 750.0),
    ]
    return Scenario.model_validate(
        {
            "seed": 1,
            "duration_ms": 3.0,
            "topology": {
                "spec": "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4",
                "host_rate_gbps": 100.0,
                "fabric_rate_gbps": 100.0,
            },
            "network": {"pfc": True} | network,
            "panama": {"num_trees": 4, "threshold_bytes": 200_000},
            "background": {"workload": "web-search", "load": 0.3},
            "jobs": [
                {"name": n, "workers": w, "gradient_bytes": g, "compute_us": c, "iterations": 3, "start_us": t}
                for n, w, g, c, t in jobs
            ],
        }
    )


def run(sc: Scenario) -> dict:
    sim = Simulation(sc)
    sim.run(progress=False)
    return collect(sim).summary


def test_panama_next_to_background_at_100g_has_no_spurious_retransmission():
    """Lossless fabric, so any retransmission is spurious. With fixed-bytes buffers PFC
    holds PANAMA packets past the 500 us RTO floor: timeouts, and the accelerators drop
    the duplicates. With rate-scaled buffers: no retransmission, no drop."""
    old = run(quick_100g(queue_limit_scales_with_rate=False))
    assert old["network_drops"] == 0
    assert sum(j["worker_timeouts"] for j in old["jobs"].values()) > 0
    assert old["accelerator_drops"] > 0
    new = run(quick_100g())
    assert all(j["iterations_done"] == 3 for j in new["jobs"].values())
    assert new["drops"] == 0, new["drops_by_reason"]
    assert sum(j["worker_retransmissions"] for j in new["jobs"].values()) == 0
    assert new["pfc_pauses"] < old["pfc_pauses"]
