"""Training jobs: iterations, schemes, admission fallback, and the traffic each scheme puts on uplinks."""

from __future__ import annotations

import pytest

from panama.core.cc import make_cc
from panama.sim.dctcp import DctcpConfig
from panama.sim.ring import ring_chunk_bytes, ring_steps
from panama.sim.runner import run_scenario
from panama.sim.scenario import Scenario

HOSTS = ["h0", "h1", "h2", "h3"]
GRAD = 144_400  # 100 packets of 361 floats


def tiny(scheme: str, **job) -> Scenario:
    j = {"name": "j", "hosts": HOSTS, "gradient_bytes": GRAD, "compute_us": 20.0, "iterations": 3} | job
    return Scenario.model_validate(
        {
            "seed": 1,
            "duration_ms": 0.1,
            "scheme": scheme,
            "topology": {"spec": "leaf-spine:leaves=2,spines=2,hosts_per_leaf=2"},
            "background": {"load": 0.0},
            "panama": {"threshold_bytes": 0, "num_trees": 2},
            "jobs": [j],
        }
    )


def uplink_bytes(result, host: str) -> int:
    net = result.sim.net
    return net.port(host, result.sim.topology.tor_of(host)).tx_bytes


@pytest.mark.parametrize("scheme", ["panama", "ina-single", "ina-fixed", "ring"])
def test_every_scheme_completes_all_iterations(scheme):
    r = run_scenario(tiny(scheme), progress=False)
    job = r.summary["jobs"]["j"]
    assert r.summary["finished"]
    assert job["iterations_done"] == 3
    assert job["scheme_used"] == scheme
    assert job["error"] is None
    assert r.summary["drops"] == 0
    assert [row["iteration"] for row in r.iteration_rows] == [0, 1, 2]
    for row in r.iteration_rows:
        assert row["iteration_time_us"] > 20.0  # compute plus a non-empty allreduce
    # ina-single uses one tree, panama and ina-fixed the two spines.
    assert job["trees"] == {"panama": 2, "ina-single": 1, "ina-fixed": 2, "ring": 0}[scheme]


def test_scheme_selects_worker_congestion_control():
    r = run_scenario(tiny("ina-fixed"), progress=False)
    (job,) = r.sim.jobs
    assert {cc.name for w in job.workers for cc in w.transport.cc} == {"fixed"}
    r = run_scenario(tiny("panama"), progress=False)
    (job,) = r.sim.jobs
    ccs = [cc for w in job.workers for cc in w.transport.cc]
    assert {cc.name for cc in ccs} == {"dctcp-path"}
    # every tree got the controller's path window (the same on every worker)
    assert len({cc.ceiling for cc in ccs}) == 1 and ccs[0].ceiling < 100
    sc = tiny("panama")
    r = run_scenario(sc.model_copy(update={"panama": sc.panama.model_copy(update={"cc": "dctcp-or"})}), progress=False)
    (job,) = r.sim.jobs
    assert {cc.name for w in job.workers for cc in w.transport.cc} == {"dctcp-or"}


