"""A control plane you can trust (issue 13): authentication, race-free admission, 409s that
change nothing, bad installs refused, crash safety (controller restart, crashed ranks),
request limits, and errors that say what is true."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from rt_helpers import assert_close_to_reference, random_arrays, run_ranks, wait_for

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.client import request_json
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator, CommunicatorError
from panama.runtime.worker.link import process_job_token

TOKEN = os.environ["PANAMA_TOKEN"]
RUN = new_token()  # a run's job token, for the tests that register by hand


def _call(addr, method, path, body=None, token=TOKEN, raw: bytes | None = None, timeout=10):
    """One request; ``token=""`` sends none. Returns (status, JSON or text)."""
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout)
    headers = {}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        out = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(out)
    except ValueError:
        return resp.status, out.decode("utf-8", "replace")


def _metric(cluster, name):
    for line in cluster.controller_call("GET", "/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def _job(cluster, name):
    return cluster.controller_call("GET", f"/v1/jobs/{name}")[1]


# ---------------------------------------------------------------------- authentication
CONTROLLER_ROUTES = [
    ("GET", "/v1/jobs", None),
    ("GET", "/v1/jobs/anyjob", None),
    ("GET", "/v1/switches", None),
    ("GET", "/metrics", None),
    ("DELETE", "/v1/jobs/anyjob", None),
    ("POST", "/v1/jobs/anyjob/register", {"rank": 0, "world_size": 2, "udp": "127.0.0.1:5000", "wait_s": 1}),
    ("POST", "/v1/jobs/anyjob/heartbeat", {"rank": 0}),
    ("POST", "/v1/jobs/anyjob/leave", {"rank": 0}),
    ("POST", "/v1/jobs/anyjob/unicast", {"rank": 0, "reason": "test"}),
]
DAEMON_ROUTES = [
    ("GET", "/stats", None),
    ("GET", "/metrics", None),
    ("GET", "/jobs", None),
    ("PUT", "/jobs/77", {"trees": [{"tree_id": 0, "children": ["127.0.0.1:5000"], "parent": None}]}),
    ("DELETE", "/jobs/77", None),
    ("DELETE", "/jobs/77/multicast", {"reason": "test"}),
]


@pytest.mark.parametrize("token", ["", "not-the-token-of-this-cluster"], ids=["anonymous", "wrong-token"])
def test_a_client_without_the_token_is_refused_everywhere(cluster, token):
    before_jobs = cluster.controller_call("GET", "/v1/jobs")[1]
    before_daemon = cluster.switch_call("leaf0", "GET", "/jobs")[1]
    for method, path, body in CONTROLLER_ROUTES:
        status, reply = _call(cluster.controller_addr, method, path, body, token=token)
        assert status == 401, (method, path, status, reply)
        assert reply["error"].startswith("authorization"), reply
    for name in cluster.switch_names:
        for method, path, body in DAEMON_ROUTES:
            status, reply = _call(cluster.procs[name].control, method, path, body, token=token)
            assert status == 401, (name, method, path, status, reply)
    # Health stays open (liveness probes carry no secret) and says nothing secret.
    status, health = _call(cluster.controller_addr, "GET", "/v1/health", token=token)
    assert status == 200 and health["status"] == "ok"
    status, health = _call(cluster.procs["leaf0"].control, "GET", "/health", token=token)
    assert status == 200 and health["data_plane"]["alive"]
    # Nothing changed, and a worker without the token is told why.
    assert cluster.controller_call("GET", "/v1/jobs")[1] == before_jobs
    assert cluster.switch_call("leaf0", "GET", "/jobs")[1] == before_daemon
    # 401, or 403 when its own process's job token is one the controller knows (an ended job's)
    with pytest.raises(CommunicatorError, match=r"HTTP 40[13].*PANAMA_TOKEN"):
        Communicator(cluster.controller, "anon", 0, 2, timeout_s=2, connect=True, token=token or "")
    assert _metric(cluster, "panama_controller_jobs_unauthorized_total") >= len(CONTROLLER_ROUTES)


def test_token_and_state_files_are_private(tmp_path):
    env = dict(os.environ, PANAMA_CLUSTER_STATE=str(tmp_path / "state" / "cluster.json"))
    env.pop("PANAMA_TOKEN")  # cluster up makes a fresh token
    cmd = [sys.executable, "-m", "panama.cli.runtime_cmds", "cluster"]
    up = subprocess.run([*cmd, "up", "--leaves", "1", "--spines", "1", "--hosts-per-leaf", "2", "--json"],
                        env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        state_file = tmp_path / "state" / "cluster.json"
        state = json.loads(state_file.read_text())
        assert len(state["token"]) >= 40 and state["token"] != TOKEN
        assert state_file.stat().st_mode & 0o777 == 0o600
        token_file = tmp_path / "state" / "run" / "token"
        assert token_file.read_text() == state["token"] and token_file.stat().st_mode & 0o777 == 0o600
        # issue 27: the directories 0700, every log, settings and cluster file 0600
        for d in (tmp_path / "state", tmp_path / "state" / "run"):
            assert d.stat().st_mode & 0o777 == 0o700, d
        run_files = [p for p in (tmp_path / "state" / "run").iterdir() if p.suffix in (".log", ".json", ".toml")]
        assert any(p.suffix == ".log" for p in run_files)
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in run_files), [
            (p.name, oct(p.stat().st_mode & 0o777)) for p in run_files
        ]
        ctl = tuple(state["controller"].rsplit(":", 1))
        ctl = (ctl[0], int(ctl[1]))
        assert _call(ctl, "GET", "/v1/jobs", token="")[0] == 401
        assert _call(ctl, "GET", "/v1/jobs", token=state["token"])[0] == 200
    finally:
        subprocess.run([*cmd, "down"], env=env, capture_output=True, timeout=60)


# ---------------------------------------------------------------------- admission
def test_8_jobs_of_2_ranks_registering_at_the_same_instant_are_all_admitted(cluster):
    jobs, world = 8, 2
    rng = np.random.default_rng(13)
    data = {j: random_arrays(rng, world, (5_000,)) for j in range(jobs)}
    go = threading.Barrier(jobs * world, timeout=60)
    out: dict[tuple[int, int], object] = {}

    def rank(j: int, r: int) -> None:
        try:
            comm = Communicator(cluster.controller, f"burst-{j}", r, world, timeout_s=60)
            go.wait()
            comm.connect(size_bytes=20_000)  # every register request at the same instant
            out[(j, r)] = (comm.job_id, comm.allreduce(data[j][r]))
            comm.close()
        except BaseException as exc:  # noqa: BLE001
            out[(j, r)] = exc

    threads = [threading.Thread(target=rank, args=(j, r), daemon=True) for j in range(jobs) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
        assert not t.is_alive(), "a rank did not finish within 180 s"
    errors = {k: v for k, v in out.items() if isinstance(v, BaseException)}
    assert not errors, errors
    ids = {j: {out[(j, r)][0] for r in range(world)} for j in range(jobs)}
    assert all(len(v) == 1 for v in ids.values()), ids  # ranks of a job agree
    assert len({next(iter(v)) for v in ids.values()}) == jobs  # and jobs have distinct ids
    for j in range(jobs):
        assert out[(j, 0)][1].tobytes() == out[(j, 1)][1].tobytes()
        assert_close_to_reference(out[(j, 0)][1], data[j])
    health = cluster.controller_call("GET", "/v1/health")[1]
    assert health["controllers_created"] == 1 and health["monitor"]["alive"] and health["monitor"]["errors"] == 0
    for j in range(jobs):
        assert _job(cluster, f"burst-{j}")["state"] == "completed"


def _register(cluster, job, body, results, key):
    results[key] = _call(cluster.controller_addr, "POST", f"/v1/jobs/{job}/register", body, timeout=60)


def test_a_refused_registration_changes_nothing(cluster):
    job = "same-job"
    base = {"world_size": 2, "trees": 2, "payload_elems": 900, "size_bytes": 1000, "wait_s": 30, "job_token": RUN}
    results: dict = {}
    t0 = threading.Thread(
        target=_register, args=(cluster, job, {**base, "rank": 0, "udp": "127.0.0.1:6000"}, results, 0)
    )
    t0.start()
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "rank 0 registered")
    before = _job(cluster, job)
    conflicts = [
        ({**base, "rank": 0, "udp": "127.0.0.1:6009", "payload_elems": 1, "size_bytes": 10**12, "trees": None}, "rank"),
        ({**base, "rank": 1, "udp": "127.0.0.1:6009", "world_size": 3, "payload_elems": 1}, "world_size"),
        ({**base, "rank": 1, "udp": "127.0.0.1:6009", "trees": 1, "payload_elems": 1}, "trees"),
    ]
    for body, field in conflicts:
        status, reply = _call(cluster.controller_addr, "POST", f"/v1/jobs/{job}/register", body)
        assert status == 409 and reply["error"].startswith(field), reply
        assert _job(cluster, job) == before  # nothing changed: payload, size, trees, ranks
    _register(cluster, job, {**base, "rank": 1, "udp": "127.0.0.1:6001"}, results, 1)
    t0.join(timeout=60)
    for r in (0, 1):
        status, reply = results[r]
        assert status == 200 and reply["admitted"], reply
        assert reply["payload_elems"] == 900 and len(reply["trees"]) == 2
    for r in (0, 1):
        _call(cluster.controller_addr, "POST", f"/v1/jobs/{job}/leave", {"rank": r}, token=RUN)
    assert _job(cluster, job)["state"] == "completed"


def _open_registration(cluster, job, body, token=TOKEN) -> socket.socket:
    """A register request sent on a raw connection left open: a rank waiting at the barrier
    (closing the socket is its process dying)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(cluster.controller_addr, timeout=30)
    sock.sendall(
        f"POST /v1/jobs/{job}/register HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_a_waiting_rank_is_taken_over_only_by_its_own_run_once_its_call_hung_up(cluster):
    """Issue 35: a live, waiting registration is never replaced (not by another incarnation
    of its run, not by another run); once its call hung up (its process died), a new
    incarnation of the same run takes the rank and the daemons get its address."""
    job = "reincarnated"
    base = {"world_size": 3, "wait_s": 30, "job_token": RUN}
    results: dict = {}
    r0 = threading.Thread(
        target=_register, args=(cluster, job, {**base, "rank": 0, "udp": "127.0.0.1:6100"}, results, "r0")
    )
    r0.start()
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "rank 0 registered")
    old = _open_registration(cluster, job, {**base, "rank": 1, "udp": "127.0.0.1:6101", "incarnation": "a1"})
    wait_for(lambda: _job(cluster, job).get("registered") == [0, 1], "rank 1 registered")
    before = _job(cluster, job)
    again = {**base, "rank": 1, "udp": "127.0.0.1:6102", "incarnation": "b2"}
    status, reply = _call(cluster.controller_addr, "POST", f"/v1/jobs/{job}/register", again)
    assert status == 409 and "already registered" in reply["error"], reply
    intruder = {**again, "job_token": new_token()}
    status, reply = _call(cluster.controller_addr, "POST", f"/v1/jobs/{job}/register", intruder)
    assert status == 409 and "held by another run" in reply["error"] and before["run"] in reply["error"], reply
    assert _job(cluster, job) == before  # nothing changed
    replaced = _metric(cluster, "panama_controller_jobs_replaced_ranks_total")
    old.close()  # rank 1's process died at the barrier
    new = threading.Thread(target=_register, args=(cluster, job, again, results, "new"))
    new.start()
    # The new incarnation holds rank 1 before rank 2 completes the barrier (else the job
    # could be admitted with the dead rank's address, or admission could race the takeover).
    wait_for(
        lambda: _metric(cluster, "panama_controller_jobs_replaced_ranks_total") == replaced + 1,
        "the new incarnation of rank 1 to replace the one that hung up",
    )
    _register(cluster, job, {**base, "rank": 2, "udp": "127.0.0.1:6103"}, results, "r2")
    for t in (r0, new):
        t.join(timeout=60)
    assert all(results[k][0] == 200 for k in ("r0", "new", "r2")), results
    job_id = results["new"][1]["job_id"]
    children = json.dumps(
        [cluster.switch_call(s, "GET", "/jobs")[1]["jobs"].get(str(job_id)) for s in ("leaf0", "leaf1")]
    )
    assert "127.0.0.1:6102" in children and "127.0.0.1:6101" not in children
    assert _call(cluster.controller_addr, "DELETE", f"/v1/jobs/{job}", token=RUN)[0] == 200


