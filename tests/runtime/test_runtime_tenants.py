"""A job is one run; tenants cannot touch each other's jobs (issue 35 items 1 and 6).

A job name binds the run that registered it first (its job token); the cluster token is
for operators: it admits new jobs but cannot act inside one (docs/runtime.md, "Trust
model"). Every cross-job action of issue 35 is tried here and refused, and the jobs it
was tried on still get correct sums.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from rt_helpers import run_ranks, wait_for

from panama.runtime.control.client import request_json
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator, CommunicatorError


def _job(cluster, name: str) -> dict:
    return cluster.controller_call("GET", f"/v1/jobs/{name}")[1]


def _as(cluster, token: str, method: str, path: str, body=None) -> tuple[int, dict]:
    return request_json(cluster.controller_addr, method, path, body, timeout_s=10, what="controller", token=token)


def test_a_second_run_with_the_same_name_is_refused_never_merged(cluster):
    """The interleaving of issue 35: run A registers rank 0, run B (same name, its own
    token) registers rank 0, run A registers rank 1. Before: B0 replaced A0, and A1 and B0
    summed each other's data (1101 where A's sum is 201 and B's 2001)."""
    job, n = "same-name", 3_000
    run_a, run_b = new_token(), new_token()
    out: dict = {}

    def rank(tag: str, r: int, value: float, token: str) -> None:
        try:
            with Communicator(cluster.controller, job, r, 2, timeout_s=30, job_token=token, connect=True) as comm:
                out[tag] = comm.allreduce(np.full(n, value, np.float32))
        except BaseException as exc:  # noqa: BLE001 - reported below
            out[tag] = exc

    a0 = threading.Thread(target=rank, args=("A0", 0, 100.0, run_a), daemon=True)
    a0.start()
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "run A's rank 0 registered")
    run = _job(cluster, job)["run"]
    rank("B0", 0, 1000.0, run_b)  # refused at once: the name is held by run A
    rank("A1", 1, 101.0, run_a)
    a0.join(timeout=60)
    assert isinstance(out["B0"], CommunicatorError), out["B0"]
    message = str(out["B0"])
    assert "HTTP 409" in message and f"'{job}'" in message and f"run {run}" in message, message
    assert "never merged" in message
    for tag in ("A0", "A1"):
        assert not isinstance(out[tag], BaseException), out[tag]
        assert np.all(out[tag] == 201.0), (tag, out[tag][:4])
    info = _job(cluster, job)
    assert info["state"] == "completed" and info["run"] == run


@pytest.fixture
def registering_job(cluster):
    """Job ``victim`` (2 ranks, its own run) with rank 0 registered and waiting for rank 1;
    yields (name, token, results); its rank 1 is registered by the test once done."""
    job, token, out = "victim", new_token(), {}

    def rank0() -> None:
        try:
            with Communicator(cluster.controller, job, 0, 2, timeout_s=60, job_token=token, connect=True) as comm:
                out[0] = comm.allreduce(np.full(2_000, 1.0, np.float32))
        except BaseException as exc:  # noqa: BLE001
            out[0] = exc

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "victim's rank 0 registered")
    yield job, token, out
    t.join(timeout=60)


def test_a_tenant_cannot_register_into_another_job(cluster, registering_job):
    """Taking another job's missing rank (before: any token holder could, and got its key)."""
    job, token, out = registering_job
    before = _job(cluster, job)
    body = {"rank": 1, "world_size": 2, "udp": "127.0.0.1:7001", "wait_s": 5}
    cluster_token = cluster.token
    for attempt in (body, {**body, "job_token": new_token()}):  # the cluster token alone; its own run
        status, reply = _as(cluster, cluster_token, "POST", f"/v1/jobs/{job}/register", attempt)
        assert status == 409 and "held by another run" in reply["error"], reply
    status, reply = _as(cluster, new_token(), "POST", f"/v1/jobs/{job}/register", body)  # a made-up token
    assert status == 401, reply
    assert _job(cluster, job) == before  # nothing changed
    with Communicator(cluster.controller, job, 1, 2, timeout_s=30, job_token=token, connect=True) as comm:
        mine = comm.allreduce(np.full(2_000, 2.0, np.float32))
    wait_for(lambda: 0 in out, "victim's rank 0 done")
    assert np.all(mine == 3.0) and np.all(out[0] == 3.0), out


