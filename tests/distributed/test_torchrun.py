"""The ``panama`` torch.distributed backend under ``python -m torch.distributed.run``.

Every run is a real torchrun launch (an agent and 2 or 3 worker processes) on this host;
gloo is pinned to the loopback interface and the clusters bind 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from panama.runtime.cluster import LocalCluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_torchrun.py"
WORKER = Path(__file__).with_name("worker_ops.py")
RUN_WAIT_S = 280  # bound of one torchrun launch (imports of torch dominate on a loaded 2-core VM)
# Few steps, buckets of ~100 KB so each step reduces several buckets while backward runs.
EXAMPLE_ARGS = ["--steps", "8", "--warmup", "2", "--bucket-cap-mb", "0.1", "--json"]


def torchrun(args: list[str], nproc: int = 2, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PANAMA_")}
    full_env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONFAULTHANDLER="1")
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
    try:
        return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=RUN_WAIT_S, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")[-3000:] if isinstance(exc.stdout, bytes) else (exc.stdout or "")[-3000:]
        pytest.fail(f"torchrun {' '.join(args)} did not finish within {RUN_WAIT_S} s; output tail:\n{out}")


def report(proc: subprocess.CompletedProcess) -> dict:
    """The example's JSON line (rank 0), after checking the launch succeeded."""
    assert proc.returncode == 0, (
        f"torchrun exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON line from rank 0, got:\n{proc.stdout}"
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory) -> tuple[dict, torch.Tensor]:
    path = tmp_path_factory.mktemp("gloo") / "params.pt"
    rep = report(torchrun([str(EXAMPLE), "--backend", "gloo", "--save", str(path), *EXAMPLE_ARGS]))
    assert rep["replicas_identical"]
    return rep, torch.load(path)