CRASHING_RANK = """
import sys
from panama.runtime.worker.communicator import Communicator
Communicator(sys.argv[1], sys.argv[2], 1, 3, timeout_s=120, connect=True)
"""


def test_a_rank_that_crashed_at_the_registration_barrier_rejoins(cluster):
    job, world = "phoenix", 3
    rng = np.random.default_rng(14)
    data = random_arrays(rng, world, (3_000,))
    out: dict = {}

    def rank(r):
        try:
            with Communicator(cluster.controller, job, r, world, timeout_s=90, connect=True) as comm:
                out[r] = comm.allreduce(data[r])
        except BaseException as exc:  # noqa: BLE001
            out[r] = exc

    first = threading.Thread(target=rank, args=(0,), daemon=True)
    first.start()
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "rank 0 registered", timeout_s=60)
    env = dict(os.environ, PANAMA_JOB_TOKEN=process_job_token())  # one run with the threads' ranks
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_RANK, cluster.controller, job], env=env)
    try:
        wait_for(lambda: _job(cluster, job).get("registered") == [0, 1], "the doomed rank 1 registered", timeout_s=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    # The dead rank's provisional registration is dropped (its register call hung up) ...
    wait_for(lambda: _job(cluster, job).get("registered") == [0], "the dead registration dropped", timeout_s=30)
    # ... and the restarted rank 1 joins rank 0 and rank 2 in a working job.
    rest = [threading.Thread(target=rank, args=(r,), daemon=True) for r in (1, 2)]
    for t in rest:
        t.start()
    for t in [first, *rest]:
        t.join(timeout=120)
        assert not t.is_alive(), "a rank did not finish"
    assert not any(isinstance(v, BaseException) for v in out.values()), out
    for r in range(world):
        assert out[r].tobytes() == out[0].tobytes()
    assert_close_to_reference(out[0], data)
    info = _job(cluster, job)
    assert info["state"] == "completed"
    assert _metric(cluster, "panama_controller_jobs_dropped_registrations_total") >= 1


def test_a_job_whose_rank_failed_is_failed_not_completed(cluster):
    job = "half-dead"

    def body(comm, rank):
        if rank == 0:
            try:
                comm.allreduce(np.ones(100, np.float32))  # rank 1 never joins this call
            except CommunicatorError as exc:
                return str(exc)
        return None

    results, errors = run_ranks(cluster.controller, job, 2, body, timeout_s=4, connect=True)
    # rank 1 left cleanly without joining: rank 0 is told so at once (not after its timeout)
    assert errors == [None, None] and "rank 1 left the job cleanly after 0 allreduce(s)" in results[0]
    info = _job(cluster, job)
    assert info["state"] == "failed" and "rank 0 left after an error" in info["reason"], info


# ---------------------------------------------------------------------- daemons
def test_a_bad_put_is_refused_and_the_data_plane_keeps_serving(cluster):
    control = cluster.procs["spine1"].control
    bad = [
        {"trees": [{"tree_id": 0, "children": ["127.0.0.1:7000"], "parent": "255.255.255.255:9"}]},
        {
            "trees": [{"tree_id": 0, "children": ["127.0.0.1:7000"], "parent": "192.0.2.1:9"}]
        },  # not routable from 127.0.0.1
        {"trees": [{"tree_id": 0, "children": ["0.0.0.0:7000"]}]},
        {"trees": [{"tree_id": 0, "children": ["127.0.0.1:7000"]}], "key": "xyz"},
    ]
    for body in bad:
        status, reply = _call(control, "PUT", "/jobs/4242", body)
        assert status == 400, reply
    assert "4242" not in cluster.switch_call("spine1", "GET", "/jobs")[1]["jobs"]
    status, health = _call(control, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["data_plane"]["alive"]
    rng = np.random.default_rng(15)
    data = random_arrays(rng, 4, (20_000,))
    results, errors = run_ranks(cluster.controller, "after-bad-put", 4, lambda c, r: c.allreduce(data[r]), timeout_s=30)
    assert errors == [None] * 4, errors
    assert_close_to_reference(results[0], data)


def test_bad_unicast_requests_are_refused_naming_the_problem(cluster):
    control = cluster.procs["leaf0"].control
    for body, status, start in (
        ({"reason": "x"}, 404, "leaf0: job 4243 is not installed"),
        ({"reason": ""}, 400, "reason"),
        ({"reason": 7}, 400, "reason"),
        ({"why": "x"}, 400, "why: unknown key"),
    ):
        got, reply = _call(control, "DELETE", "/jobs/4243/multicast", body)
        assert got == status and reply["error"].startswith(start), reply
    for body, status, start in (
        ({"rank": 0, "reason": "x"}, 404, "job: unknown job"),
        ({"rank": 0}, 404, "job: unknown job"),
    ):
        got, reply = _call(cluster.controller_addr, "POST", "/v1/jobs/nosuchjob/unicast", body)
        assert got == status and reply["error"].startswith(start), reply
    status, health = _call(control, "GET", "/health")
    assert status == 200 and health["data_plane"]["alive"]


@pytest.mark.parametrize(
    "raw,field",
    [
        (b'{"rank": ' + b"9" * 5000 + b', "world_size": 2, "udp": "127.0.0.1:1"}', "body"),
        (b"[" * 100_000 + b"]" * 100_000, "body"),
        (b'{"rank": 0, "world_size": 2, "udp": "127.0.0.1:1", "colour": 1}', "colour"),
        (b'{"rank": 0, "world_size": 2, "udp": "127.0.0.1:1", "incarnation": "a b"}', "incarnation"),
        (b'{"rank": 0, "world_size": 2, "udp": "127.0.0.1:1", "multicast": "yes"}', "multicast"),
        (b"\xff\xfe", "body"),
    ],
    ids=["5000-digit int", "deep nesting", "unknown field", "bad incarnation", "bad multicast", "not utf-8"],
)
def test_malformed_bodies_get_400_never_500(cluster, raw, field):
    before = cluster.controller_call("GET", "/v1/jobs")[1]
    status, reply = _call(cluster.controller_addr, "POST", "/v1/jobs/bodies/register", raw=raw)
    assert status in (400, 413) and reply["error"].startswith(field), reply
    status, reply = _call(cluster.procs["leaf0"].control, "PUT", "/jobs/5", raw=raw)
    assert status in (400, 413), reply
    assert cluster.controller_call("GET", "/v1/jobs")[1] == before


@pytest.mark.parametrize("name", ["a?b", "x/y", "é", "", "-lead", "a" * 129, "a b"])
def test_job_names_are_validated_and_quoted(cluster, name):
    from urllib.parse import quote

    with pytest.raises(ValueError, match="^job"):
        Communicator(cluster.controller, name, 0, 2)
    status, reply = _call(cluster.controller_addr, "POST", f"/v1/jobs/{quote(name, safe='')}/register",
                          {"rank": 0, "world_size": 2, "udp": "127.0.0.1:1"})  # fmt: skip
    assert status in (400, 404, 405) and status != 500, reply
    if status == 400:
        assert reply["error"].startswith("job"), reply


# ---------------------------------------------------------------------- crash safety, with a cluster of their own
@pytest.fixture(scope="module")
def rack():
    # Full-size datagrams (16,367 floats + header + key trailer = 65,504 bytes) on purpose.
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, heartbeat_timeout_s=5.0, log_level="INFO") as lc:
        yield lc


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_controller_restart_keeps_a_running_job_running(rack, sig):
    rng = np.random.default_rng(16)
    data = random_arrays(rng, 2, (30_000,))
    restarted = threading.Event()
    first_done = threading.Barrier(3, timeout=60)

    def body(comm, rank):
        outs = [comm.allreduce(data[rank])]
        first_done.wait()
        assert restarted.wait(60), "the controller was not restarted"
        outs += [comm.allreduce(data[rank]) for _ in range(3)]
        return outs

    # A job nobody owns, left on the daemon by "a previous life": the new controller removes it.
    assert (
        rack.switch_call("leaf0", "PUT", "/jobs/4000", {"trees": [{"tree_id": 0, "children": ["127.0.0.1:7001"]}]})[0]
        == 200
    )
    box: dict = {}
    name = f"survivor-{sig.name}"
    runner = threading.Thread(target=lambda: box.update(r=run_ranks(rack.controller, name, 2, body, timeout_s=60)))
    runner.start()
    first_done.wait()
    job_id = _job(rack, name)["job_id"]
    rack.restart_controller(sig)
    info = wait_for(lambda: _job(rack, name), "the restarted controller", timeout_s=60)
    restarted.set()
    assert info["state"] == "running" and info["recovered"] and info["job_id"] == job_id, info
    runner.join(timeout=120)
    results, errors = box["r"]
    assert errors == [None, None], errors
    for outs in results:
        for out in outs:
            assert out.tobytes() == results[0][0].tobytes()
    assert_close_to_reference(results[0][0], data)
    assert _job(rack, name)["state"] == "completed"
    jobs = rack.switch_call("leaf0", "GET", "/jobs")[1]["jobs"]
    assert "4000" not in jobs and str(job_id) not in jobs


def test_a_switch_that_lost_the_job_is_named(rack):
    def body(comm, rank):
        comm.allreduce(np.ones(2000, np.float32))
        if rank == 0:
            assert rack.switch_call("leaf0", "DELETE", f"/jobs/{comm.job_id}")[0] == 200  # lost, e.g. a daemon restart
        time.sleep(3)  # the controller's monitor notices within ~1 s
        return comm.allreduce(np.ones(2000, np.float32))

    results, errors = run_ranks(rack.controller, "amnesia", 2, body, timeout_s=10)
    assert all(isinstance(e, CommunicatorError) for e in errors), errors
    for e in errors:
        assert "switch leaf0" in str(e) and "lost job" in str(e), str(e)
    assert _job(rack, "amnesia")["state"] == "failed"


# ---------------------------------------------------------------------- monitor and request limits, in-process
def test_the_monitor_survives_an_error_and_reports_it():
    import asyncio

    from panama.runtime.controller.service import ControllerService, load_cluster
    from panama.runtime.settings import ControllerOptions

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
    service = ControllerService(spec, ControllerOptions(heartbeat_timeout_s=0.4, startup_wait_s=0))
    calls = {"n": 0}
    real = service.monitor.run_pass

    async def flaky(next_probe):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("teardown blew up")
        return await real(next_probe)

    service.monitor.run_pass = flaky

    async def main():
        await service.start()
        try:
            for _ in range(400):
                if calls["n"] >= 5:
                    break
                await asyncio.sleep(0.05)
            return service.monitor.health()
        finally:
            service.monitor.cancel()
            await service.daemons.close()

    ok, facts = asyncio.run(main())
    facts = facts.to_json()
    assert calls["n"] >= 5, "the monitor stopped after its error"
    assert ok and facts["alive"] and facts["errors"] == 1 and "teardown blew up" in facts["last_error"]
    assert service.controllers_created == 1


def test_idle_and_excess_connections_are_closed():
    """Past max_connections a newcomer closes the oldest connection that never sent a
    request (so clients that did always find room); only when every connection has been
    served is it answered 503. Idle connections are closed after their timeout."""
    import asyncio

    from aiohttp import web

    from panama.runtime.control.admission import Admission, start_site

    async def main():
        async def hello(request):
            return web.json_response({"ok": True})

        app = web.Application()
        app.add_routes([web.get("/", hello)])
        runner = web.AppRunner(app)
        await runner.setup()
        server, watchdog = await start_site(
            runner,
            "127.0.0.1",
            0,
            Admission(max_connections=3, header_timeout_s=0.5, pending_timeout_s=0.5, max_pending=3, per_peer=3),
        )
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"

        def clients():
            idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
            idle[0].sendall(b"GET / HTTP/1.1\r\nHo")  # headers trickled, never finished
            time.sleep(0.3)
            extra = socket.create_connection(("127.0.0.1", port), timeout=10)
            extra.sendall(get)
            evicting = extra.recv(4096)  # served: the oldest pending connection made room
            first_closed = idle[0].recv(4096) == b""
            for s in (*idle, extra):
                s.close()
            time.sleep(1.0)  # the server has seen them close
            served = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
            for s in served:  # keep-alive connections that were served: never evicted
                s.sendall(get)
                s.recv(4096)
            extra = socket.create_connection(("127.0.0.1", port), timeout=10)
            extra.sendall(get)
            busy = extra.recv(4096)
            extra.close()
            closed = []
            for s in served:  # each is closed by the server once its idle timeout passed
                s.settimeout(15)
                closed.append(s.recv(4096) == b"")
                s.close()
            status, body = request_json(("127.0.0.1", port), "GET", "/", token="")
            return evicting, first_closed, busy, closed, status

        try:
            return await loop.run_in_executor(None, clients)
        finally:
            watchdog.cancel()
            server.close()
            await runner.cleanup()

    evicting, first_closed, busy, closed, status = asyncio.run(main())
    assert evicting.startswith(b"HTTP/1.1 200") and first_closed
    assert busy.startswith(b"HTTP/1.1 503") and b"connections" in busy
    assert closed == [True, True, True]
    assert status == 200


@pytest.mark.parametrize(
    "args,field",
    [
        (["cluster", "up", "--host", "0.0.0.0"], "host"),
        (["switch", "--id", "s", "--udp", "0.0.0.0:0"], "udp"),
        (["switch", "--id", "s"], "token-file"),
    ],
)
def test_unreachable_binds_and_missing_tokens_are_refused_by_the_cli(args, field, tmp_path):
    env = dict(os.environ, PANAMA_CLUSTER_STATE=str(tmp_path / "c.json"))
    if field == "token-file":
        env.pop("PANAMA_TOKEN")
    proc = subprocess.run(
        [sys.executable, "-m", "panama.cli.runtime_cmds", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert field in proc.stderr.strip().splitlines()[-1], proc.stderr


@pytest.mark.parametrize("spec", ["leaf-spine:leaves=2,spines=2,hosts_per_leaf=2", "fat-tree:k=4"])
def test_a_saved_plan_is_restored_exactly_by_a_fresh_controller(spec):
    """What a restarted controller reads from its state file gives back the same plan and bookkeeping."""
    from panama.core.controller import Controller, ControllerError
    from panama.core.topology import parse_topology
    from panama.runtime.controller.jobs import plan_from_dict

    topo = parse_topology(spec)
    hosts = topo.hosts[:4]
    first = Controller(topo, threshold_bytes=0)
    first.admit("other", hosts, 10**6, 2)
    plan = first.admit("j", hosts, 10**6, 2)
    saved = json.loads(json.dumps(plan.to_dict()))
    fresh = Controller(topo, threshold_bytes=0)
    fresh.restore(plan_from_dict(saved))
    assert fresh.plans["j"] == plan
    fresh.check_invariants()
    with pytest.raises(ControllerError):
        fresh.restore(plan_from_dict(saved))  # the same job twice
    nxt = fresh.admit("next", hosts, 10**6, 2)
    assert nxt.job_id > plan.job_id and {t.group for t in nxt.trees}.isdisjoint({t.group for t in plan.trees})


def test_a_thousand_idle_connections_neither_stop_the_controller_nor_a_job(cluster):
    """Issue 13's fd exhaustion: 1,100 idle connections (the daemons' limit is 1024 fds) while a job runs."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1400
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"needs {want} file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    socks = []
    try:
        for _ in range(1100):
            try:
                socks.append(socket.create_connection(cluster.controller_addr, timeout=10))
            except OSError:
                pass  # refused or reset when over the limit: what a client of a busy server sees
        rng = np.random.default_rng(17)
        data = random_arrays(rng, 2, (5_000,))
        results, errors = run_ranks(cluster.controller, "crowded", 2, lambda c, r: c.allreduce(data[r]), timeout_s=60)
        assert errors == [None, None], errors
        assert_close_to_reference(results[0], data)
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    status, health = _call(cluster.controller_addr, "GET", "/v1/health")
    assert status == 200 and health["monitor"]["errors"] == 0
    assert _job(cluster, "crowded")["state"] == "completed"