def test_a_tenant_cannot_leave_heartbeat_read_or_delete_another_job(cluster):
    """Job B runs; a tenant holding only the cluster token (and its own job A's token)
    tries each action of issue 35 on it: all refused, B unchanged and its sums right; the
    operator's explicit path still ends a job."""
    b_token, a_token = new_token(), new_token()
    started, release = threading.Barrier(3), threading.Event()

    def body(comm, rank):
        first = comm.allreduce(np.full(1_500, float(rank + 1), np.float32))
        started.wait(timeout=30)
        release.wait(timeout=60)
        second = comm.allreduce(np.full(1_500, float(10 * (rank + 1)), np.float32))
        return first, second

    results: dict = {}
    runner = threading.Thread(
        target=lambda: results.update(
            zip(("values", "errors"), run_ranks(cluster.controller, "tenant-b", 2, body, job_token=b_token))
        ),
        daemon=True,
    )
    runner.start()
    started.wait(timeout=60)
    try:
        b = _job(cluster, "tenant-b")
        assert b["state"] == "running"
        own = {"rank": 0, "world_size": 2, "udp": "127.0.0.1:7100", "job_token": a_token, "wait_s": 60}
        tenant_a = threading.Thread(  # a job of its own, waiting for its second rank
            target=lambda: results.update(a=_as(cluster, cluster.token, "POST", "/v1/jobs/tenant-a/register", own)),
            daemon=True,
        )
        tenant_a.start()
        wait_for(lambda: _job(cluster, "tenant-a").get("registered") == [0], "tenant A's rank 0 registered")
        for token, who in ((cluster.token, "the cluster token"), (a_token, "another job's token")):
            for method, path, body_ in (
                ("POST", "/v1/jobs/tenant-b/leave", {"rank": 0}),
                ("POST", "/v1/jobs/tenant-b/heartbeat", {"rank": 1}),
                ("POST", "/v1/jobs/tenant-b/unicast", {"rank": 1, "reason": "mine now"}),
                ("DELETE", "/v1/jobs/tenant-b", None),
            ):
                status, reply = _as(cluster, token, method, path, body_)
                assert status == 403 and "needs its job token" in reply["error"], (who, method, path, reply)
            status, reply = _as(cluster, a_token, "GET", "/v1/jobs/tenant-b")  # reading: operators and B only
            assert status == 403, reply
        for path in ("/v1/jobs", "/v1/switches", "/metrics"):
            assert _as(cluster, a_token, "GET", path)[0] == 403  # a job token is no operator's
        assert _as(cluster, b_token, "POST", "/v1/jobs/tenant-b/heartbeat", {"rank": 1})[0] == 200
        after = _job(cluster, "tenant-b")
        assert after["state"] == "running" and after["left"] == [] and after["job_id"] == b["job_id"]
    finally:
        release.set()
        runner.join(timeout=90)
    assert results["errors"] == [None, None], results["errors"]
    for first, second in results["values"]:
        assert np.all(first == 3.0) and np.all(second == 30.0)
    # The operator's explicit path ends any job (here: tenant A's, still registering).
    assert _as(cluster, a_token, "DELETE", "/v1/admin/jobs/tenant-a")[0] == 403
    status, reply = _as(cluster, cluster.token, "DELETE", "/v1/admin/jobs/tenant-a")
    assert status == 200 and reply["state"] == "failed" and "operator" in reply["reason"], reply
    tenant_a.join(timeout=30)
    assert results["a"][0] == 503, results["a"]  # its waiting rank is told the job ended


def test_ranks_in_threads_of_one_process_draw_one_job_token():
    """The default job token is drawn once per process, also when its ranks ask at once
    (before the lock, ranks started together drew several and refused each other: 409)."""
    from panama.runtime.worker import link

    link._PROCESS_JOB_TOKEN = None  # as in a fresh process
    start, tokens = threading.Barrier(16), []

    def draw() -> None:
        start.wait(timeout=10)
        tokens.append(link.process_job_token())

    threads = [threading.Thread(target=draw) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(tokens) == 16 and len(set(tokens)) == 1


def test_a_job_token_is_known_by_one_lookup_while_its_job_is_live_or_recent():
    """``holds_token`` (admission asks it for every connection with a bearer token) is one
    digest lookup; a token held by two jobs (one launcher's) stays known while either is;
    a job that ended without a job id, or left the history, is forgotten."""
    from panama.core.jobs import JobInput
    from panama.runtime.controller import service as service_module
    from panama.runtime.controller.jobs import Job
    from panama.runtime.controller.service import ControllerService, load_cluster

    spec = load_cluster(
        {
            "leaves": 1,
            "spines": 1,
            "hosts_per_leaf": 2,
            "switches": {
                "leaf0": {"udp": "127.0.0.1:9", "control": "127.0.0.1:9"},
                "spine0": {"udp": "127.0.0.1:9", "control": "127.0.0.1:9"},
            },
        }
    )
    service = ControllerService(spec)
    shared, own = new_token(), new_token()
    jobs = [Job(f"j{k}", 2, 0.0, run=f"r{k}", token=t) for k, t in enumerate((shared, shared, own))]
    for job in jobs:
        service.jobs[job.name] = job
        service.remember_token(job)
    assert all(service.holds_token(t) for t in (shared, own)) and not service.holds_token(new_token())
    jobs[0].life.fire(JobInput.ABANDONED)
    service._end(jobs[0])  # no job id: not kept in the history
    assert service.holds_token(shared)  # j1 still holds it
    jobs[1].job_id = 7
    jobs[1].life.fire(JobInput.DELETED)
    service._end(jobs[1])
    assert service.holds_token(shared)  # in the history: its ranks still learn why it ended
    for k in range(service_module.HISTORY):  # later jobs push it out of the history
        later = Job(f"later{k}", 2, 0.0)
        later.job_id = 100 + k
        later.life.fire(JobInput.DELETED)
        service._end(later)
    assert not service.holds_token(shared) and service.holds_token(own)
