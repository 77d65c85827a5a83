"""Bad input and faults: garbage datagrams, foreign sources, loss, dead workers, dead daemons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from rt_helpers import assert_close_to_reference, random_arrays, run_ranks

from panama.core import codec
from panama.core.packet import ECT0, Packet
from panama.runtime.cluster import LocalCluster
from panama.runtime.net.udp import PacketSocket
from panama.runtime.worker.communicator import CommunicatorError
from panama.runtime.worker.link import process_job_token

W = 4


def _garbage(rng: np.random.Generator, count: int) -> list[bytes]:
    """Random datagrams (never starting with the PANAMA magic) of 0..200 bytes."""
    out = []
    for _ in range(count):
        data = rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8).tobytes()
        if data[:2] == b"PA":
            data = b"\x00" + data[1:]
        out.append(data)
    return out


def test_random_and_truncated_datagrams_during_allreduce(cluster):
    rng = np.random.default_rng(10)
    data = random_arrays(rng, W, (40_000,))
    targets = [cluster.switch_udp("leaf0"), cluster.switch_udp("spine0")]
    before = {n: cluster.switch_stats(n) for n in ("leaf0", "spine0")}
    garbage = _garbage(rng, 10_000)
    good = codec.encode(Packet(77, 0, 5, 1, 10, 0, payload=np.ones(10, np.float32)))
    truncated = [good[:k] for k in (0, 1, 5, 27, 28, 30, len(good) - 1)] + [good + b"\x00" * 4]
    foreign = [codec.encode(Packet(9999, 1, s, 1, 10, 0, payload=np.ones(10, np.float32))) for s in range(50)]
    sent = {"garbage": 0, "truncated": 0, "foreign": 0}
    started = threading.Event()
    stop = threading.Event()

    def attack():
        sock = PacketSocket()
        started.wait(10)
        for i, d in enumerate(garbage):
            sock.sock.sendto(d, targets[i % 2])
            sent["garbage"] += 1
            if i % 500 == 0:
                time.sleep(0.001)  # interleave with the allreduce
        for d in truncated:
            for t in targets:
                sock.sock.sendto(d, t)
                sent["truncated"] += 1
        for d in foreign:
            for t in targets:
                sock.sock.sendto(d, t)
                sent["foreign"] += 1
        stop.set()
        sock.close()

    attacker = threading.Thread(target=attack)
    attacker.start()

    def body(comm, rank):
        outs = [comm.allreduce(data[rank])]
        started.set()
        # Keep allreducing while the garbage flows. Whether to go on is decided
        # collectively (an allreduce of the ranks' stop flags), so every rank runs the
        # same number of calls even though each sees ``stop`` at a different moment.
        while not comm.allreduce(np.array([stop.is_set()], np.float32))[0]:
            outs.append(comm.allreduce(data[rank]))
        outs.append(comm.allreduce(data[rank]))
        return outs

    results, errors = run_ranks(cluster.controller, "garbage", W, body, timeout_s=60)
    attacker.join(timeout=60)
    assert errors == [None] * W, errors
    assert len(results[0]) >= 3
    for outs in results:
        for out in outs:
            assert out.tobytes() == results[0][0].tobytes()
    assert_close_to_reference(results[0][0], data)
    time.sleep(0.2)  # let the daemons drain their queues
    after = {n: cluster.switch_stats(n) for n in ("leaf0", "spine0")}
    malformed = sum(sum(after[n]["malformed"].values()) - sum(before[n]["malformed"].values()) for n in after)
    # Every random datagram and every truncated packet is counted as malformed (by reason).
    assert malformed == sent["garbage"] + sent["truncated"]
    reasons = set().union(*(after[n]["malformed"] for n in after))
    assert {"short", "bad_magic", "count_mismatch", "trailing_bytes"} <= reasons
    unknown = sum(after[n]["drops"].get("unknown_job", 0) - before[n]["drops"].get("unknown_job", 0) for n in after)
    assert unknown == sent["foreign"]
    metrics = _get_text(cluster.procs["leaf0"].control, "/metrics")
    assert 'panama_switch_malformed_total{switch="leaf0",reason="short"}' in metrics


def _get_text(addr, path):
    import urllib.request

    auth = {"Authorization": f"Bearer {os.environ['PANAMA_TOKEN']}"}
    with urllib.request.urlopen(
        urllib.request.Request(f"http://{addr[0]}:{addr[1]}{path}", headers=auth), timeout=5
    ) as resp:
        return resp.read().decode()


def test_packets_from_a_wrong_source_never_change_sums(cluster):
    """Contributions for a live job from a socket that is not its child are dropped: without
    the job's data-plane key as ``bad_key``, with it (an insider) as ``not_child``."""
    rng = np.random.default_rng(11)
    data = random_arrays(rng, W, (30_000,))
    st = cluster.switch_stats("leaf0")
    before = st["drops"].get("not_child", 0), st["malformed"].get("bad_key", 0)
    sent = []

    def body(comm, rank):
        first = comm.allreduce(data[rank])
        if rank == 0:
            # Forge contributions for the next generations of this very job from outside.
            evil = PacketSocket()
            big = np.full(comm.transport.payload_elems, 1e6, np.float32)
            for keyed in (False, True):
                if keyed:
                    evil.set_key(comm.key)
                for tree in comm.plan["trees"]:
                    for seq in range(0, 100):
                        for gen in (1, 2, 3):
                            pkt = Packet(
                                comm.job_id, tree["tree_id"], seq, gen, big.size, 0, ack=0, ecn=ECT0, payload=big
                            )
                            evil.send(pkt, cluster.switch_udp("leaf0"))
                            sent.append(keyed)
            evil.close()
        return [first] + [comm.allreduce(data[rank]) for _ in range(2)]

    results, errors = run_ranks(cluster.controller, "forged", W, body, timeout_s=30)
    assert errors == [None] * W, errors
    for outs in results:
        for out in outs:
            assert out.tobytes() == results[0][0].tobytes()
            assert_close_to_reference(out, data)
    time.sleep(0.2)
    st = cluster.switch_stats("leaf0")
    assert st["drops"].get("not_child", 0) - before[0] == sum(sent)
    assert st["malformed"].get("bad_key", 0) - before[1] == len(sent) - sum(sent)


