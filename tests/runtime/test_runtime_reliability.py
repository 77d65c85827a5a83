"""Reliability against a hostile local user and bad luck (issue 27): a connection flood
without the token ends no job, a clean leave and a size mismatch are named at once, and
a dead cluster is noticed from its refusals."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from rt_helpers import run_ranks

from panama.runtime.cluster import LocalCluster
from panama.runtime.net.udp import parse_addr
from panama.runtime.worker.communicator import Communicator, CommunicatorError


@pytest.fixture(scope="module")
def small():
    """One rack of 2 hosts, a short heartbeat timeout: a job that misses beats ends fast."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=3, payload_elems=1000, heartbeat_timeout_s=2.0) as lc:
        yield lc


def _flood(addr, stop: threading.Event, count: int, opened: list[int], source: str = "127.0.0.1") -> None:
    """Hold ``count`` connections from ``source`` open without sending a request; reopen
    those the server closes."""
    socks: list[socket.socket] = []
    while not stop.is_set():
        socks = [s for s in socks if _alive(s)]
        while len(socks) < count and not stop.is_set():
            s = socket.socket()
            s.setblocking(False)
            try:
                s.bind((source, 0))
                s.connect_ex(addr)
            except OSError:
                s.close()
                break
            socks.append(s)
            opened[0] += 1
        stop.wait(0.05)
    for s in socks:
        s.close()


def _alive(s: socket.socket) -> bool:
    try:
        data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        s.close()
        return False
    if data == b"":
        s.close()
        return False
    return True  # a 503 waiting: the server is closing it


def test_connection_flood_without_token_leaves_running_job_unaffected(small):
    """300 connections that never send a request (more than the 256 the controller takes,
    reopened as it closes them) for longer than the heartbeat timeout: every allreduce of
    a running job still succeeds (before: heartbeats met 503 and every rank failed)."""
    addr = parse_addr(small.controller)
    stop, opened = threading.Event(), [0]
    started = threading.Event()

    def body(comm: Communicator, rank: int) -> int:
        x = np.full(3000, rank + 1, np.float32)
        comm.allreduce(x)  # registered and running before the flood
        if rank == 0:
            started.set()
        # The same count on every rank (a deadline per rank let one rank leave while
        # another still waited for it): 100 x 50 ms is at least 5 s, 2.5 x heartbeat_timeout_s.
        for _ in range(100):
            out = comm.allreduce(x)
            assert out[0] == 6.0
            time.sleep(0.05)
        return 100

    flooder = threading.Thread(target=lambda: (started.wait(30), _flood(addr, stop, 300, opened)), daemon=True)
    flooder.start()
    try:
        results, errors = run_ranks(small.controller, "flooded", 3, body, timeout_s=20)
    finally:
        stop.set()
        flooder.join(10)
    assert errors == [None, None, None], errors
    assert all(n > 5 for n in results), results
    assert opened[0] >= 300
    health = small.controller_call("GET", "/v1/health")[1]
    assert sum(health["connections"].values()) > 0, health  # the flood was seen and turned away