def test_uplink_carries_S_in_network_vs_2_n_minus_1_over_n_S_for_ring():
    """Per iteration each worker's uplink carries S bytes of gradient in-network, 2(N-1)/N*S with ring."""
    iters = 3
    n = len(HOSTS)
    ina = run_scenario(tiny("panama", iterations=iters), progress=False)
    ring = run_scenario(tiny("ring", iterations=iters), progress=False)
    assert ina.summary["jobs"]["j"]["iterations_done"] == ring.summary["jobs"]["j"]["iterations_done"] == iters

    # In-network: one packet per 361 floats, each 20 IP + 8 UDP + 28 header + 4 * count bytes,
    # and the closing ack (header only) on each of the 2 trees.
    npkts = -(-GRAD // (4 * 361))
    ina_expected = iters * (GRAD + npkts * (20 + 8 + 28) + 2 * 56)
    for w in ina.sim.jobs[0].workers:
        assert w.transport.stats["retransmissions"] == 0
    for h in HOSTS:
        assert uplink_bytes(ina, h) == ina_expected

    # Ring: 2(N-1) flows of ceil(S/N) bytes (40 header bytes per 1460-byte segment) plus the
    # 64-byte ACKs of the 2(N-1) flows the worker receives.
    cfg = DctcpConfig()
    chunk = ring_chunk_bytes(GRAD, n)
    segs = -(-chunk // cfg.mss_bytes)
    steps = ring_steps(n)
    assert ring.summary["ring_flows"] == iters * steps * n
    assert all(f.retransmits == 0 for f in ring.sim.ring_tcp.flows)
    ring_expected = iters * steps * (chunk + segs * cfg.header_bytes + segs * cfg.ack_bytes)
    for h in HOSTS:
        assert uplink_bytes(ring, h) == ring_expected

    # Gradient payload only: S versus 2(N-1)/N * S.
    assert iters * GRAD == ina_expected - iters * (npkts + 2) * 56
    assert iters * steps * chunk == pytest.approx(iters * 2 * (n - 1) / n * GRAD, rel=1e-6)
    # With headers the ratio stays within a few percent of 2(N-1)/N = 1.5.
    assert ring_expected / ina_expected == pytest.approx(2 * (n - 1) / n, rel=0.05)


def test_job_below_threshold_falls_back_to_ring():
    sc = tiny("panama")
    sc = sc.model_copy(update={"panama": sc.panama.model_copy(update={"threshold_bytes": GRAD + 1})})
    r = run_scenario(sc, progress=False)
    job = r.summary["jobs"]["j"]
    assert job["scheme_used"] == "ring"
    assert "threshold" in job["admission"]
    assert job["iterations_done"] == 3
    assert r.summary["accelerators"]["contributions"] == 0


def test_jobs_release_controller_state_and_accelerators():
    r = run_scenario(tiny("panama"), progress=False)
    assert r.sim.controller.is_empty()
    for acc in r.sim.pswitches.accelerators.values():
        assert acc.jobs() == [] and acc.used_slots == 0
        acc.check_invariants()


def test_iteration_times_sum_to_training_time():
    r = run_scenario(tiny("panama", start_us=5.0), progress=False)
    job = r.summary["jobs"]["j"]
    assert job["start_us"] == pytest.approx(5.0)
    total = sum(row["iteration_time_us"] for row in r.iteration_rows)
    assert total == pytest.approx(job["training_time_us"])
    assert job["mean_iteration_us"] == pytest.approx(total / 3)


def test_dctcp_tree_window_grows_from_one():
    """Regression: with a window of one packet every result closes an observation window;
    unmarked results must still grow the window."""
    cc = make_cc("dctcp", initial_window=1.0)
    snd_nxt = 1
    for seq in range(20):
        cc.on_result(seq, False, 0xFFFF, snd_nxt)
        snd_nxt = seq + 1 + cc.window
    assert cc.window > 8


def test_panama_and_ring_jobs_side_by_side_on_one_fabric():
    """Both jobs run at once on one fabric: same iteration count; each worker's uplink
    carries S (+ headers) per iteration in-network and 2(N-1)/N*S (+ headers, ACKs) with ring."""
    iters, n = 4, 4
    sc = Scenario.model_validate(
        {
            "seed": 2,
            "duration_ms": 0.1,
            "topology": {"spec": "leaf-spine:leaves=2,spines=2,hosts_per_leaf=4"},
            "background": {"load": 0.0},
            "panama": {"threshold_bytes": 0, "num_trees": 2},
            "jobs": [
                {
                    "name": "inet",
                    "hosts": ["h0", "h1", "h4", "h5"],
                    "gradient_bytes": GRAD,
                    "compute_us": 20.0,
                    "iterations": iters,
                    "scheme": "panama",
                },
                {
                    "name": "ring",
                    "hosts": ["h2", "h3", "h6", "h7"],
                    "gradient_bytes": GRAD,
                    "compute_us": 20.0,
                    "iterations": iters,
                    "scheme": "ring",
                },
            ],
        }
    )
    r = run_scenario(sc, progress=False)
    jobs = r.summary["jobs"]
    assert jobs["inet"]["scheme_used"] == "panama" and jobs["ring"]["scheme_used"] == "ring"
    assert jobs["inet"]["iterations_done"] == jobs["ring"]["iterations_done"] == iters
    npkts = -(-GRAD // (4 * 361))
    cfg = DctcpConfig()
    chunk = ring_chunk_bytes(GRAD, n)
    segs = -(-chunk // cfg.mss_bytes)
    for h in ["h0", "h1", "h4", "h5"]:
        assert uplink_bytes(r, h) == iters * (GRAD + 56 * npkts + 56 * 2)  # + a closing ack per tree
    for h in ["h2", "h3", "h6", "h7"]:
        assert uplink_bytes(r, h) == iters * ring_steps(n) * (chunk + segs * (cfg.header_bytes + cfg.ack_bytes))
    assert r.summary["drops"] == 0