def test_injected_loss_keeps_results_exact():
    rng = np.random.default_rng(12)
    data = random_arrays(rng, W, (20_000,))
    with LocalCluster(
        leaves=2, spines=2, hosts_per_leaf=2, payload_elems=500, drop_prob=0.02, seed=5, log_level="WARNING"
    ) as lc:
        results, errors = run_ranks(
            lc.controller,
            "lossy",
            W,
            # two calls into new vectors, one in place (results overwrite the rank's
            # own contributions while lost ones are resent)
            lambda c, r: (
                [c.allreduce(data[r]) for _ in range(2)] + [c.allreduce(x := data[r].copy(), out=x)],
                c.stats(),
            ),
            timeout_s=60,
            min_rto_s=0.02,
            initial_rto_s=0.05,
        )
        stats = lc.switch_stats()
    assert errors == [None] * W, (errors, {n: (s["drops"], s["jobs"]) for n, s in stats.items()})
    for outs, _ in results:
        for out in outs:
            assert out.tobytes() == results[0][0][0].tobytes()
    assert_close_to_reference(results[0][0][0], data)
    assert sum(s["drops"].get("injected", 0) for s in stats.values()) > 0
    assert sum(st["retransmissions"] for _, st in results) > 0
    assert sum(s["retransmits_received"] for s in stats.values()) > 0


_WORKER = r"""
import sys, time, numpy as np
from panama.runtime.worker.communicator import Communicator
c = Communicator(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), timeout_s=20)
c.allreduce(np.ones(5000, np.float32))
print("first-done", flush=True)
time.sleep(600)
"""


