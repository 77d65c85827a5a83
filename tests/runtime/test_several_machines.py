"""docs/several-machines.md as a test: controller, switch daemons and torchrun nodes on 5 "machines".

Each machine is a network namespace on one bridge (``netns_lan.lan``, 10.78.0.0/24):

| machine | address | runs |
|---|---|---|
| ``ctl`` | 10.78.0.2 | ``panama controller serve --cluster-file cluster.toml --listen 10.78.0.2:7070`` |
| ``swa`` | 10.78.0.3 | ``panama switch`` leaf0 (UDP 40001, control 40101), spine0 (40002, 40102) |
| ``swb`` | 10.78.0.4 | ``panama switch`` leaf1 (UDP 40001, control 40101) |
| ``node0`` | 10.78.0.11 | ``torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 10.78.0.11`` |
| ``node1`` | 10.78.0.12 | ``torchrun --nnodes 2 --nproc-per-node 1 --node-rank 1 --master-addr 10.78.0.11`` |

The commands are the recipe's (``python -m panama.cli.runtime_cmds`` is ``panama``), the
token one file (mode 0600) the daemons read and ``PANAMA_TOKEN`` for the nodes. The script
on the nodes (``several_machines_worker.py``) runs all_reduces and DDP steps on the
``panama`` backend and on a gloo group side by side: known sums, bitwise equal to gloo.
Afterwards the daemons' counters (asked from the controller's machine) show every daemon
carried the job's datagrams, and the controller shows the job completed. Every wait is
bounded and names the component that failed; processes and namespaces are removed in
``finally``. Needs root and ``ip netns`` (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns_lan import IFNAME, Machine, lan, needs_root_and_ip

pytestmark = needs_root_and_ip

SUBNET = "10.78.0"
HOSTS = {"ctl": 2, "swa": 3, "swb": 4, "node0": 11, "node1": 12}
# switch -> (machine, UDP port, control port)
SWITCHES = {"leaf0": ("swa", 40001, 40101), "spine0": ("swa", 40002, 40102), "leaf1": ("swb", 40001, 40101)}
CONTROLLER_PORT = 7070
PAYLOAD_ELEMS = 359  # 1,472-byte datagrams: one 1,500-byte Ethernet frame each (the recipe's choice)
MASTER_PORT = 29500
NODES = 2
WORKER = Path(__file__).with_name("several_machines_worker.py")
READY_WAIT_S = 30.0  # a daemon or the controller to listen
RUN_WAIT_S = 150.0  # both torchrun launches (torch imports dominate on a loaded 2-core VM)

PANAMA = [sys.executable, "-m", "panama.cli.runtime_cmds"]  # = the ``panama`` console script

# The recipe's check before training, from a node: the controller answers, every daemon is up.
PROBE = r"""
import json, sys
from panama.runtime.control.client import request_json
from panama.runtime.net.udp import parse_addr
ctl = parse_addr(sys.argv[1])
health = request_json(ctl, "GET", "/v1/health", timeout_s=5.0, what="controller", token="")
switches = request_json(ctl, "GET", "/v1/switches?probe=1", timeout_s=10.0, what="controller")
print(json.dumps({"health": health, "switches": switches}))
"""

# What the controller's machine asks at the end: every daemon's counters, the controller's jobs.
INSPECT = r"""
import json, sys
from panama.runtime.control.client import request_json
from panama.runtime.net.udp import parse_addr
ctl, switches = sys.argv[1], json.loads(sys.argv[2])
out = {"switches": {}}
for name, control in switches.items():
    status, body = request_json(parse_addr(control), "GET", "/stats", timeout_s=5.0, what=name)
    out["switches"][name] = {"status": status, "rx_packets": body.get("rx_packets"),
                             "tx_packets": body.get("tx_packets"), "send_errors": body.get("send_errors"),
                             "drops": body.get("drops"), "malformed": body.get("malformed")}
