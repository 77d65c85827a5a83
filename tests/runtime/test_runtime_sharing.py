"""Two jobs on the same switch daemons: a newcomer is never starved by a job between calls (issue 11)."""

import threading

import numpy as np
import pytest
from rt_helpers import run_ranks, wait_for
from suite_cluster import TEST_PAYLOAD_ELEMS

from panama.runtime.cluster import LocalCluster

MEMORY = 16  # slots per daemon: one job alone may keep all of it; two get 8 each


@pytest.fixture(scope="module")
def rack():
    """One leaf, 4 hosts, a small accelerator memory."""
    with LocalCluster(
        leaves=1,
        spines=1,
        hosts_per_leaf=4,
        packet_memory=MEMORY,
        payload_elems=TEST_PAYLOAD_ELEMS,
        heartbeat_timeout_s=5.0,
    ) as lc:
        yield lc


def test_job_b_runs_while_job_a_sleeps_between_calls(rack):
    n = 40 * TEST_PAYLOAD_ELEMS  # 40 packets per call: several windows
    data = {job: [np.full(n, 10 * j + r + 1, np.float32) for r in range(2)] for j, job in enumerate(("a", "b"))}
    a_slept, b_done = threading.Event(), threading.Event()
    a_results: list = []

    def job_a(comm, rank):
        first = comm.allreduce(data["a"][rank])
        a_slept.set()  # A now sleeps (compute, evaluation, checkpoint...) until B is done
        assert b_done.wait(60), "job b did not finish within 60 s"
        second = comm.allreduce(data["a"][rank])
        return first, second, comm.stats()

    def job_b(comm, rank):
        out = comm.allreduce(data["b"][rank])
        return out, comm.stats()

    runner = threading.Thread(target=lambda: a_results.append(run_ranks(rack.controller, "a", 2, job_a, timeout_s=30)))
    runner.start()
    assert a_slept.wait(60), "job a's first allreduce did not finish within 60 s"
    # no tail-loss probes for B: any resend of its would mean a packet found no slot
    b_out, b_errors = run_ranks(rack.controller, "b", 2, job_b, timeout_s=30, min_pto_s=None)
    b_done.set()
    runner.join(90)
    assert not runner.is_alive()
    ((a_out, a_errors),) = a_results
    assert b_errors == [None, None] and a_errors == [None, None]
    expect_b = data["b"][0] + data["b"][1]
    for out, stats in b_out:
        np.testing.assert_array_equal(out, expect_b)
        # B never waited for a timeout: every packet got a slot the first time
        assert stats["retransmissions"] == 0 and stats["timeouts"] == 0
    expect_a = data["a"][0] + data["a"][1]
    for first, second, _ in a_out:
        np.testing.assert_array_equal(first, expect_a)
        np.testing.assert_array_equal(second, expect_a)  # A comes back under the new share, exact

    # Every rank's closing ack of each of the three calls reaches the leaf (the last ones may
    # still be on their way when the ranks return: the rank sends it after its last result).
    def acks_in() -> int:
        return rack.switch_stats()["leaf0"]["accelerator"]["acks_in"]

    wait_for(lambda: acks_in() >= 6, "the leaf to count six closing acks", timeout_s=10)
    assert acks_in() == 6


def test_small_memory_and_lost_datagrams_still_finish_exactly(rack):
    """16 slots, one tree, lost datagrams on the workers' links: the oldest packet of each
    rank always finds a slot, so retransmissions make progress (this stalled before)."""
    n = 30 * TEST_PAYLOAD_ELEMS
    data = [np.full(n, r + 1, np.float32) for r in range(2)]

    def body(comm, rank):
        outs = [comm.allreduce(data[rank]) for _ in range(2)]
        return outs, comm.stats()

    results, errors = run_ranks(rack.controller, "lossy", 2, body, timeout_s=60, drop_prob=0.05, seed=3)
    assert errors == [None, None]
    for outs, stats in results:
        for out in outs:
            np.testing.assert_array_equal(out, data[0] + data[1])
    assert sum(stats["dropped_sends"] for _, stats in results) > 0  # datagrams were lost


def test_a_refused_job_raises_job_refused_with_the_controllers_reason(rack, monkeypatch):
    from panama.runtime.worker.communicator import Communicator, CommunicatorError, JobRefused

    monkeypatch.setenv("PANAMA_CONTROLLER", rack.controller)
    monkeypatch.setenv("PANAMA_TOKEN", rack.token)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    comm = Communicator.from_env(job="solo")  # one rank: nothing to aggregate in the network
    with comm, pytest.raises(JobRefused) as info:
        comm.connect(1 << 20)
    assert isinstance(info.value, CommunicatorError) and "single worker" in info.value.reason
