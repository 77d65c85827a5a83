"""End-to-end allreduce through real UDP daemons: 4 ranks, 2 trees, 2 tiers on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest
from rt_helpers import assert_close_to_reference, random_arrays, run_ranks
from suite_cluster import TEST_PAYLOAD_ELEMS

from panama.runtime.worker.communicator import Communicator, CommunicatorError

W = 4
# Sizes around and across the datagram payload (1000 floats), and odd shapes.
SHAPES = [(1,), (999,), (TEST_PAYLOAD_ELEMS,), (1001,), (3, 7, 11), (25_013,)]


def test_allreduce_sums_exactly_on_every_rank(cluster):
    rng = np.random.default_rng(1)
    inputs = {shape: random_arrays(rng, W, shape) for shape in SHAPES}

    def body(comm, rank):
        outs = {shape: comm.allreduce(inputs[shape][rank]) for shape in SHAPES}
        return outs, comm.plan, comm.stats()

    results, errors = run_ranks(cluster.controller, "exact", W, body, timeout_s=30)
    assert errors == [None] * W
    plan = results[0][1]
    # Two trees, rooted at the two spines: both tiers of daemons carry every call.
    assert sorted(t["root"] for t in plan["trees"]) == ["spine0", "spine1"]
    assert {results[r][1]["first_hop"]["switch"] for r in range(W)} == {"leaf0", "leaf1"}
    for shape in SHAPES:
        outs = [results[r][0][shape] for r in range(W)]
        for out in outs:
            assert out.shape == shape and out.dtype == np.float32
            assert out.tobytes() == outs[0].tobytes()  # bitwise identical on every rank
        assert_close_to_reference(outs[0], inputs[shape])
    # Inputs are not modified.
    assert all(a.flags.writeable for a in inputs[SHAPES[-1]])
    stats = cluster.switch_stats()
    assert all(s["accelerator"]["contributions"] > 0 for s in stats.values())


def test_two_jobs_at_once_through_the_same_daemons(cluster):
    rng = np.random.default_rng(2)
    import threading

    data = {job: random_arrays(rng, W, (12_345,)) for job in ("job-a", "job-b")}
    out: dict[str, tuple] = {}

    def job_thread(job):
        out[job] = run_ranks(
            cluster.controller, job, W, lambda c, r: [c.allreduce(data[job][r]) for _ in range(3)], timeout_s=30
        )

    threads = [threading.Thread(target=job_thread, args=(j,)) for j in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    job_ids = set()
    for job, (results, errors) in out.items():
        assert errors == [None] * W, errors
        for r in range(W):
            for call in results[r]:
                assert call.tobytes() == results[0][0].tobytes()
        assert_close_to_reference(results[0][0], data[job])
    # Both jobs completed and were removed from every daemon.
    status, body = cluster.controller_call("GET", "/v1/jobs")
    assert status == 200 and body["jobs"] == []
    ended = {j["job"]: j for j in body["history"]}
    for job in data:
        assert ended[job]["state"] == "completed"
        job_ids.add(ended[job]["job_id"])
    assert len(job_ids) == 2
    for s in cluster.switch_stats().values():
        assert s["jobs"] == [] and s["accelerator"]["used_slots"] == 0


def test_torch_tensors_and_repeated_calls(cluster):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(17, 301, generator=gen) for _ in range(W)]

    def body(comm, rank):
        a = comm.allreduce(xs[rank])
        b = comm.allreduce(xs[rank].t())  # non-contiguous input
        c = xs[rank].clone()
        assert comm.allreduce(c, out=c) is c  # in place on a tensor
        assert torch.equal(c, a)
        return a, b

    results, errors = run_ranks(cluster.controller, "torch", W, body, timeout_s=30)
    assert errors == [None] * W
    for a, b in results:
        assert isinstance(a, torch.Tensor) and a.shape == (17, 301) and a.dtype == torch.float32
        assert b.shape == (301, 17)
        assert torch.equal(a, results[0][0]) and torch.equal(b, results[0][1])
    assert_close_to_reference(results[0][0].numpy(), [x.numpy() for x in xs])
    assert_close_to_reference(results[0][1].numpy(), [x.t().contiguous().numpy() for x in xs])


def test_wrong_dtypes_are_refused_clearly():
    comm = Communicator("127.0.0.1:9", "dtype", 0, 2)  # never contacts the controller
    with pytest.raises(TypeError, match="float32"):
        comm.allreduce(np.zeros(4, dtype=np.float64))
    with pytest.raises(TypeError, match="numpy"):
        comm.allreduce([1.0, 2.0])
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="float32"):
        comm.allreduce(torch.zeros(3, dtype=torch.int64))
    comm.close()
    with pytest.raises(CommunicatorError, match="closed"):
        comm.allreduce(np.zeros(4, dtype=np.float32))


def test_single_rank_needs_no_network():
    with Communicator("127.0.0.1:9", "solo", 0, 1) as comm:
        x = np.arange(5, dtype=np.float32)
        y = comm.allreduce(x)
        assert np.array_equal(x, y) and y is not x


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="rank"):
        Communicator("127.0.0.1:9", "j", 4, 4)
    with pytest.raises(ValueError, match="controller"):
        Communicator("nowhere", "j", 0, 2)
    with pytest.raises(ValueError, match="payload_elems"):
        Communicator("127.0.0.1:9", "j", 0, 2, payload_elems=10**6)


def test_registration_times_out_naming_missing_ranks(cluster):
    with pytest.raises(CommunicatorError, match=r"ranks \[1, 2\] of world_size 3"):
        Communicator(cluster.controller, "lonely", 0, 3, timeout_s=0.5, connect=True)
    # The half-registered job is forgotten.
    status, body = cluster.controller_call("GET", "/v1/jobs")
    assert all(j["job"] != "lonely" for j in body["jobs"])


def test_job_below_threshold_is_refused_clearly(tmp_path):
    from panama.runtime.cluster import LocalCluster

    with LocalCluster(leaves=2, spines=1, hosts_per_leaf=1, threshold_bytes=1_000_000, log_level="WARNING") as lc:
        results, errors = run_ranks(
            lc.controller, "small", 2, lambda c, r: c.allreduce(np.ones(10, np.float32)), timeout_s=10
        )
    assert all(isinstance(e, CommunicatorError) for e in errors)
    assert "host-based" in str(errors[0]) and "threshold" in str(errors[0])


def test_out_buffers_and_in_place(cluster):
    rng = np.random.default_rng(4)
    data = random_arrays(rng, W, (4, 2_501))

    def body(comm, rank):
        y = np.empty_like(data[rank])
        r1 = comm.allreduce(data[rank], out=y)
        assert r1 is y
        x = data[rank].copy()
        r2 = comm.allreduce(x, out=x)  # in place
        assert r2 is x
        with pytest.raises(TypeError, match="out"):
            comm.allreduce(data[rank], out=np.empty(3, np.float32))
        return y, x

    results, errors = run_ranks(cluster.controller, "out", W, body, timeout_s=30)
    assert errors == [None] * W, errors
    for y, x in results:
        assert y.tobytes() == results[0][0].tobytes() and x.tobytes() == y.tobytes()
    assert_close_to_reference(results[0][0], data)


def test_datagram_count_matches_the_tree_edge_formula(cluster):
    """Every tree edge carries each packet once up and once down (the bench's hop model)."""
    from panama.benchmarks.allreduce import loopback_datagrams
    from panama.runtime.net import mmsg

    n = 10 * TEST_PAYLOAD_ELEMS + 7  # 11 packets per rank over 2 trees
    rx_before = sum(s["rx_packets"] for s in cluster.switch_stats().values())

    def body(comm, rank):
        comm.allreduce(np.ones(n, np.float32))
        st = comm.stats()
        assert st["io"] in ("gso/gro", mmsg.IMPLEMENTATION)  # which datagram I/O the rank ran
        return st["results"], st["retransmissions"]

    # exact counts: no tail-loss probe (a spurious one, on a slow host, adds datagrams)
    results, errors = run_ranks(cluster.controller, "datagrams", W, body, timeout_s=30, min_pto_s=None)
    assert errors == [None] * W
    assert {s["io"] for s in cluster.switch_stats().values()} <= {"gso/gro", mmsg.IMPLEMENTATION}
    assert all(retx == 0 for _, retx in results)  # nothing lost or resent: each datagram counted once
    switch_rx = sum(s["rx_packets"] for s in cluster.switch_stats().values()) - rx_before
    worker_rx = sum(res for res, _ in results)
    per_call = loopback_datagrams(4 * n, W, switches_per_tree=3, payload_elems=TEST_PAYLOAD_ELEMS, trees=2)
    assert switch_rx + worker_rx == per_call == 2 * 11 * (W + 2) + 2 * (W + 2)  # + closing acks