status, body = request_json(parse_addr(ctl), "GET", "/v1/jobs", timeout_s=5.0, what="controller")
out["jobs"] = body
print(json.dumps(out))
"""


def cluster_toml(m: dict[str, Machine]) -> str:
    lines = ["leaves = 2", "spines = 1", "hosts_per_leaf = 1", ""]
    for name, (host, udp, control) in SWITCHES.items():
        lines += [f"[switches.{name}]", f'udp = "{m[host].ip}:{udp}"', f'control = "{m[host].ip}:{control}"', ""]
    return "\n".join(lines)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PANAMA_", "GLOO_", "MASTER_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    return env


def tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def rank_errors(out: Path) -> str:
    """What the ranks' reports say went wrong (the worker catches its exception)."""
    errors = []
    for path in sorted(out.glob("rank*.json")):
        try:
            rep = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if "crash" in rep:
            errors.append(f"rank {rep['rank']}: {rep['crash']}")
    return "; ".join(errors) or "no rank reported an error"


class Processes:
    """The test's processes, each in its own session (so a torchrun agent and its workers
    stop together), with its log; ``stop`` ends each by its process group."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        return tail(self.logs / f"{name}.log")

    def wait_ready(self, name: str, ready: Path, timeout_s: float = READY_WAIT_S) -> dict:
        deadline = time.monotonic() + timeout_s
        p = self.procs[name]
        while time.monotonic() < deadline:
            if ready.exists():
                try:
                    return json.loads(ready.read_text())
                except json.JSONDecodeError:
                    pass  # being written
            if p.poll() is not None:
                pytest.fail(f"{name} exited with {p.returncode} before listening; its log:\n{self.log(name)}")
            time.sleep(0.05)
        pytest.fail(f"{name} did not listen within {timeout_s:g} s (no {ready}); its log:\n{self.log(name)}")

    def stop(self) -> None:
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)


def test_controller_switches_and_torchrun_nodes_on_separate_machines(tmp_path):
    pytest.importorskip("torch")  # the nodes run torchrun (CI's other Pythons run without torch)
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "token"  # copied to every switch and controller machine, mode 0600
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = time.monotonic()
    with lan(HOSTS, SUBNET) as m:
        procs = Processes(logs)
        try:
            cluster_file = tmp_path / "cluster.toml"
            cluster_file.write_text(cluster_toml(m))
            daemon_env = base_env()
            common = ["--token-file", str(token_file), "--exit-with", str(os.getpid()), "--log-level", "WARNING"]
            # 1. the switch daemons, each on its machine, on the addresses the cluster file names
            for name, (host, udp, control) in SWITCHES.items():
                ip = m[host].ip
                cmd = [*PANAMA, "switch", "--switch-id", name, "--udp", f"{ip}:{udp}", "--control", f"{ip}:{control}",
                       "--payload-elems", str(PAYLOAD_ELEMS)]  # fmt: skip
                procs.start(name, m[host].cmd(*cmd, *common, "--ready-file", str(tmp_path / f"{name}.ready")),
                            daemon_env)  # fmt: skip
            # 2. the controller with the cluster file
            controller = f"{m['ctl'].ip}:{CONTROLLER_PORT}"
            cmd = [*PANAMA, "controller", "serve", "--cluster-file", str(cluster_file), "--listen", controller,
                   "--threshold-bytes", "0", "--heartbeat-timeout-s", "5"]  # fmt: skip
            procs.start("controller", m["ctl"].cmd(*cmd, *common, "--ready-file", str(tmp_path / "controller.ready")),
                        daemon_env)  # fmt: skip
            for name, (host, udp, control) in SWITCHES.items():
                info = procs.wait_ready(name, tmp_path / f"{name}.ready")
                assert info["udp"] == f"{m[host].ip}:{udp}", f"switch {name} bound {info}"
            info = procs.wait_ready("controller", tmp_path / "controller.ready")
            assert info["listen"] == controller, f"controller bound {info}"
            ready_s = time.monotonic() - t0
            probe = subprocess.run(
                m["node0"].cmd(sys.executable, "-c", PROBE, controller),
                env={**daemon_env, "PANAMA_TOKEN": token}, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert probe.returncode == 0, f"node0 cannot ask the controller:\n{probe.stderr[-3000:]}"
            seen_before = json.loads(probe.stdout)
            assert seen_before["health"][0] == 200, seen_before["health"]
            status, body = seen_before["switches"]
            assert status == 200 and {s["id"]: s["up"] for s in body["switches"]} == dict.fromkeys(SWITCHES, True), (
                f"the controller does not see every daemon up: {body}"
            )

            # 3. torchrun on each node: the panama backend finds the controller in the environment
            node_env = {
                **base_env(),
                "PANAMA_CONTROLLER": controller,
                "PANAMA_TOKEN": token,
                "PANAMA_TIMEOUT_S": "20",
                "GLOO_SOCKET_IFNAME": IFNAME,  # gloo (and torch's store) on the LAN interface
            }
            for i in range(NODES):
                node = m[f"node{i}"]
                cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", "1",
                       "--node-rank", str(i), "--master-addr", m["node0"].ip, "--master-port", str(MASTER_PORT),
                       str(WORKER), str(out)]  # fmt: skip
                procs.start(f"node{i}", node.cmd(*cmd), node_env)
            deadline = time.monotonic() + RUN_WAIT_S
            pending = [f"node{i}" for i in range(NODES)]
            while pending and time.monotonic() < deadline:
                for name in list(pending):
                    code = procs.procs[name].poll()
                    if code is None:
                        continue
                    pending.remove(name)
                    assert code == 0, (
                        f"torchrun on {name} exited with {code}; {rank_errors(out)}; its output:\n{procs.log(name)}"
                    )
                for name in SWITCHES.keys() | {"controller"}:
                    code = procs.procs[name].poll()
                    assert code is None, f"{name} exited with {code} during the run; its log:\n{procs.log(name)}"
                time.sleep(0.1)
            assert not pending, (
                f"torchrun on {', '.join(pending)} did not finish within {RUN_WAIT_S:g} s; output:\n"
                + "\n".join(f"--- {n}\n{procs.log(n)}" for n in pending)
            )
            run_s = time.monotonic() - t0 - ready_s

            # 4. what the daemons and the controller saw, asked from the controller's machine
            switches = {name: f"{m[host].ip}:{control}" for name, (host, _, control) in SWITCHES.items()}
            inspect = subprocess.run(
                m["ctl"].cmd(sys.executable, "-c", INSPECT, controller, json.dumps(switches)),
                env={**daemon_env, "PANAMA_TOKEN": token}, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert inspect.returncode == 0, f"asking the daemons and the controller failed:\n{inspect.stderr[-3000:]}"
            seen = json.loads(inspect.stdout)
        finally:
            procs.stop()

    reports = []
    for r in range(NODES):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no report; node{r}'s output:\n{tail(logs / f'node{r}.log')}"
        rep = json.loads(path.read_text())
        assert "crash" not in rep, f"rank {r}: {rep['crash']}\n{rep.get('traceback')}"
        reports.append(rep)
    for r, rep in enumerate(reports):
        node = f"{SUBNET}.{HOSTS[f'node{r}']}"
        assert rep["known_sum"], f"rank {r}: integer-valued sum wrong"
        assert rep["random_sum_bitwise_gloo"], f"rank {r}: PANAMA sum differs from gloo's"
        assert rep["ddp_steps_bitwise_gloo"] == [True] * 3, f"rank {r}: DDP parameters differ from gloo's"
        assert rep["replicas_identical"], f"rank {r}: replicas differ"
        # the rank's socket is on its node's LAN address (not 127.0.0.1) and its first hop
        # is leaf<r> on its switch machine (rank r -> r-th host in spread order -> leaf r)
        assert rep["bound"] == node, f"rank {r} bound {rep['bound']}, expected {node}"
        leaf_host, leaf_udp, _ = SWITCHES[f"leaf{r}"]
        assert rep["first_hop"] == {"switch": f"leaf{r}", "udp": f"{m[leaf_host].ip}:{leaf_udp}"}, rep["first_hop"]
        assert rep["payload_elems"] == PAYLOAD_ELEMS, f"rank {r}: job's datagrams hold {rep['payload_elems']} floats"
        st = rep["stats"]
        assert st["mode"] == "panama" and st["fallback_calls"] == 0 and st["error"] is None, st
        assert st["panama_calls"] >= 2 + 3, st  # 2 all_reduces + 1 bucket per DDP step
    for name, sw in seen["switches"].items():
        assert sw["status"] == 200 and sw["rx_packets"] > 0 and sw["tx_packets"] > 0, (name, sw)
        assert not sw["send_errors"] and not sw["malformed"], (name, sw)
    jobs = seen["jobs"]["jobs"] + seen["jobs"]["history"]
    job = reports[0]["stats"]["job"]
    states = {j.get("name", j.get("job")): j.get("state") for j in jobs}
    assert states.get(job) == "completed", f"controller's jobs: {jobs}"
    print(f"several machines: daemons and controller ready in {ready_s:.1f} s, torchrun run {run_s:.1f} s")
