"""R4, lossless operation: with PFC on and workers obeying cwnd_cap, nothing is dropped
anywhere and accelerator memory never overflows, even with several jobs on every accelerator."""

from __future__ import annotations

import pytest

from panama.core.accelerator import SHARE_EXCEEDED
from panama.core.units import us
from panama.sim.outputs import collect
from panama.sim.runner import Simulation
from panama.sim.scenario import Scenario

MEMORY = 48  # slots: 48 // (4 jobs + 1 reserved share) = 9 per job, 4 per tree of 2, cwnd_cap 2


def scenario(**over) -> Scenario:
    jobs = [
        {
            "name": f"j{i}",
            "hosts": [f"h{i}", f"h{i + 4}", f"h{(i + 1) % 4}"],
            "gradient_bytes": 200_000,
            "compute_us": 10.0,
            "iterations": 3,
            "start_us": 0.0,
        }
        for i in range(4)
    ]
    data = {
        "seed": 4,
        "duration_ms": 1.0,
        "topology": {"spec": "leaf-spine:leaves=2,spines=2,hosts_per_leaf=4"},
        "network": {"pfc": True, "switch_buffer_bytes": 200_000},
        "pswitch": {"packet_memory_slots": MEMORY},
        "panama": {"threshold_bytes": 0, "num_trees": 2, "max_jobs_per_switch": 8},
        "background": {"workload": "fb-hadoop", "load": 0.5},
        "jobs": jobs,
    } | over
    return Scenario.model_validate(data)


def run_with_monitor(sc: Scenario):
    sim = Simulation(sc)
    accs = list(sim.pswitches.accelerators.values())
    seen = {"checks": 0, "max_jobs": 0, "min_cap": 1 << 16}

    def monitor():
        for acc in accs:
            acc.check_invariants()  # every tree within its limit, limits within memory
            assert acc.used_slots <= acc.packet_memory
            assert not acc.drops, (acc.name, dict(acc.drops))
            seen["max_jobs"] = max(seen["max_jobs"], len(acc.jobs()))
        for job in sim.jobs:
            for w in job.workers:
                for cc in w.transport.cc:
                    seen["min_cap"] = min(seen["min_cap"], cc.cwnd_cap)
                    assert cc.window <= cc.cwnd_cap
        seen["checks"] += 1
        if not sim.finished:
            sim.engine.after(us(5), monitor)

    sim.engine.at(0, monitor)
    sim.run(progress=False)
    return sim, seen


@pytest.mark.parametrize("scheme", ["panama", "ina-fixed"])
def test_no_drop_and_no_accelerator_overflow_with_shared_accelerators(scheme):
    sim, seen = run_with_monitor(scenario(scheme=scheme))
    s = collect(sim).summary
    assert sim.finished
    assert seen["checks"] > 100
    assert seen["max_jobs"] == 4  # the four jobs overlapped on the accelerators
    assert seen["min_cap"] <= 3  # the cap bound the windows
    for name, job in s["jobs"].items():
        assert job["scheme_used"] == scheme and job["trees"] == 2, (name, job["admission"])
        assert job["iterations_done"] == 3 and job["error"] is None
        assert job["worker_retransmissions"] == 0
    assert s["network_drops"] == 0 and s["accelerator_drops"] == 0 and s["drops"] == 0
    assert s["drops_by_reason"][f"accelerator.{SHARE_EXCEEDED}"] == 0
    assert s["background_completed"] == s["background_flows"] > 0
    assert s["pfc_pauses"] > 0  # the fabric was pushed hard enough to need PAUSE
    for acc in sim.pswitches.accelerators.values():
        acc.check_invariants()
        assert acc.used_slots == 0 and acc.peak_used_slots <= MEMORY


def test_same_load_without_pfc_drops_packets():
    """Control experiment: the same scenario on a lossy fabric with small queues loses packets,
    so the lossless result above is PFC's doing, not an idle network."""
    sc = scenario(network={"pfc": False, "queue_limit_bytes": 15_000})
    sim = Simulation(sc)
    sim.run(progress=False)
    s = collect(sim).summary
    assert s["network_drops"] > 0


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from panama.sim.scenario import SCHEMES  # noqa: E402

TOPOLOGIES = {
    "fat-tree:k=4": 16,
    "leaf-spine:leaves=3,spines=2,hosts_per_leaf=3": 9,
    "leaf-spine:leaves=2,spines=3,hosts_per_leaf=2": 4,
}


@st.composite
def random_scenarios(draw):
    spec = draw(st.sampled_from(sorted(TOPOLOGIES)))
    hosts = TOPOLOGIES[spec]
    jobs = [
        {
            "workers": draw(st.integers(2, min(hosts, 6))),
            "gradient_bytes": draw(st.integers(4, 200_000)),
            "compute_us": draw(st.floats(0, 40)),
            "iterations": draw(st.integers(1, 3)),
            "scheme": draw(st.sampled_from(SCHEMES)),
        }
        for _ in range(draw(st.integers(1, 4)))
    ]
    return Scenario.model_validate(
        {
            "seed": draw(st.integers(0, 10_000)),
            "duration_ms": 0.3,
            "topology": {"spec": spec},
            "network": {"pfc": True},
            "pswitch": {
                "packet_memory_slots": draw(st.sampled_from([16, 64, 4096])),
                "processing_latency_ns": draw(st.sampled_from([0.0, 500.0])),
            },
            "panama": {
                "threshold_bytes": draw(st.sampled_from([0, 50_000])),
                "num_trees": draw(st.integers(1, 4)),
                "max_jobs_per_switch": draw(st.integers(1, 4)),
            },
            "background": {"workload": "ali-storage", "load": draw(st.floats(0, 0.6))},
            "jobs": jobs,
        }
    )


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(random_scenarios())
def test_random_lossless_scenarios_finish_without_any_drop(sc):
    """Jobs admitted together, any schemes, memories and admission limits, PFC on: every job
    and flow finishes, nothing is dropped, and the control state is empty afterwards."""
    sim = Simulation(sc)
    sim.run(progress=False)
    s = collect(sim).summary
    assert sim.finished and s["jobs_finished"] == len(sc.jobs)
    assert s["drops"] == 0, {k: v for k, v in s["drops_by_reason"].items() if v}
    assert s["background_completed"] == s["background_flows"]
    assert sim.controller.is_empty()
    for acc in sim.pswitches.accelerators.values():
        acc.check_invariants()
        assert acc.jobs() == [] and acc.used_slots == 0
