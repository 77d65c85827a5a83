"""State and secret files that another local user cannot steal, redirect or truncate
(issue 27): the cluster state directory is checked before use, files are written to a
fresh O_EXCL|O_NOFOLLOW name, in full, fsynced and renamed, and a failed write is
reported instead of leaving a cut file."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from panama.runtime import files
from panama.runtime.control.messages import MonitorFacts
from panama.runtime.files import UnsafePathError, private_dir, read_private_file, write_private_file

OTHER_UID = 65534  # nobody


def _cli(args, env_extra, timeout=120):
    env = dict(os.environ, **env_extra)
    env.pop("PANAMA_CLUSTER_STATE", None)
    cmd = [sys.executable, "-m", "panama.cli.runtime_cmds", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _one_line_error(proc, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


# ---------------------------------------------------------------------- the state directory
@pytest.mark.parametrize("attack", ["mode", "owner", "symlink"])
def test_a_squatted_or_symlinked_state_directory_is_refused(tmp_path, attack):
    """Another user pre-creates /tmp/panama-cluster-UID (open mode, their own, or a symlink to
    their directory): 'cluster up' and 'cluster status' refuse it with one line, and never
    read or write the token there (before: the directory was reused as it was)."""
    state_dir = tmp_path / f"panama-cluster-{os.getuid()}"
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o777)
    if attack == "mode":
        state_dir.mkdir()
        state_dir.chmod(0o777)
    elif attack == "owner":
        if os.getuid() != 0:
            pytest.skip("chown to another user needs root")
        state_dir.mkdir(mode=0o700)
        os.chown(state_dir, OTHER_UID, OTHER_UID)
    else:
        state_dir.symlink_to(theirs)
    planted = {"controller": "127.0.0.1:9", "token": "x" * 43, "switches": [], "pids": {}}
    target = theirs / "cluster.json" if attack == "symlink" else state_dir / "cluster.json"
    target.write_text(json.dumps(planted))
    env = {"TMPDIR": str(tmp_path)}
    up = _cli(["cluster", "up", "--leaves", "1", "--spines", "1", "--hosts-per-leaf", "2"], env)
    why = {"mode": "mode 777", "owner": f"belongs to uid {OTHER_UID}", "symlink": "symbolic link"}[attack]
    _one_line_error(up, "state", str(state_dir), why)
    status = _cli(["cluster", "status", "--json"], env)
    _one_line_error(status, "state", why)
    assert json.loads(target.read_text()) == planted  # untouched
    assert not (theirs / "run").exists() and not (state_dir / "run").exists()


def test_private_dir_creates_0700_and_refuses_what_others_can_use(tmp_path):
    made = private_dir(tmp_path / "a" / "b")
    assert made.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(UnsafePathError, match="mode 755"):
        private_dir(loose)
    private_dir(loose, strict=False)  # a directory the user chose: only writable-by-others is refused
    loose.chmod(0o775)
    with pytest.raises(UnsafePathError, match="mode 775"):
        private_dir(loose, strict=False)
    (tmp_path / "link").symlink_to(made)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        private_dir(tmp_path / "link")


# ---------------------------------------------------------------------- writing files
def test_writes_replace_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "token").symlink_to(victim)
    write_private_file(tmp_path / "token", "secret")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "token").is_symlink() and (tmp_path / "token").read_text() == "secret"
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        read_private_file(tmp_path / "link")


def test_short_writes_are_completed(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(files.os, "write", lambda fd, data: real(fd, bytes(data)[:1000]))
    text = "x" * 5400
    write_private_file(tmp_path / "state.json", text)
    assert (tmp_path / "state.json").read_text() == text


def _disk_full_after(monkeypatch, limit: int) -> None:
    """os.write as on a disk with ``limit`` bytes left: a short count, then ENOSPC."""
    real = os.write
    left = [limit]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data)[: left[0]])
        left[0] -= n
        return n

    monkeypatch.setattr(files.os, "write", write)


def test_a_full_disk_never_leaves_a_truncated_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_private_file(path, "old" * 100)
    _disk_full_after(monkeypatch, 4096)
    with pytest.raises(OSError) as info:
        write_private_file(path, "n" * 5400)
    assert info.value.errno == errno.ENOSPC
    assert path.read_text() == "old" * 100  # the previous file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary left behind


# ---------------------------------------------------------------------- the controller's state file
def _service(state_file: Path):
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
    service = ControllerService(spec, ControllerOptions(startup_wait_s=0, state_file=state_file))
    facts = MonitorFacts(alive=True, last_pass_age_s=0.0, errors=0, restarts=0, last_error=None)
    service.monitor.health = lambda: (True, facts)
    return service


def _health(service) -> dict:
    return service.health()[1].to_json()


@pytest.mark.parametrize("fault", ["full", "unwritable"])
def test_a_failed_state_write_is_reported_and_never_truncates(tmp_path, monkeypatch, fault, caplog):
    """A full disk (short write, then ENOSPC) or an unwritable state path: the previous
    state file stays whole, the error is logged, and /v1/health says "degraded" (before:
    the file was cut to 4,096 bytes silently and health said ok)."""
    state = tmp_path / "state.json" if fault == "full" else tmp_path / "file" / "state.json"
    if fault == "unwritable":
        (tmp_path / "file").write_text("a regular file where the directory should be")
    service = _service(state)
    if fault == "full":
        service._save_state()
        before = state.read_text()
        assert _health(service)["status"] == "ok"
        _disk_full_after(monkeypatch, 10)
    service._save_state()
    health = _health(service)
    assert health["status"] == "degraded" and "cannot write state file" in health["state_file"]["error"]
    assert "cannot write state file" in caplog.text
    if fault == "full":
        assert state.read_text() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
        monkeypatch.undo()
        service._save_state()  # the disk has room again
        assert _health(service)["status"] == "ok"


# ---------------------------------------------------------------------- issue 35 item 5: state that recovers
# A full disk is simulated by monkeypatching os.write in panama.runtime.files (_disk_full_after):
# the same code path as ENOSPC from a real file system, without mounting one.


def _saved_job(name: str, job_id: int = 1) -> dict:
    """A state file entry as Job.to_state writes it, with a real plan on the 1-leaf topology of _service."""
    from panama.core.controller import Controller
    from panama.core.topology import leaf_spine

    plan = Controller(leaf_spine(1, 1, 2), threshold_bytes=0).admit(name, ["h0", "h1"], 10**6, 1)
    assert plan.admitted and plan.switches
    d = plan.to_dict()
    d["job_id"] = job_id
    return {
        "name": name,
        "job_id": job_id,
        "world_size": 2,
        "key": "0123456789abcdef",
        "payload_elems": 359,
        "size_bytes": 10**6,
        "trees": 1,
        "plan": d,
        "groups": {},
        "ranks": [
            {"rank": r, "udp": f"127.0.0.1:{4000 + r}", "host": f"h{r}", "incarnation": "i", "left": False}
            for r in (0, 1)
        ],
    }


def test_a_failed_state_write_is_retried_until_the_disk_takes_it(tmp_path, monkeypatch):
    """Disk full: the write fails and stays pending; a second change while full is the one
    owed; the monitor's retries (not a job change) write it once there is room again and
    health goes back to ok (before: "degraded" until the next job change, and a restart
    forgot the job admitted meanwhile)."""
    from panama.runtime.controller.state_file import StateFile

    now = [0.0]
    state = StateFile(tmp_path / "state.json", lambda: now[0], retry_interval_s=1.0)
    assert state.save([_saved_job("a")])
    before = (tmp_path / "state.json").read_text()
    _disk_full_after(monkeypatch, 10)
    assert not state.save([_saved_job("a"), _saved_job("b", 2)])
    assert "No space left" in state.error
    monkeypatch.undo()  # room again
    assert not state.retry()  # not before retry_interval_s
    assert (tmp_path / "state.json").read_text() == before
    now[0] = 1.0
    assert state.retry() and state.error is None
    names = [e.name for e in StateFile(tmp_path / "state.json", lambda: 0.0).load()]
    assert names == ["a", "b"]  # the job admitted while the disk was full is on disk
    assert state.retry()  # nothing pending: no write
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_the_controller_monitor_turns_health_back_to_ok_without_a_job_change(tmp_path, monkeypatch):
    service = _service(tmp_path / "state.json")
    _disk_full_after(monkeypatch, 10)
    service._save_state()
    assert _health(service)["status"] == "degraded"
    monkeypatch.undo()
    service.state.clock = lambda: 1e9  # the retry interval has passed
    asyncio.run(service.monitor.run_pass(float("inf")))  # one pass of the monitor, no job anywhere
    health = _health(service)
    assert health["status"] == "ok" and health["state_file"]["error"] is None
    assert json.loads((tmp_path / "state.json").read_text()) == {"version": 1, "jobs": []}


def _fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


@pytest.mark.parametrize(
    "content, words",
    [
        ("fifo", ["a FIFO, not a regular file"]),
        ("directory", ["a directory, not a regular file"]),
        ("not json {", ["is not JSON"]),
        ("[1, 2]", ["not a state file", "got list"]),
        ('{"version": 1, "jobs": 3}', ["not a state file", "jobs: int"]),
        ('{"version": 7, "jobs": []}', ["version 7"]),
    ],
)
def test_an_unusable_controller_state_file_is_one_line_and_the_controller_does_not_start(tmp_path, content, words):
    """A FIFO (before: the controller hung reading it, deaf to SIGTERM), a directory, or a
    wrong shape (before: a traceback, or 'recovering nothing' and then every job on the
    daemons removed and the record overwritten): the controller process exits 2 with one
    line naming the file, before waiting for any daemon."""
    from panama.runtime.controller.state_file import StateFile, StateFileError
    from panama.runtime.settings import ControllerConfig, ControllerProcess

    state = tmp_path / "state.json"
    if content == "fifo":
        _fifo(state)
    elif content == "directory":
        state.mkdir()
    else:
        state.write_text(content)
    with pytest.raises(StateFileError) as info:
        StateFile(state, lambda: 0.0).load()
    assert str(state) in info.value.detail and all(w in info.value.detail for w in words)
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(
        "leaves = 1\nspines = 1\nhosts_per_leaf = 2\n"
        '[switches.leaf0]\nudp = "127.0.0.1:9"\ncontrol = "127.0.0.1:9"\n'
        '[switches.spine0]\nudp = "127.0.0.1:9"\ncontrol = "127.0.0.1:9"\n'
    )
    token = tmp_path / "token"
    token.write_text("t" * 43)
    token.chmod(0o600)
    settings = ControllerProcess(
        controller=ControllerConfig(cluster_file=cluster, listen=("127.0.0.1", 0), state_file=state, startup_wait_s=60),
        token_file=token,
    ).save(tmp_path / "controller.json")
    cmd = [sys.executable, "-m", "panama.runtime.controller.service", str(settings)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # guard: a hang fails, never blocks CI
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if "state_file" in ln]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(state) in lines[0] and all(w in lines[0] for w in words), lines[0]


def test_malformed_entries_are_skipped_one_line_each_and_the_controller_starts(tmp_path, caplog):
    """An entry missing a key (before: KeyError, the controller did not start), one of a wrong
    type, one whose plan does not rebuild, and a non-object: each is one log line naming the
    file, the entry and the field; the good entry is read and the controller starts."""
    from panama.runtime.controller.state_file import StateFile

    good = _saved_job("good")
    no_key = _saved_job("nokey", 2)
    del no_key["world_size"]
    wrong = _saved_job("wrong", 3)
    wrong["ranks"][0]["udp"] = 4000  # a number, not "HOST:PORT"
    bad_plan = _saved_job("badplan", 4)
    del bad_plan["plan"]["trees"]
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "jobs": [good, no_key, wrong, bad_plan, "junk"]}))
    caplog.set_level("WARNING", logger="panama.controller")
    assert [e.name for e in StateFile(path, lambda: 0.0).load()] == ["good"]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 4 and all(str(path) in m for m in skipped), skipped
    assert "entry 1 ('nokey') skipped: world_size: required" in skipped[0].replace("job ", "")
    assert "ranks.0.udp" in skipped[1] and "plan" in skipped[2] and "entry 4" in skipped[3]
    caplog.clear()
    service = _service(path)
    asyncio.run(service.start())  # no daemon answers (port 9): nothing recovered, but it starts
    service.monitor.cancel()
    asyncio.run(service.daemons.close())
    assert service.controller is not None and service.jobs == {}
    assert "job 'good' (job_id 1) not recovered" in caplog.text.replace("job good", "job 'good'")


@pytest.mark.parametrize("command", ["status", "down", "up"])
@pytest.mark.parametrize("content", ["fifo", "[]", '{"switches": 3, "controller": null}', '{"controller": "x"}'])
def test_an_unusable_cluster_state_file_is_one_line_and_never_hangs(tmp_path, command, content):
    """`cluster status/down/up --state F` with a FIFO at F (before: all three hung, SIGTERM
    could not stop them) or a file of the wrong shape (before: a traceback): one line, exit 2,
    nothing started."""
    state = tmp_path / "cluster.json"
    if content == "fifo":
        _fifo(state)
    else:
        state.write_text(content)
    args = ["cluster", command, "--state", str(state)]
    if command == "up":
        args += ["--leaves", "1", "--spines", "1", "--hosts-per-leaf", "2"]
    proc = _cli(args, {}, timeout=120)  # guard: a hang fails the test instead of blocking CI
    why = "a FIFO, not a regular file" if content == "fifo" else "not a cluster state"
    _one_line_error(proc, "state", str(state), why)
    assert not (tmp_path / "run").exists()


def test_cluster_up_stops_its_daemons_when_it_cannot_record_them(tmp_path, monkeypatch):
    """A full disk when `cluster up` writes its state file: every process it started is
    stopped and the error says so (before: three daemons ran on, recorded nowhere)."""
    from panama.runtime import cluster as cluster_mod
    from panama.runtime.cluster import ClusterError, LocalCluster, record_cluster

    lc = LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, workdir=tmp_path / "run", detached=True)
    lc.start()
    procs = list(lc.procs.values())
    assert len(procs) == 3 and all(p.alive() for p in procs)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cluster_mod, "write_private_file", full)
    try:
        with pytest.raises(ClusterError, match="cannot record the cluster .*No space left.*stopped"):
            record_cluster(lc, tmp_path / "cluster.json")
    finally:
        lc.stop()
    assert not any(p.alive() for p in procs) and not (tmp_path / "cluster.json").exists()