@pytest.fixture(scope="module")
def cluster_up(tmp_path_factory):
    """``panama cluster up`` with a 1 MB aggregation threshold; ``panama cluster down`` after."""
    state = tmp_path_factory.mktemp("cluster") / "cluster.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANAMA_")}
    cli = [sys.executable, "-c", "import sys; from panama.cli import main; sys.exit(main())", "cluster"]
    up = subprocess.run(
        [*cli, "up", "--state", str(state), "--threshold-bytes", "1000000", "--hosts-per-leaf", "2",
         "--log-level", "warning", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert up.returncode == 0, f"panama cluster up failed: {up.stdout}{up.stderr}"
    info = json.loads(up.stdout)
    try:
        yield info
    finally:
        down = subprocess.run(
            [*cli, "down", "--state", str(state)], env=env, capture_output=True, text=True, timeout=120
        )
        assert down.returncode == 0, f"panama cluster down failed: {down.stdout}{down.stderr}"


def cluster_env(controller: str, token: str | None) -> dict[str, str]:
    env = {"PANAMA_CONTROLLER": controller}
    if token:
        env["PANAMA_TOKEN"] = token
    return env


def test_ddp_matches_gloo_bitwise_and_a_second_run_follows(gloo_run, tmp_path):
    """Local cluster started by rank 0: parameters bitwise equal to gloo's, twice in a row."""
    gloo_rep, gloo_params = gloo_run
    for i in range(2):
        path = tmp_path / f"panama{i}.pt"
        rep = report(torchrun([str(EXAMPLE), "--backend", "panama", "--save", str(path), *EXAMPLE_ARGS]))
        assert rep["replicas_identical"], rep["digests"]
        params = torch.load(path)
        diff = (params - gloo_params).abs().max().item()
        assert torch.equal(params, gloo_params), f"run {i}: max abs difference to gloo {diff}"
        assert rep["digests"] == gloo_rep["digests"]
        st = rep["panama"]
        assert st["mode"] == "panama" and st["fallback_calls"] == 0, st
        # every gradient element of every step went through the switches, in several buckets
        # per step after the first (DDP rebuilds its buckets after step 1)
        assert st["panama_elems"] == 8 * rep["parameters"], st
        assert st["panama_calls"] > 8, st


def test_joins_a_running_cluster_and_falls_back_when_refused(gloo_run, cluster_up):
    """PANAMA_CONTROLLER + PANAMA_TOKEN: admitted with a size hint above the threshold; refused
    without it (the 0.3 MB gradient is below 1 MB): gloo, one warning line, counted."""
    gloo_digests = gloo_run[0]["digests"]
    env = cluster_env(cluster_up["controller"], cluster_up.get("token"))
    rep = report(torchrun([str(EXAMPLE), *EXAMPLE_ARGS], env={**env, "PANAMA_SIZE_BYTES": "2000000"}))
    assert rep["panama"]["mode"] == "panama" and rep["panama"]["fallback_calls"] == 0, rep["panama"]
    assert rep["digests"] == gloo_digests

    proc = torchrun([str(EXAMPLE), *EXAMPLE_ARGS], env=env)
    rep = report(proc)
    st = rep["panama"]
    assert st["mode"] == "gloo", st
    assert st["panama_calls"] == 0 and st["fallback_calls"] > 8, st
    assert "not admitted" in st["fallback_reason"] and "threshold" in st["fallback_reason"], st
    lines = (proc.stdout + proc.stderr).splitlines()
    warnings = [line for line in lines if "not admitted" in line and not line.startswith("{")]  # not the report
    assert len(warnings) == 1, warnings
    assert "goes through gloo" in warnings[0] and st["job"] in warnings[0]
    assert rep["digests"] == gloo_digests and rep["replicas_identical"]


def test_operations_subgroups_and_avg(tmp_path):
    """3 ranks: SUM/AVG through PANAMA, delegated operations, issue order, subgroups as jobs."""
    proc = torchrun([str(WORKER), "ops", str(tmp_path)], nproc=3)
    assert proc.returncode == 0, proc.stderr[-5000:]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for r, rr in enumerate(res):
        assert "crash" not in rr, rr.get("traceback")
        checks = [k for k in rr if k.endswith("_ok") or k.startswith("big_")]
        assert len(checks) == 14 and all(rr[k] is True for k in checks), (r, {k: rr[k] for k in checks})
        assert "AVG needs floating-point" in rr["int_avg_error"]
        st = rr["stats"]
        assert st["mode"] == "panama" and st["panama_calls"] == 4, st  # SUM, AVG, ordered SUM, big
        assert st["gloo_calls"]["allreduce"] == 3, st  # float64 AVG, int64 SUM, MAX
    assert len({rr["default_job"] for rr in res}) == 1
    for name, members in (("g02", [0, 2]), ("g12", [1, 2])):
        infos = [res[m][name] for m in members]
        for info in infos:
            assert info["sum_ok"] and info["avg_ok"] and info["mode"] == "panama" and info["panama_calls"] == 2, info
            assert info["backend"] == "panama"
        assert len({i["job"] for i in infos}) == 1
        assert infos[0]["job"] != res[0]["default_job"]
        assert name not in res[({0, 1, 2} - set(members)).pop()]
    assert res[0]["g02"]["job"] != res[1]["g12"]["job"]


def test_fabric_failure_is_a_typed_error_on_every_rank(tmp_path):
    """The first-hop daemon of both ranks killed mid-run: PanamaFabricError from backward() on
    each rank, naming the job, and the same type from the next collective."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, heartbeat_timeout_s=2.0, log_level="WARNING") as lc:
        env = cluster_env(lc.controller, getattr(lc, "token", None))
        env.update(PANAMA_TIMEOUT_S="5", PANAMA_TEST_KILL_PID=str(lc.procs["leaf0"].pid))
        proc = torchrun([str(WORKER), "fail", str(tmp_path)], env=env)
        assert proc.returncode == 0, proc.stderr[-5000:]
        lc.procs["leaf0"].popen.wait(timeout=10)
    for r in range(2):
        rr = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert "crash" not in rr, rr.get("traceback")
        assert rr["steps_done"] == 2, rr
        err = rr["backward_error"]
        assert err["type"] == "PanamaFabricError", err
        assert "CommunicatorError" in err["mro"] and "RuntimeError" in err["mro"]
        assert f"rank {r}" in err["message"] and rr["stats"]["job"] in err["message"], err["message"]
        assert "all_reduce of" in err["message"] and "Unable to cast" not in err["message"]
        assert rr["later_error"]["type"] == "PanamaFabricError"
        assert rr["later_error"]["message"] == err["message"]
        assert rr["stats"]["mode"] == "broken"


def test_survivor_of_a_dead_cluster_owner_fails_fast(tmp_path):
    """Rank 0 started the run's automatic cluster and dies: rank 1's all_reduce fails with
    PanamaFabricError within 10 s saying the cluster is gone (before: the full 60 s, with a
    heartbeat warning every second)."""
    proc = torchrun([str(WORKER), "orphan", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-5000:]
    rr = json.loads((tmp_path / "rank1.json").read_text())
    assert rr["error"]["type"] == "PanamaFabricError", rr
    assert "the cluster is gone" in rr["error"]["message"], rr
    assert rr["seconds"] < 10.0, rr
    assert proc.stderr.count("controller unreachable") <= 2, proc.stderr[-3000:]  # logged once, not every second


def test_ctrl_c_in_a_blocked_all_reduce_ends_the_rank_and_its_leave_says_interrupted(tmp_path):
    """Issue 35 item 7: rank 0 blocked in an all_reduce that rank 1 never joins gets SIGINT:
    its destroy_process_group returns within 5 s of the signal (before: the group timeout,
    34.9 s), the controller fails the job saying "interrupted" (before: a clean leave), and
    rank 1's next all_reduce fails naming it, long before its 60 s timeout."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="WARNING") as lc:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PANAMA_")}
        env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONFAULTHANDLER="1", PANAMA_TIMEOUT_S="60")
        env.update(cluster_env(lc.controller, getattr(lc, "token", None)))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        run = subprocess.Popen([*cmd, str(WORKER), "interrupt", str(tmp_path)], env=env, cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            blocked = tmp_path / "blocked"
            for _ in range(RUN_WAIT_S * 10):
                if blocked.exists() or run.poll() is not None:
                    break
                time.sleep(0.1)
            assert blocked.exists(), run.communicate(timeout=60)[0][-5000:]
            time.sleep(1.0)  # well inside the all_reduce
            os.kill(int(blocked.read_text()), signal.SIGINT)
            out, _ = run.communicate(timeout=RUN_WAIT_S)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 0, out[-5000:]
        status, jobs = lc.controller_call("GET", "/v1/jobs")
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0["interrupted"] and r0["seconds"] < 5.0, r0
    ended = {j["job"]: j for j in jobs["history"]}
    job = ended[r0["job"]]
    assert job["state"] == "failed" and "rank 0 left after an error: interrupted (KeyboardInterrupt)" in job["reason"]
    assert r1["error"]["type"] == "PanamaFabricError" and "interrupted" in r1["error"]["message"], r1
    assert r1["seconds"] < 10.0, r1


def test_init_process_group_checks_controller_and_token(tmp_path):
    """A wrong token is reported by init_process_group on every rank, not at the first
    backward() (a dead controller takes the same path: HttpError from the same check)."""
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="WARNING") as lc:
        env = cluster_env(lc.controller, "wrong-token-" + "x" * 30)
        proc = torchrun([str(WORKER), "init", str(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    for r in range(2):
        err = json.loads((tmp_path / f"rank{r}.json").read_text())["error"]
        assert err is not None and "PanamaDistributedError" in err["mro"], err
        assert "refused the token" in err["message"], err


def staged_run(tmp_path: Path, kind: str) -> list[dict]:
    proc = torchrun([str(WORKER), "staged", str(tmp_path), kind])
    assert proc.returncode == 0, proc.stderr[-5000:]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, rr in enumerate(res):
        assert "crash" not in rr, rr.get("traceback")
        checks = {k: rr[k] for k in rr if k.endswith("_ok")}
        assert len(checks) == (5 if kind == "cuda" else 4) and all(checks.values()), (r, checks)
        assert rr["ddp_bitwise"], (r, rr["ddp_max_diff"])
        st = rr["stats"]
        assert st["mode"] == "panama" and st["fallback_calls"] == 0, st
        # every float32 sum staged; several DDP buckets per step once DDP has rebuilt them (after step 1)
        assert st["staged_calls"] == st["panama_calls"] > 3 + 6, st
        # buffers are reused: one per all_reduce in flight at once (which varies with timing), not one per call
        # (at most 3 buffers, a step's buckets; each replaced only by a larger one, of 6 sizes: <= 18 for 19 calls)
        assert 0 < st["pinned_allocations"] < st["staged_calls"], st
        assert st["gloo_calls"].get("allreduce") == 1, st  # the int64 sum
    return res


def test_staged_path_matches_gloo_bitwise_without_a_gpu(tmp_path):
    """CPU tensors play CUDA tensors (fake_device.py) through the real switches: DDP's
    parameters bitwise equal to DDP on gloo, non-contiguous and multi-tensor all_reduce."""
    staged_run(tmp_path, "fake")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI machines have none)")
def test_cuda_tensors_match_gloo_bitwise(tmp_path):
    """The same on a GPU (both ranks may share one): CUDA tensors staged through pinned memory."""
    res = staged_run(tmp_path, "cuda")
    st = res[0]["stats"]
    print(  # for docs/training.md: the card, torch, and the host's wait for copies against the transfer
        f"CUDA staged path: {res[0]['card']}, torch {res[0]['torch']}: ok; {st['staged_calls']} staged all_reduces, "
        f"{st['panama_elems']} float32: waited {1e3 * st['staging_seconds']:.2f} ms for copies into host memory, "
        f"{1e3 * st['panama_seconds']:.2f} ms summing through the switches"
    )