def test_a_dead_worker_fails_the_others_and_frees_the_job(cluster):
    """Rank 3 (a process) dies after one allreduce: ranks 0-2 fail clearly, the job is freed."""
    victim = subprocess.Popen(
        [sys.executable, "-c", _WORKER, cluster.controller, "victim", "3", str(W)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PANAMA_JOB_TOKEN=process_job_token()),  # one run with the ranks in threads
    )
    try:
        errors_at = {}

        def body(comm, rank):
            comm.allreduce(np.ones(5000, np.float32))
            if rank == 0:
                assert victim.stdout.readline().strip() == "first-done"
                os.kill(victim.pid, signal.SIGKILL)
            t0 = time.monotonic()
            try:
                comm.allreduce(np.ones(5000, np.float32))
            finally:
                errors_at[rank] = time.monotonic() - t0

        timeout_s = 10.0
        done = threading.Event()
        results: list = [None] * 3
        errors: list = [None] * 3

        def run(rank):
            from panama.runtime.worker.communicator import Communicator

            try:
                with Communicator(cluster.controller, "victim", rank, W, timeout_s=timeout_s) as comm:
                    results[rank] = body(comm, rank)
            except BaseException as exc:  # noqa: BLE001
                errors[rank] = exc

        threads = [threading.Thread(target=run, args=(r,)) for r in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        done.set()
        assert all(isinstance(e, CommunicatorError) for e in errors), errors
        for e in errors:
            assert "rank 3" in str(e), str(e)
        # Bounded by the configured timeout (usually the 3-s heartbeat deadline ends it
        # sooner); the slack only absorbs scheduling delays of a loaded test machine.
        assert max(errors_at.values()) <= timeout_s + 5.0
        status, job = cluster.controller_call("GET", "/v1/jobs/victim")
        assert status == 200 and job["state"] == "failed" and "rank 3" in job["reason"]
        for s in cluster.switch_stats().values():
            assert job["job_id"] not in s["jobs"]
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_a_dead_daemon_fails_workers_naming_it():
    with LocalCluster(leaves=2, spines=2, hosts_per_leaf=2, payload_elems=1000, log_level="WARNING") as lc:
        timeout_s = 8.0

        def body(comm, rank):
            x = np.ones(20_000, np.float32)
            comm.allreduce(x)
            if rank == 0:
                lc.kill("spine1")
            t0 = time.monotonic()
            try:
                for _ in range(50):
                    comm.allreduce(x)
            finally:
                body.elapsed[rank] = time.monotonic() - t0

        body.elapsed = {}
        results, errors = run_ranks(lc.controller, "dead-switch", W, body, timeout_s=timeout_s)
        assert all(isinstance(e, CommunicatorError) for e in errors), errors
        for e in errors:
            assert "spine1" in str(e), str(e)
        assert max(body.elapsed.values()) <= timeout_s + 5.0  # slack: scheduling on a loaded machine
        status, job = lc.controller_call("GET", "/v1/jobs/dead-switch")
        assert job["state"] == "failed" and "spine1" in job["reason"]
        # The surviving daemons no longer hold the job.
        for name in ("leaf0", "leaf1", "spine0"):
            assert job["job_id"] not in lc.switch_stats(name)["jobs"]


def test_a_dead_first_hop_fails_workers_cleanly_and_its_icmp_errors_are_counted():
    """Workers' sockets are connected to their leaf: its ICMP port-unreachable errors are counted, never raised raw."""
    with LocalCluster(leaves=2, spines=2, hosts_per_leaf=2, payload_elems=1000, log_level="WARNING") as lc:
        first_hops, refused = {}, {}

        def body(comm, rank):
            x = np.ones(20_000, np.float32)
            comm.allreduce(x)
            first_hops[rank] = comm.first_hop_name
            if rank == 0:
                lc.kill(comm.first_hop_name)
            try:
                for _ in range(50):
                    comm.allreduce(x)
            finally:
                st = comm.stats()
                refused[rank] = st["refused"] + st["send_errors"]  # the error surfaces on a receive or a send

        results, errors = run_ranks(lc.controller, "dead-leaf", W, body, timeout_s=6.0)
        assert len(errors) == W and all(isinstance(e, CommunicatorError) for e in errors), errors
        for e in errors:
            assert first_hops[0] in str(e), str(e)
        assert refused[0] > 0  # rank 0 sent to its dead leaf right after killing it


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_local_cluster_stops_every_process_even_on_error(sig):
    pids = []
    with pytest.raises(RuntimeError, match="boom"):
        with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="WARNING") as lc:
            pids = [p.pid for p in lc.procs.values()]
            raise RuntimeError("boom")
    assert len(pids) == 3
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
