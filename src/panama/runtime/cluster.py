"""A local PANAMA cluster: a controller and switch daemons as background processes.

They bind 127.0.0.1 by default, or another address of this host (``host``), optionally
inside a network namespace (``netns``) so that workers in other namespaces reach them
over a (virtual) network as they would across machines.
``LocalCluster`` (a context manager) is what tests, the benchmark and the training
engineer use; ``panama cluster up|down|status`` wraps it for the shell. Every daemon
gets ports picked free just before it starts (a daemon that loses the race fails to
bind and the start is retried) and confirms them in a *ready file*. The cluster file
(topology + daemon addresses) is written first, so daemons and controller start in
parallel; the controller asks the daemons for ``/health`` only when a job arrives.
:meth:`LocalCluster.stop` sends SIGTERM, waits, then SIGKILL; it also runs at
interpreter exit and when ``start`` fails half-way, so no process is left behind.

:func:`find_or_start_cluster` is how a process of a training run finds its cluster:
``$PANAMA_CONTROLLER``'s, else a one-rack ``LocalCluster`` it starts for its ranks (the
torch backend's rank 0 calls it and shares the answer through torch's store).

``panama cluster up`` records a detached cluster in a *state file* (:class:`ClusterState`,
JSON, mode 0600): :func:`record_cluster` writes it before the processes are let go, and
stops them if it cannot (a full disk never leaves unrecorded daemons running);
:func:`read_cluster_state` refuses, in one line naming the file, what is not a regular
file of this user (checked without opening a FIFO in a blocking way) or not the shape
``cluster up`` writes.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from panama import environment
from panama.core.topology import leaf_spine
from panama.runtime.control.client import HttpError, request_json
from panama.runtime.control.tokens import check_token, new_token, resolve_token
from panama.runtime.files import UnsafePathError, private_dir, read_private_file, write_private_file
from panama.runtime.lifeline import pid_alive
from panama.runtime.net.udp import Address, AddressError, format_addr, free_port, parse_addr
from panama.runtime.settings import (
    ClusterConfig,
    ControllerConfig,
    ControllerProcess,
    ProcessSettings,
    SwitchConfig,
    SwitchProcess,
)
from panama.settings import settings_error

# The module each kind of daemon runs as (``python -m MODULE SETTINGS.json``).
DAEMON_MODULES: dict[type[ProcessSettings], str] = {
    SwitchProcess: "panama.runtime.switch.daemon",
    ControllerProcess: "panama.runtime.controller.service",
}


class ClusterError(RuntimeError):
    """A local cluster could not be started, reached or stopped; the message says which process."""


class _PortTaken(Exception):
    """A daemon could not bind the port picked for it (taken in between): retry."""


def default_state_path() -> Path:
    """Where ``panama cluster up`` records its processes (override with ``--state``)."""
    base = environment.cluster_state()
    if base is not None:
        return base
    return Path(tempfile.gettempdir()) / f"panama-cluster-{os.getuid()}" / "cluster.json"


@dataclass
class Proc:
    """One background process of the cluster."""

    name: str
    role: str
    popen: subprocess.Popen | None
    pid: int
    log: Path
    ready_file: Path
    udp: Address | None = None
    control: Address | None = None
    config_file: Path | None = None  # the settings file it was started with

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid)


class LocalCluster:
    """Controller + leaf/spine switch daemons on 127.0.0.1 (see module docstring).

    Settings: a :class:`~panama.runtime.settings.ClusterConfig`, or its fields as keyword
    arguments (``LocalCluster(leaves=1, drop_prob=0.01)``); they read back as attributes
    (``cluster.leaves``). ``drop_prob`` applies to every switch, or give
    ``switch_drop_prob={"spine0": 0.02}``. ``threshold_bytes`` defaults to 0 so every
    multi-host job aggregates in-network.

    Besides: ``workdir`` (logs, settings files, ready files; default a temporary
    directory), ``python`` (the interpreter the processes run), ``detached`` (False: the
    processes stop themselves when the process that started them dies, ``exit_with``;
    ``panama cluster up`` starts detached ones that outlive it) and ``token`` (the bearer
    token of every control API of this cluster: given, else $PANAMA_TOKEN when set, else a
    fresh random one; written to ``token`` in the work directory, mode 0600, for the
    processes, and into ``panama cluster up``'s state file).
    """

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        workdir: str | Path | None = None,
        python: str = sys.executable,
        detached: bool = False,
        token: str | None = None,
        **settings: Any,
    ):
        if config is None:
            config = ClusterConfig(**settings)
        elif settings:
            config = config.replace(**settings)
        self.config = config
        self.workdir = workdir
        self.python = python
        self.detached = detached
        self.token = token
        self.procs: dict[str, Proc] = {}
        self.controller_addr: Address | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._owner_pid = 0

    def __getattr__(self, name: str) -> Any:
        # The cluster's settings read as attributes (cluster.leaves, cluster.drop_prob, ...).
        config = self.__dict__.get("config")
        if config is not None and name in type(config).model_fields:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ lifecycle
    def start(self, attempts: int = 3) -> LocalCluster:
        """Start every process and wait until each answers; stops everything on failure.

        Ports are picked free up front so that daemons and controller start in parallel;
        if one was taken in between (the daemon fails to bind), the start is retried.
        """
        if self.procs:
            raise ClusterError("cluster already started")
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="panama-cluster-")
            self.workdir = self._tmp.name
        try:  # mode 0700, ours, not a symlink: its logs, settings and token are nobody else's
            work = private_dir(self.workdir, "workdir")
        except UnsafePathError as exc:
            raise ClusterError(str(exc)) from None
        if self.token is None:  # $PANAMA_TOKEN when set (its clients then reach this cluster), else a fresh one
            self.token = resolve_token(None) or new_token()
        check_token(self.token)
        write_private_file(work / "token", self.token)
        self._owner_pid = os.getpid()
        atexit.register(self._stop_at_exit)
        for attempt in range(attempts):
            try:
                self._start_once(work)
                return self
            except _PortTaken as taken:
                self.stop_processes_only()
                if self.controller_port and taken.args == ("controller",):
                    self.stop()
                    raise ClusterError(
                        f"controller_port: {self.host}:{self.controller_port} is taken (choose another or 0 for any)"
                    ) from None
                if attempt == attempts - 1:
                    self.stop()
                    raise ClusterError(f"could not find free ports after {attempts} attempts") from None
            except BaseException:
                self.stop()
                raise
        return self  # pragma: no cover

    def _start_once(self, work: Path) -> None:
        topo = leaf_spine(self.leaves, self.spines, self.hosts_per_leaf)
        for i, name in enumerate(topo.switches):
            role = "leaf" if topo.tier(name) == "tor" else topo.tier(name)
            switch = SwitchConfig(
                switch_id=name,
                udp=(self.host, self._free_port(socket.SOCK_DGRAM)),
                control=(self.host, self._free_port(socket.SOCK_STREAM)),
                packet_memory=self.packet_memory,
                payload_elems=self.payload_elems,
                ecn_threshold_pkts=self.ecn_threshold_pkts,
                drop_prob=self.switch_drop_prob.get(name, self.drop_prob),
                seed=self.seed + i,
            )
            proc = self._spawn(name, role, SwitchProcess(switch=switch, **self._process_settings(name, work)), work)
            proc.udp, proc.control = switch.udp, switch.control
        cluster_file = work / "cluster.toml"
        write_private_file(cluster_file, self.cluster_toml())
        controller = ControllerConfig(
            cluster_file=cluster_file,
            listen=(self.host, self.controller_port),
            threshold_bytes=self.threshold_bytes,
            max_jobs_per_switch=self.max_jobs_per_switch,
            trees=self.trees,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            state_file=work / "controller-state.json",
            multicast_results=self.multicast_results,
        )
        ctl = self._spawn_controller(controller, work)
        for proc in self.procs.values():
            info = self._wait_ready(proc)
            if proc is ctl:
                ctl.control = parse_addr(info["listen"])
                self.controller_addr = ctl.control
            elif (info["udp"], info["control"]) != (format_addr(proc.udp), format_addr(proc.control)):
                raise ClusterError(f"{proc.name} reports {info}, expected udp {proc.udp} control {proc.control}")

    def _free_port(self, kind: int) -> int:
        # A port free on this host's loopback; in a fresh namespace every port is free,
        # and a daemon that still finds its port taken makes start() retry.
        host = "127.0.0.1" if self.netns else self.host
        try:
            return free_port(host, kind=kind)
        except OSError as exc:  # e.g. EADDRNOTAVAIL: not an address of this machine
            raise ClusterError(
                f"host: cannot bind {host}: {exc.strerror or exc} (give an address of this machine, see 'ip addr')"
            ) from None

    def stop_processes_only(self) -> None:
        stop_processes(list(self.procs.values()))
        self.procs.clear()

    def _process_settings(self, name: str, work: Path) -> dict[str, Any]:
        """The :class:`ProcessSettings` fields of process ``name`` of this cluster."""
        return {
            "log_level": self.log_level,
            "ready_file": work / f"{name}.ready.json",
            "exit_with": None if self.detached else os.getpid(),
            "token_file": work / "token",
        }

    def _spawn_controller(self, controller: ControllerConfig, work: Path) -> Proc:
        settings = ControllerProcess(controller=controller, **self._process_settings("controller", work))
        return self._spawn("controller", "controller", settings, work)

    def _spawn(self, name: str, role: str, settings: ProcessSettings, work: Path) -> Proc:
        """Write the process's settings file (``NAME.json``) and start its daemon module on it."""
        log = work / f"{name}.log"
        ready = settings.ready_file
        ready.unlink(missing_ok=True)
        config_file = settings.save(work / f"{name}.json")
        config_file.chmod(0o600)
        cmd = [self.python, "-m", DAEMON_MODULES[type(settings)], str(config_file)]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]  # exec: same PID, signals reach the daemon
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "ab") as out:  # 0600: job names and worker addresses are nobody else's business
            popen = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        proc = Proc(name, role, popen, popen.pid, log, ready, config_file=config_file)
        self.procs[name] = proc
        return proc

    def _wait_ready(self, proc: Proc) -> dict[str, Any]:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.ready_file.exists():
                try:
                    return json.loads(proc.ready_file.read_text())
                except json.JSONDecodeError:
                    pass  # being written
            if not proc.alive():
                tail = _tail(proc.log)
                text = proc.log.read_text(errors="replace").lower() if proc.log.exists() else ""
                if "address already in use" in text or "cannot bind" in text:
                    raise _PortTaken(proc.name)
                raise ClusterError(f"{proc.name} exited during start-up (code {proc.popen.returncode}): {tail}")
            time.sleep(0.02)
        raise ClusterError(
            f"{proc.name} not ready within startup_timeout_s={self.startup_timeout_s:g} (no {proc.ready_file}): "
            f"{_tail(proc.log)}"
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every process, SIGKILL what is still alive after ``timeout_s``. Idempotent."""
        procs = list(self.procs.values())
        # Controller first (it leaves running jobs installed, as on any restart; the daemons go next).
        procs.sort(key=lambda p: p.role != "controller")
        stop_processes(procs, timeout_s)
        self.procs.clear()
        try:
            atexit.unregister(self._stop_at_exit)
        except Exception:  # pragma: no cover
            pass
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _stop_at_exit(self) -> None:
        # A forked child inherits the registration; only the process that started the
        # cluster may stop it.
        if os.getpid() == self._owner_pid:
            self.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ facts
    @property
    def controller(self) -> str:
        """``HOST:PORT`` of the controller, what ``Communicator(controller=...)`` takes."""
        if self.controller_addr is None:
            raise ClusterError("cluster is not running")
        return format_addr(self.controller_addr)

    @property
    def switch_names(self) -> list[str]:
        return [p.name for p in self.procs.values() if p.role != "controller"]

    def cluster_toml(self) -> str:
        lines = [
            f"leaves = {self.leaves}",
            f"spines = {self.spines}",
            f"hosts_per_leaf = {self.hosts_per_leaf}",
            "",
        ]
        for p in self.procs.values():
            if p.role == "controller":
                continue
            lines += [
                f"[switches.{p.name}]",
                f'udp = "{format_addr(p.udp)}"',
                f'control = "{format_addr(p.control)}"',
                "",
            ]
        return "\n".join(lines)

    def status(self) -> dict[str, Any]:
        """``{"controller": "HOST:PORT", "switches": [{"id", "role", "udp", "control", "pid", "alive",
        "log"}], ...}``."""
        ctl = self.procs.get("controller")
        return {
            "controller": self.controller if self.controller_addr else None,
            "controller_pid": ctl.pid if ctl else None,
            "controller_log": str(ctl.log) if ctl else None,
            "workdir": str(self.workdir),
            "switches": [
                {
                    "id": p.name,
                    "role": p.role,
                    "udp": format_addr(p.udp) if p.udp else None,
                    "control": format_addr(p.control) if p.control else None,
                    "pid": p.pid,
                    "alive": p.alive(),
                    "log": str(p.log),
                }
                for p in self.procs.values()
                if p.role != "controller"
            ],
        }

    def switch_stats(self, name: str | None = None) -> dict[str, Any]:
        """``GET /stats`` of one daemon, or ``{name: stats}`` of every daemon."""
        names = [name] if name else self.switch_names
        out = {}
        for n in names:
            p = self.procs[n]
            status, body = request_json(p.control, "GET", "/stats", timeout_s=5.0, what=f"switch {n}", token=self.token)
            if status != 200:
                raise ClusterError(f"switch {n}: /stats answered HTTP {status}")
            out[n] = body
        return out[name] if name else out

    def switch_udp(self, name: str) -> Address:
        return self.procs[name].udp

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill one process (fault-injection tests); it stays listed but dead."""
        proc = self.procs[name]
        os.kill(proc.pid, sig)
        if proc.popen is not None:
            proc.popen.wait(timeout=10)

    def controller_call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return request_json(
            self.controller_addr, method, path, body, timeout_s=10.0, what="controller", token=self.token
        )

    def switch_call(self, name: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One authenticated request to a daemon's control API."""
        return request_json(
            self.procs[name].control, method, path, body, timeout_s=10.0, what=f"switch {name}", token=self.token
        )

    def restart_controller(self, sig: int = signal.SIGKILL) -> None:
        """Stop the controller (``sig``; SIGKILL: no clean-up at all) and start a new one on the
        same address and state file."""
        proc = self.procs["controller"]
        self.kill("controller", sig)
        work = Path(self.workdir)
        old = ControllerProcess.load(proc.config_file).controller
        controller = old.replace(listen=self.controller_addr)
        del self.procs["controller"]
        for attempt in range(50):  # the old socket may linger a moment
            new = self._spawn_controller(controller, work)
            try:
                info = self._wait_ready(new)
            except (ClusterError, _PortTaken):
                stop_processes([new])
                del self.procs["controller"]
                time.sleep(0.1)
                continue
            new.control = parse_addr(info["listen"])
            return
        raise ClusterError("controller could not be restarted on its address")

    def recorded_state(self) -> dict[str, Any]:
        """What ``panama cluster up`` records (:class:`ClusterState`): :meth:`status`, every pid and the token."""
        state = self.status()
        state["pids"] = {p.name: p.pid for p in self.procs.values()}
        state["token"] = self.token
        return state

    def detach(self) -> dict[str, Any]:
        """Forget the processes without stopping them (``panama cluster up``); returns the state."""
        state = self.recorded_state()
        self._tmp = None
        self.procs = {}
        try:
            atexit.unregister(self._stop_at_exit)
        except Exception:  # pragma: no cover
            pass
        return state


def stop_processes(procs: list[Proc], timeout_s: float = 5.0) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL."""
    for p in procs:
        if p.alive():
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout_s
    for p in procs:
        while p.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if p.alive():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.popen is not None:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass


def probe_health(addr: Address, path: str, what: str) -> bool:
    try:
        status, _ = request_json(addr, "GET", path, timeout_s=1.0, what=what)
    except HttpError:
        return False
    return status == 200


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


# ---------------------------------------------------------------------- the state file of `panama cluster up`
def _an_address_or_none(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_addr(value)
        except AddressError as exc:
            raise ValueError(exc.detail) from None
    return value


class RecordedSwitch(BaseModel):
    """A switch daemon as ``cluster up`` records it (``status()["switches"][i]``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    id: str
    role: str
    udp: str | None = None
    control: str | None = None
    pid: int | None = None
    log: str | None = None

    _addresses = field_validator("udp", "control")(_an_address_or_none)


class ClusterState(BaseModel):
    """What ``panama cluster up`` records: :meth:`LocalCluster.status` plus ``pids`` and ``token``."""

    model_config = ConfigDict(extra="allow", strict=True)

    controller: str | None
    controller_pid: int | None = None
    controller_log: str | None = None
    workdir: str | None = None
    switches: list[RecordedSwitch]
    pids: dict[str, int] = Field(default_factory=dict)
    token: str | None = None

    _address = field_validator("controller")(_an_address_or_none)


def read_cluster_state(path: Path) -> dict[str, Any]:
    """The state file's content (a :class:`ClusterState` as a dict).

    :class:`~panama.runtime.files.UnsafePathError` (field ``state``) when it is not a
    regular file of this user (a FIFO is refused without blocking), is not JSON or not
    the shape above; OSError (e.g. FileNotFoundError) passes through.
    """
    text = read_private_file(path, "state")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UnsafePathError("state", f"{path} is not JSON ({exc}); remove it") from None
    if not isinstance(data, dict):
        raise UnsafePathError("state", f"{path} is not a cluster state (a JSON {type(data).__name__}); remove it")
    try:
        ClusterState.model_validate(data)
    except ValidationError as exc:
        err = settings_error(exc)
        raise UnsafePathError(
            "state", f"{path} is not a cluster state ({err.field}: {err.detail}); remove it"
        ) from None
    return data


def record_cluster(cluster: LocalCluster, path: Path) -> dict[str, Any]:
    """Write ``cluster``'s state to ``path`` (mode 0600: it holds the token), then let its
    processes go (:meth:`LocalCluster.detach`) and return the state. If the write fails
    (a full disk) or anything interrupts it, the processes are stopped first and
    :class:`ClusterError` says why: no daemon runs that no state file records."""
    state = cluster.recorded_state()
    try:
        write_private_file(path, json.dumps(state, indent=2))
    except BaseException as exc:
        cluster.stop()
        if isinstance(exc, OSError):
            raise ClusterError(
                f"cannot record the cluster in {path}: {exc.strerror or exc} (its processes were stopped)"
            ) from None
        raise
    cluster.detach()
    return state


# ---------------------------------------------------------------------- discovery
@dataclass
class FoundCluster:
    """The cluster a process's ranks use: its controller (``HOST:PORT``), token, and the
    :class:`LocalCluster` when this process started it (and must stop it)."""

    controller: str
    token: str | None
    local: LocalCluster | None = None


def find_or_start_cluster(world_size: int) -> FoundCluster:
    """``$PANAMA_CONTROLLER`` (with ``$PANAMA_TOKEN``) when set; else a local cluster for
    ``world_size`` ranks on this machine, started now: one rack (a leaf for the ranks, the
    one spine the controller needs), multicast results off.

    Why one rack: on one host every daemon is a process on the ranks' CPUs and every tree
    edge a loopback hop, so the smallest fabric is the fastest (docs/runtime-performance.md:
    one rack 1.5-1.7x gloo's speed, 2 tiers 0.8-0.96x). Why no multicast: every local user
    could join a loopback group and read the gradients and the job key of a cluster this
    user never chose to start (docs/training.md). :class:`ClusterError` when no controller
    is given and torchrun says the ranks span several hosts (``LOCAL_WORLD_SIZE`` below
    ``WORLD_SIZE``): a cluster on this loopback cannot serve them.
    """
    from panama.runtime.worker.env import CONTROLLER_ENV, controller_from_env, token_from_env

    controller = controller_from_env()
    if controller is not None:
        return FoundCluster(controller, token_from_env())
    local_world, world = environment.local_world_size(), environment.world_size()
    if local_world is not None and world is not None and local_world != world:
        raise ClusterError(
            f"{CONTROLLER_ENV} is not set and the job spans several hosts (WORLD_SIZE={world}, "
            f"LOCAL_WORLD_SIZE={local_world}): a local cluster on rank 0's loopback cannot serve them; "
            f"start one (panama cluster up --host ADDR) and set {CONTROLLER_ENV}"
        )
    lc = LocalCluster(leaves=1, spines=1, hosts_per_leaf=world_size, log_level="WARNING", multicast_results=False)
    lc.start()
    return FoundCluster(lc.controller, lc.token, local=lc)
