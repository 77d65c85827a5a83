"""Daemons start from settings files (``python -m panama.runtime.switch.daemon CONFIG.json``), not CLI strings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from panama.runtime.control.tokens import new_token
from panama.runtime.files import write_private_file as write_secret_file
from panama.runtime.settings import ClusterConfig, ControllerProcess, SwitchConfig, SwitchProcess
from panama.settings import SettingsError


def _daemon(module: str, path, **kw):
    return subprocess.run([sys.executable, "-m", module, str(path)], capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.parametrize(
    "content,field",
    [
        ("{", "not JSON"),
        ('{"switch": {"switch_id": "s", "batch": 0}}', "switch.batch"),
        ('{"switch": {"switch_id": "s"}, "colour": 1}', "colour: unknown key"),
        ('{"log_level": "INFO"}', "switch: required"),
        ('{"switch": {"switch_id": "s", "udp": "nohost"}}', "switch.udp"),
    ],
)
def test_a_bad_switch_settings_file_is_one_line_exit_2(tmp_path, content, field):
    path = tmp_path / "switch.json"
    path.write_text(content)
    proc = _daemon("panama.runtime.switch.daemon", path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and field in proc.stderr, proc.stderr


def test_a_daemon_without_a_token_refuses_to_start(tmp_path):
    path = SwitchProcess(switch=SwitchConfig(switch_id="s")).save(tmp_path / "s.json")
    env = {k: v for k, v in os.environ.items() if k != "PANAMA_TOKEN"}
    proc = _daemon("panama.runtime.switch.daemon", path, env=env)
    assert proc.returncode == 2 and "token-file: required" in proc.stderr, proc.stderr


def test_switch_daemon_runs_from_its_settings_file(tmp_path):
    token = tmp_path / "token"
    write_secret_file(token, new_token())
    ready = tmp_path / "ready.json"
    settings = SwitchProcess(
        switch=SwitchConfig(switch_id="leaf9", packet_memory=32, payload_elems=100),
        ready_file=ready,
        token_file=token,
        exit_with=os.getpid(),
        log_level="WARNING",
    )
    path = settings.save(tmp_path / "leaf9.json")
    popen = subprocess.Popen([sys.executable, "-m", "panama.runtime.switch.daemon", str(path)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), popen.stderr.read().decode() if popen.poll() is not None else "no ready file in 30 s"
        info = json.loads(ready.read_text())
        assert info["id"] == "leaf9" and info["udp"].startswith("127.0.0.1:") and info["pid"] == popen.pid
    finally:
        popen.send_signal(signal.SIGTERM)
        popen.wait(timeout=10)
    assert popen.returncode == 0


def test_local_cluster_writes_the_files_its_processes_read():
    """The files LocalCluster starts its processes with load back as the settings it meant."""
    from panama.runtime.cluster import LocalCluster

    with LocalCluster(
        leaves=1, spines=1, hosts_per_leaf=2, packet_memory=64, drop_prob=0.01, log_level="WARNING"
    ) as lc:
        leaf = SwitchProcess.load(lc.procs["leaf0"].config_file)
        assert leaf.switch.packet_memory == 64 and leaf.switch.drop_prob == 0.01
        assert leaf.switch.udp == lc.switch_udp("leaf0") and leaf.exit_with == os.getpid()
        ctl = ControllerProcess.load(lc.procs["controller"].config_file)
        assert ctl.controller.threshold_bytes == 0 and ctl.controller.heartbeat_timeout_s == lc.heartbeat_timeout_s
        assert lc.status()["controller"]
        assert lc.leaves == 1 and lc.config == ClusterConfig(
            leaves=1, spines=1, hosts_per_leaf=2, packet_memory=64, drop_prob=0.01, log_level="WARNING"
        )


def test_local_cluster_refuses_bad_settings_before_starting_anything():
    from panama.runtime.cluster import LocalCluster

    with pytest.raises(SettingsError, match="^leaves"):
        LocalCluster(leaves=0)
    with pytest.raises(SettingsError, match="^host"):
        LocalCluster(host="0.0.0.0")
    with pytest.raises(SettingsError, match="^switch_drop_prob"):
        LocalCluster(switch_drop_prob={"spine0": 2.0})


def test_a_communicator_is_built_from_its_config():
    """``Communicator(...)``'s keyword arguments are the fields of ``CommunicatorConfig``: one
    declaration, one validation (errors name the argument), ``from_config`` takes it whole."""
    import inspect

    from panama.runtime.settings import CommunicatorConfig
    from panama.runtime.worker.communicator import Communicator

    params = inspect.signature(Communicator).parameters
    knobs = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY} - {"connect", "token", "job_token"}
    assert knobs == set(CommunicatorConfig.model_fields)
    for name in knobs:
        assert params[name].default == CommunicatorConfig.model_fields[name].default, name
    config = CommunicatorConfig(timeout_s=3.0, cc="fixed", offload=False, min_pto_s=None)
    with Communicator.from_config("127.0.0.1:9", "solo", 0, 1, config) as comm:
        assert comm.config == config and comm.timeout_s == 3.0
    with Communicator("127.0.0.1:9", "solo", 0, 1, timeout_s=3.0, cc="fixed", offload=False, min_pto_s=None) as comm:
        assert comm.config == config
    for kw, field in (({"timeout_s": 0}, "timeout_s"), ({"bind_host": "0.0.0.0"}, "bind_host"), ({"seed": -1}, "seed")):
        with pytest.raises(SettingsError) as info:
            Communicator("127.0.0.1:9", "solo", 0, 1, **kw)
        assert info.value.field == field
