"""State and secret files that another local user cannot steal, redirect or truncate
(issue 27): the cluster state directory is checked before use, files are written to a
fresh O_EXCL|O_NOFOLLOW name, in full, fsynced and renamed, and a failed write is
reported instead of leaving a cut file."""

from __future__ import annotations

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
