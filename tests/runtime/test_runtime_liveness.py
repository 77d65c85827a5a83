"""Liveness is measured by what the ranks sent, not by the controller's own clock (issue 35
item 3): a controller stopped for several heartbeat timeouts (SIGSTOP, then SIGCONT)
fails no job whose ranks kept working; a rank that really stopped is still found."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import numpy as np
from rt_helpers import run_ranks

from panama.core.jobs import JobInput
from panama.runtime.cluster import LocalCluster
from panama.runtime.controller.jobs import Job, Rank
from panama.runtime.controller.monitor import STALL_SLACK_S, WATCH_S, Monitor

HEARTBEAT_TIMEOUT_S = 1.0
STALL_S = 3.0  # three heartbeat timeouts


def test_a_stalled_controller_fails_no_job_whose_ranks_kept_sending():
    with LocalCluster(
        leaves=1, spines=1, hosts_per_leaf=2, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, log_level="WARNING"
    ) as lc:
        controller = lc.procs["controller"].pid
        stalled = threading.Event()
        done_after: list[int] = []

        def body(comm, rank):
            x = np.full(4_001, float(rank + 1), np.float32)
            x[-1] = 0.0  # rank 0 raises this flag once the stall is over: both ranks see it in one sum
            calls = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # allreduces through the stall
                if rank == 0 and stalled.is_set():
                    x[-1] = 1.0
                out = comm.allreduce(x)
                assert np.all(out[:-1] == 3.0)
                calls += 1
                if out[-1] > 0:
                    break
            for _ in range(20):  # and after it: the job still runs
                assert np.all(comm.allreduce(x)[:-1] == 3.0)
            done_after.append(rank)
            return calls

        results: dict = {}
        runner = threading.Thread(
            target=lambda: results.update(out=run_ranks(lc.controller, "stalled", 2, body, timeout_s=20)), daemon=True
        )
        runner.start()
        deadline = time.monotonic() + 30
        while lc.controller_call("GET", "/v1/jobs/stalled")[1].get("state") != "running":
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        os.kill(controller, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            os.kill(controller, signal.SIGCONT)
        time.sleep(2 * HEARTBEAT_TIMEOUT_S)  # a monitor that judged by its own clock has failed the job by now
        stalled.set()
        runner.join(timeout=60)
        values, errors = results["out"]
        assert errors == [None, None], errors
        assert sorted(done_after) == [0, 1] and all(calls > 0 for calls in values), values
        health = lc.controller_call("GET", "/v1/health")[1]
        assert health["monitor"]["stalls"] >= 1 and health["monitor"]["stalled_s"] >= STALL_S - 0.5, health
        info = lc.controller_call("GET", "/v1/jobs/stalled")[1]
        assert info["state"] == "completed", info


class _Service:
    """What the monitor reads of a service (its public surface), for a test with an explicit clock."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.heartbeat_timeout_s = HEARTBEAT_TIMEOUT_S
        self.counters = {"monitor_errors": 0, "monitor_restarts": 0}


def test_the_stall_grant_moves_deadlines_by_the_stall_only():
    """The loop silent for more than a watch period plus the slack is a stall: every
    running rank's deadline moves on by the lateness (never past now); an on-time watch
    moves nothing, so a rank that stopped sending is still found."""
    job = Job("j", 2, 0.0)
    job.life.fire(JobInput.ALL_IN)
    job.life.fire(JobInput.INSTALLED)
    sending = Rank(0, ("127.0.0.1", 1), "h0", last_seen=99.9)
    stopped = Rank(1, ("127.0.0.1", 2), "h1", last_seen=95.0)
    job.ranks = {0: sending, 1: stopped}
    monitor = Monitor(_Service({"j": job}), drop_rank=None)
    monitor.seen = 100.0
    assert monitor.observe(100.0 + WATCH_S + STALL_SLACK_S) == 0.0  # late, but within the slack
    assert (sending.last_seen, stopped.last_seen) == (99.9, 95.0) and monitor.stalls == 0
    late = monitor.observe(120.6)  # the process was stopped about 20 s
    assert abs(late - (20.0 - WATCH_S)) < 1e-9 and monitor.stalls == 1
    assert abs(sending.last_seen - (99.9 + late)) < 1e-9 and 120.6 - sending.last_seen < HEARTBEAT_TIMEOUT_S
    assert abs(stopped.last_seen - (95.0 + late)) < 1e-9  # its 5 s of silence before the stall still count
    assert 120.6 - stopped.last_seen > HEARTBEAT_TIMEOUT_S  # ... and fail it
    assert monitor.observe(120.6 + WATCH_S) == 0.0  # counted once


def test_the_monitor_restarts_a_pass_loop_that_ended():
    """``health`` restarts a monitor task that ended and counts it (as before the split)."""

    async def main():
        monitor = Monitor(_Service({}), drop_rank=None)

        async def broken():
            raise RuntimeError("boom")

        monitor.task = asyncio.create_task(broken())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        monitor.health()
        restarted = monitor.task
        ok, facts = monitor.health()
        restarted.cancel()
        return facts

    facts = asyncio.run(main())
    assert facts.restarts == 1 and facts.alive
