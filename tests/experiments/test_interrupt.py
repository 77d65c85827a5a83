"""Ctrl-C stops ``panama experiment shared-cluster`` at once, pool workers included (issue 27)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def _session(sid: int) -> list[int]:
    """Pids of every live process in session ``sid`` (orphans re-parented to init included)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            pids.append(int(entry.name))
    return pids


def _default_sigint() -> None:
    """In the command's process before exec: SIGINT back to its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_shared_cluster_leaves_no_process_behind(tmp_path):
    """SIGINT to the process group (as a terminal sends it) while two pool workers run:
    the command exits 130 with one line within seconds, and nothing of its session
    survives (before: the workers kept running, and were orphaned after more Ctrl-C)."""
    # Two paper-scale points (tens of seconds each even compiled: --quick, 2 s compiled,
    # could finish before the signal arrived).
    cmd = [sys.executable, "-m", "panama", "experiment", "shared-cluster", "--preset", "paper", "--seeds", "1"]
    cmd += ["--schemes", "ring,panama", "--no-floor", "--jobs", "2", "--no-plot", "--quiet"]
    cmd += ["--out", str(tmp_path / "out")]
    # SIGINT handled as a terminal's command has it: a job started in the background by a
    # non-interactive shell (as a CI script may run the suite) inherits SIGINT ignored, and
    # Python keeps an ignored SIGINT ignored, so the command would run to its end.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_session(proc.pid)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert len(_session(proc.pid)) >= 3, "the two pool workers never started"
        time.sleep(1.0)  # the workers are computing
        assert proc.poll() is None, "the command finished before the signal: the test needs more work"
        os.killpg(proc.pid, signal.SIGINT)
        err = ""
        for line in proc.stderr:  # up to the command's last word
            err += line
            if line.strip() == "panama: aborted":
                break
        # When it says so, its workers are gone already (before: they ran on to finish their points).
        workers_at_abort = [p for p in _session(proc.pid) if p != proc.pid]
        err += proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == "panama: aborted" and "Traceback" not in err, err
    assert workers_at_abort == [], f"still running when the command said aborted: {workers_at_abort}"
    deadline = time.monotonic() + 5
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session(proc.pid)
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes left behind: {left}"
