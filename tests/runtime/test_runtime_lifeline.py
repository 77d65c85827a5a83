"""Daemons of a LocalCluster stop by themselves when the process that started them dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from panama.runtime.lifeline import exit_with, pid_alive

SCRIPT = """
import json, sys, time
from panama.runtime.cluster import LocalCluster
lc = LocalCluster(leaves=1, spines=1, log_level="WARNING").start()
print(json.dumps({name: p.pid for name, p in lc.procs.items()}), flush=True)
time.sleep(600)
"""


def test_cluster_processes_exit_when_their_owner_is_killed():
    owner = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline()
        pids = json.loads(line)
        assert set(pids) == {"leaf0", "spine0", "controller"}
        assert all(pid_alive(pid) for pid in pids.values())
    finally:
        owner.send_signal(signal.SIGKILL)  # no atexit, no finally: only the lifeline can help
        owner.wait(timeout=30)
    deadline = time.monotonic() + 30  # hang guard, not a performance limit
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in pids.values()):
        time.sleep(0.2)
    left = {name: pid for name, pid in pids.items() if pid_alive(pid)}
    for pid in left.values():
        os.kill(pid, signal.SIGKILL)
    assert left == {}, f"still running after their owner died: {left}"


def test_exit_with_rejects_bad_pid():
    with pytest.raises(ValueError, match="exit-with"):
        exit_with(0)