def test_a_flood_past_every_admission_bound_ends_no_job_and_stops_no_registration():
    """Issue 35 item 2, in short: 1,200 unfinished connections from 127.0.0.1 (more than one
    peer's 512) and 64 from each of 16 other loopback addresses (more than the 1,024
    pending in all),
    reopened as they are closed, for 2.5 heartbeat timeouts, beside a running
    job and a job that registers during the flood: no error, every sum right, and both
    bounds evicted (bench/control_flood.py runs the full-size floods)."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=4, payload_elems=1000, heartbeat_timeout_s=2.0) as lc:
        _flood_beside_jobs(lc)


def _flood_beside_jobs(lc: LocalCluster) -> None:
    addr = parse_addr(lc.controller)
    stop, started = threading.Event(), threading.Event()
    opened = [0]

    def body(comm: Communicator, rank: int) -> int:
        x = np.full(3000, rank + 1, np.float32)
        comm.allreduce(x)
        if rank == 0:
            started.set()
        for _ in range(100):  # 100 x 50 ms: at least 2.5 x heartbeat_timeout_s
            assert comm.allreduce(x)[0] == 3.0
            time.sleep(0.05)
        return 100

    sources = [("127.0.0.1", 1200)] + [(f"127.0.0.{k}", 64) for k in range(2, 18)]
    flooders = [
        threading.Thread(target=lambda s=s, n=n: (started.wait(30), _flood(addr, stop, n, opened, s)), daemon=True)
        for s, n in sources
    ]
    for t in flooders:
        t.start()
    box: dict = {}
    running = threading.Thread(target=lambda: box.update(a=run_ranks(lc.controller, "flood-a", 2, body, timeout_s=20)))
    running.start()
    try:
        assert started.wait(30)
        time.sleep(1.0)  # the flood is on
        joining = run_ranks(lc.controller, "flood-b", 2, lambda c, r: c.allreduce(np.ones(10, np.float32))[0])
        running.join(timeout=60)
    finally:
        stop.set()
        for t in flooders:
            t.join(10)
    results, errors = box["a"]
    assert errors == [None, None] and results == [100, 100], (results, errors)
    assert joining[1] == [None, None] and joining[0] == [2.0, 2.0], joining
    assert opened[0] >= 1200 + 16 * 64
    counters = lc.controller_call("GET", "/v1/health")[1]["connections"]
    assert counters.get("evicted_per_peer", 0) > 0 and counters.get("evicted_pending", 0) > 0, counters


def test_clean_leave_fails_peers_at_once_naming_the_rank(small):
    """Rank 2 leaves after one allreduce; ranks 0 and 1, blocked in the second, fail within
    2 s with an error naming rank 2 (before: the full timeout, "every switch ... alive")."""
    waited: dict[int, float] = {}

    def body(comm: Communicator, rank: int) -> None:
        comm.allreduce(np.ones(2000, np.float32))
        if rank == 2:
            return  # close(): a clean leave
        time.sleep(0.2)
        t0 = time.monotonic()
        try:
            comm.allreduce(np.ones(2000, np.float32))
        finally:
            waited[rank] = time.monotonic() - t0

    _, errors = run_ranks(small.controller, "leaver", 3, body, timeout_s=30)
    assert errors[2] is None
    for rank in (0, 1):
        assert isinstance(errors[rank], CommunicatorError), errors
        assert "rank 2 left the job cleanly after 1 allreduce" in str(errors[rank])
        assert waited[rank] < 2.0, waited


def test_size_mismatch_fails_both_ranks_naming_it(small):
    """Ranks passing 1,500 and 3,000 floats to one allreduce fail within 2 s with an error
    that says so (before: the 30 s timeout blaming loss outside the daemons)."""
    waited: dict[int, float] = {}

    def body(comm: Communicator, rank: int) -> None:
        comm.allreduce(np.ones(1000, np.float32))  # the first call agrees
        t0 = time.monotonic()
        try:
            comm.allreduce(np.ones(1500 * (rank + 1), np.float32))
        finally:
            waited[rank] = time.monotonic() - t0

    _, errors = run_ranks(small.controller, "mismatch", 2, body, timeout_s=30)
    for rank in (0, 1):
        assert isinstance(errors[rank], CommunicatorError), errors
        assert "size mismatch in allreduce #2: rank 0 passed 1500 floats, rank 1 passed 3000" in str(errors[rank])
        assert waited[rank] < 2.0, waited


def test_size_mismatch_where_the_smaller_rank_completes(small):
    """1,000 against 2,000 floats with 1,000 per datagram: rank 0's one packet completes
    (its sum is right for what it passed) and it leaves; rank 1 waits for a second packet
    nobody sends, and fails at once naming the mismatch, not after its timeout."""
    t0 = time.monotonic()

    def body(comm: Communicator, rank: int) -> None:
        comm.allreduce(np.ones(1000 * (rank + 1), np.float32))

    _, errors = run_ranks(small.controller, "mismatch-first", 2, body, timeout_s=30)
    assert time.monotonic() - t0 < 5.0
    assert errors[0] is None
    assert "size mismatch in allreduce #1: rank 0 passed 1000 floats, rank 1 passed 2000" in str(errors[1])


def test_dead_cluster_is_noticed_within_seconds():
    """The controller and every daemon gone (the process that owned the cluster died):
    a rank blocked in allreduce fails within a few seconds naming it, not after timeout_s."""
    lc = LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, payload_elems=1000, heartbeat_timeout_s=30.0).start()
    comms: list = [None, None]

    def make(rank: int) -> None:
        comms[rank] = Communicator(lc.controller, "orphan", rank, 2, timeout_s=60, size_bytes=4000, token=lc.token)
        comms[rank].allreduce(np.ones(1000, np.float32))

    threads = [threading.Thread(target=make, args=(r,), daemon=True) for r in (0, 1)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert all(c is not None and c.calls == 1 for c in comms)
        lc.stop_processes_only()  # SIGTERM/SIGKILL: as if the owner had died
        t0 = time.monotonic()
        with pytest.raises(CommunicatorError, match="the cluster is gone"):
            comms[0].allreduce(np.ones(1000, np.float32))
        assert time.monotonic() - t0 < 10.0
    finally:
        lc.stop()
        for c in comms:
            if c is not None:
                c.close()


def test_a_request_without_the_token_loses_its_connection(small):
    """A 401 (or an open /v1/health without the token) closes its connection, so it holds
    no place; a connection with the token stays open for its next request."""
    import os

    addr = parse_addr(small.controller)
    token = small.token or os.environ["PANAMA_TOKEN"]

    def exchange(headers: str) -> tuple[bytes, bytes]:
        with socket.create_connection(addr, timeout=10) as s:
            s.sendall(f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
            first = s.recv(65536)
            s.settimeout(1.0)
            try:
                after = s.recv(65536)
            except TimeoutError:
                after = b"still open"
            return first, after

    first, after = exchange("")
    assert first.startswith(b"HTTP/1.1 401") and after == b""
    first, after = exchange(f"Authorization: Bearer {token}\r\n")
    assert first.startswith(b"HTTP/1.1 200") and after == b"still open"
