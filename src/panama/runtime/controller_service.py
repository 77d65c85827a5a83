"""``panama controller serve``: the controller as an HTTP/JSON service for switch daemons and workers.

The service reads a cluster file (TOML, :func:`load_cluster`): a topology (the same
specs as :func:`panama.core.topology.parse_topology`) and, for every switch of it, the
UDP data address and HTTP control address of its daemon. It runs the pure
:class:`panama.core.controller.Controller` for admission and trees and applies each
plan to the daemons over their control API (``PUT``/``DELETE /jobs/{job_id}``).

Runtime mapping (docs/runtime.md): each worker is its own host of the topology. Rank
``r`` of a job takes the ``r``-th host in *spread* order (first host of every leaf,
then the second of every leaf, ...), so ranks fill leaves evenly. In the trees a host
child stands for that rank's UDP address, a switch for its daemon's UDP address.

Lifecycle of a job: ranks register (a barrier: each ``register`` call waits until all
``world_size`` ranks are in, or ``wait_s`` passes); the controller admits the job,
installs it on every daemon of its trees (all or nothing) and answers every rank with
its trees and first-hop daemon. Ranks heart-beat; the job is torn down (removed from
the daemons, released in the controller) when every rank has left (``completed``),
when a rank misses heartbeats for ``heartbeat_timeout_s`` or a daemon of its trees stops
answering (``failed``), or on ``DELETE /v1/jobs/{job}``. Ended jobs are kept in a short
history so late heartbeats learn why.

All state lives in one asyncio loop: handlers never run concurrently between awaits
that matter; a job being installed is in state ``installing``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import tomllib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from panama.core.controller import Controller, ControllerError, JobPlan, install, uninstall
from panama.core.topology import Topology, TopologyError, leaf_spine, natural_key, parse_topology
from panama.runtime.udp import Address, AddressError, format_addr, parse_addr

log = logging.getLogger("panama.controller")

API = "/v1"
MAX_WAIT_S = 600.0
PROBE_TIMEOUTS_DOWN = 3  # consecutive /health timeouts before a daemon counts as down
HISTORY = 200

REGISTERING = "registering"
INSTALLING = "installing"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
REFUSED = "refused"


class ClusterFileError(ValueError):
    """The cluster file is invalid; the message starts with the offending field."""


@dataclass
class SwitchInfo:
    """A switch daemon as the controller knows it."""

    name: str
    role: str  # topology kind: tor, agg, core, spine
    udp: Address
    control: Address
    up: bool = True
    error: str = ""
    timeouts: int = 0
    payload_elems: int | None = None
    packet_memory: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.name,
            "role": self.role,
            "udp": format_addr(self.udp),
            "control": format_addr(self.control),
            "up": self.up,
            "error": self.error,
            "payload_elems": self.payload_elems,
            "packet_memory": self.packet_memory,
        }


@dataclass
class ClusterSpec:
    topology: Topology
    switches: dict[str, SwitchInfo]


def load_cluster(source: str | Path | dict) -> ClusterSpec:
    """Parse a cluster file (path, TOML text, or an already-parsed dict).

    Keys: ``topology`` (a spec such as ``"leaf-spine:leaves=2,spines=2,hosts_per_leaf=4"``
    or a topology file path) or the numbers ``leaves``, ``spines``, ``hosts_per_leaf``;
    and a table ``[switches.NAME]`` with ``udp = "HOST:PORT"`` and ``control =
    "HOST:PORT"`` for every switch of the topology.
    """
    if isinstance(source, dict):
        data = source
    else:
        text = Path(source).read_text() if Path(str(source)).is_file() else None
        if text is None:
            raise ClusterFileError(f"cluster: no such file: {source}")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ClusterFileError(f"cluster: not valid TOML: {exc}") from None
    allowed = {"topology", "leaves", "spines", "hosts_per_leaf", "switches"}
    for key in data:
        if key not in allowed:
            raise ClusterFileError(f"{key}: unknown key (allowed: {', '.join(sorted(allowed))})")
    try:
        if "topology" in data:
            if not isinstance(data["topology"], str):
                raise ClusterFileError("topology: expected a spec string or a file path")
            topo = parse_topology(data["topology"])
        else:
            for key in ("leaves", "spines", "hosts_per_leaf"):
                if key not in data:
                    raise ClusterFileError(f"{key}: missing (or give 'topology')")
            topo = leaf_spine(data["leaves"], data["spines"], data["hosts_per_leaf"])
    except TopologyError as exc:
        raise ClusterFileError(f"topology.{exc}") from None
    raw = data.get("switches")
    if not isinstance(raw, dict):
        raise ClusterFileError("switches: expected a table [switches.NAME] with udp and control addresses")
    switches: dict[str, SwitchInfo] = {}
    for name in topo.switches:
        entry = raw.get(name)
        if not isinstance(entry, dict):
            raise ClusterFileError(f"switches.{name}: missing (every switch of the topology needs a daemon)")
        try:
            udp = parse_addr(entry.get("udp"), field=f"switches.{name}.udp")
            control = parse_addr(entry.get("control"), field=f"switches.{name}.control")
        except AddressError as exc:
            raise ClusterFileError(str(exc)) from None
        switches[name] = SwitchInfo(name, topo.tier(name), udp, control)
    for name in raw:
        if name not in switches:
            raise ClusterFileError(f"switches.{name}: not a switch of topology {topo.name}")
    return ClusterSpec(topo, switches)


def spread_hosts(topo: Topology) -> list[str]:
    """Hosts in rank order: the first host of every leaf, then the second of every leaf, ..."""
    per_tor = [topo.hosts_of(t) for t in topo.tors]
    out = []
    for i in range(max((len(h) for h in per_tor), default=0)):
        out.extend(h[i] for h in per_tor if i < len(h))
    return out


@dataclass
class Rank:
    rank: int
    udp: Address
    host: str
    last_seen: float
    left: bool = False


@dataclass
class Job:
    name: str
    world_size: int
    created: float
    ranks: dict[int, Rank] = field(default_factory=dict)
    size_bytes: int = 0
    trees: int | None = None
    payload_elems: int | None = None
    state: str = REGISTERING
    reason: str = ""
    plan: JobPlan | None = None
    job_id: int | None = None
    payload_for_job: int | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    ended: float | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "world_size": self.world_size,
            "registered": sorted(self.ranks),
            "left": sorted(r for r, x in self.ranks.items() if x.left),
            "size_bytes": self.size_bytes,
            "payload_elems": self.payload_for_job,
            "hosts": {str(r): x.host for r, x in sorted(self.ranks.items())},
            "plan": self.plan.to_dict() if self.plan is not None else None,
        }


class _Recorder:
    """Stands in for an Accelerator so that core ``install``/``uninstall`` yield per-switch requests."""

    def __init__(self, name: str, to_addr: dict[str, str]):
        self.name = name
        self.to_addr = to_addr
        self.trees: list[dict[str, Any]] = []
        self.removed: list[int] = []

    def install_tree(self, job_id: int, tree_id: int, children: tuple, parent: str | None) -> None:
        self.trees.append(
            {
                "tree_id": tree_id,
                "children": [self.to_addr[c] for c in children],
                "parent": None if parent is None else self.to_addr[parent],
            }
        )

    def remove_tree(self, job_id: int, tree_id: int) -> None:  # pragma: no cover - only on a failed install
        self.trees = [t for t in self.trees if t["tree_id"] != tree_id]

    def remove_job(self, job_id: int) -> None:
        self.removed.append(job_id)


class ControllerService:
    """The controller's HTTP service (see docs/runtime.md for the API)."""

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        threshold_bytes: int = 40_000_000,
        max_jobs_per_switch: int = 8,
        default_trees: int | None = None,
        heartbeat_timeout_s: float = 5.0,
        probe_interval_s: float = 1.0,
        switch_timeout_s: float = 2.0,
    ):
        self.cluster = cluster
        self.topology = cluster.topology
        self.switches = cluster.switches
        self.threshold_bytes = threshold_bytes
        self.max_jobs_per_switch = max_jobs_per_switch
        self.default_trees = default_trees or max(1, len(self.topology.spines) or len(self.topology.cores) or 1)
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.probe_interval_s = probe_interval_s
        self.switch_timeout_s = switch_timeout_s
        self.controller: Controller | None = None  # built once daemons report their memory
        self.jobs: dict[str, Job] = {}
        self.history: OrderedDict[int, Job] = OrderedDict()
        self.hosts_in_order = spread_hosts(self.topology)
        self.counters = {"admitted": 0, "refused": 0, "completed": 0, "failed": 0, "bad_requests": 0}
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        self.started = time.monotonic()

    # ------------------------------------------------------------------ daemons
    async def _switch_call(self, sw: SwitchInfo, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        assert self._session is not None
        url = f"http://{sw.control[0]}:{sw.control[1]}{path}"
        timeout = aiohttp.ClientTimeout(total=self.switch_timeout_s)
        async with self._session.request(method, url, json=body, timeout=timeout) as resp:
            try:
                data = await resp.json(content_type=None)
            except (json.JSONDecodeError, aiohttp.ContentTypeError):
                data = await resp.text()
            return resp.status, data

    async def probe(self, sw: SwitchInfo) -> bool:
        """Ask one daemon for ``/health``; update ``up``/``error``/memory facts."""
        try:
            status, data = await self._switch_call(sw, "GET", "/health")
            if status != 200 or not isinstance(data, dict):
                raise RuntimeError(f"HTTP {status}")
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, OSError) as exc:
            # A refused connection means the daemon is gone; a slow answer may only mean a
            # busy CPU, so it takes PROBE_TIMEOUTS_DOWN consecutive timeouts.
            sw.timeouts = sw.timeouts + 1 if isinstance(exc, asyncio.TimeoutError) else PROBE_TIMEOUTS_DOWN
            if sw.timeouts < PROBE_TIMEOUTS_DOWN:
                return sw.up
            if sw.up:
                log.warning("switch %s (control %s) is not answering: %s", sw.name, format_addr(sw.control), exc or type(exc).__name__)
            sw.up = False
            sw.error = str(exc) or type(exc).__name__
            return False
        sw.timeouts = 0
        if data.get("udp") and data["udp"] != format_addr(sw.udp):
            sw.up = False
            sw.error = f"daemon reports udp {data['udp']}, cluster file says {format_addr(sw.udp)}"
            return False
        if not sw.up:
            log.info("switch %s is back", sw.name)
        sw.up = True
        sw.error = ""
        sw.payload_elems = int(data.get("payload_elems", 0)) or None
        sw.packet_memory = int(data.get("packet_memory", 0)) or None
        return True

    async def probe_all(self, names: list[str] | None = None) -> None:
        targets = [self.switches[n] for n in (names if names is not None else list(self.switches))]
        await asyncio.gather(*(self.probe(sw) for sw in targets))

    async def _reset_daemons(self) -> None:
        """Remove jobs a previous controller left on the daemons (this one starts with none)."""

        async def reset(sw: SwitchInfo) -> None:
            try:
                status, data = await self._switch_call(sw, "GET", "/jobs")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return
            for job_id in (data.get("jobs") or {}) if status == 200 and isinstance(data, dict) else ():
                log.warning("switch %s: removing job %s left by a previous controller", sw.name, job_id)
                await self._delete_on(sw.name, int(job_id))

        await asyncio.gather(*(reset(sw) for sw in self.switches.values()))

    async def _ensure_controller(self) -> Controller:
        if self.controller is None:
            await self.probe_all()
            down = [s.name for s in self.switches.values() if not s.up]
            if down:
                raise web.HTTPServiceUnavailable(
                    text=json.dumps({"error": f"switch daemons not answering: {', '.join(down)}"}),
                    content_type="application/json",
                )
            await self._reset_daemons()
            memory = min(s.packet_memory or 4096 for s in self.switches.values())
            self.controller = Controller(
                self.topology,
                threshold_bytes=self.threshold_bytes,
                max_jobs_per_switch=self.max_jobs_per_switch,
                packet_memory=memory,
            )
        return self.controller

    # ------------------------------------------------------------------ job lifecycle
    async def _admit(self, job: Job) -> None:
        """All ranks are in: plan, install on the daemons, and wake every waiting rank."""
        job.state = INSTALLING
        try:
            ctl = await self._ensure_controller()
        except web.HTTPException as exc:
            self._end(job, FAILED, json.loads(exc.text)["error"])
            return
        hosts = [job.ranks[r].host for r in range(job.world_size)]
        try:
            plan = ctl.admit(job.name, hosts, job.size_bytes, job.trees or self.default_trees)
        except ControllerError as exc:
            self._end(job, FAILED, f"controller rejected the job: {exc}")
            return
        job.plan = plan
        job.job_id = plan.job_id
        if not plan.admitted:
            ctl.release(job.name)
            self._end(job, REFUSED, plan.reason)
            return
        # Payload size: the smallest of what ranks asked for and what the daemons hold.
        limits = [self.switches[s].payload_elems or 0 for s in plan.switches]
        if not all(limits):
            await self.probe_all(plan.switches)
            limits = [self.switches[s].payload_elems or 0 for s in plan.switches]
        known = [x for x in limits if x]
        if job.payload_elems is not None:
            known.append(job.payload_elems)
        job.payload_for_job = min(known) if known else 1
        to_addr = {s: format_addr(info.udp) for s, info in self.switches.items()}
        to_addr.update({x.host: format_addr(x.udp) for x in job.ranks.values()})
        recorders = {s: _Recorder(s, to_addr) for s in plan.switches}
        install(plan, recorders)
        done: list[str] = []
        errors: list[str] = []

        async def put(name: str) -> None:
            sw = self.switches[name]
            try:
                status, data = await self._switch_call(sw, "PUT", f"/jobs/{plan.job_id}", {"trees": recorders[name].trees})
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                errors.append(f"switch {name} (control {format_addr(sw.control)}) unreachable: {exc or type(exc).__name__}")
                sw.up, sw.error = False, str(exc) or type(exc).__name__
                return
            if status != 200:
                errors.append(f"switch {name} refused job {plan.job_id}: HTTP {status} {data}")
                return
            done.append(name)

        await asyncio.gather(*(put(s) for s in plan.switches))
        if errors:
            await asyncio.gather(*(self._delete_on(s, plan.job_id) for s in done))
            ctl.release(job.name)
            self._end(job, FAILED, "install failed: " + "; ".join(errors))
            return
        now = time.monotonic()
        for x in job.ranks.values():
            x.last_seen = now
        job.state, job.reason = RUNNING, plan.reason
        self.counters["admitted"] += 1
        log.info(
            "job %s admitted as job_id %d on %s: %s",
            job.name,
            plan.job_id,
            ", ".join(plan.switches),
            plan.reason,
        )
        job.ready.set()

    async def _delete_on(self, name: str, job_id: int) -> None:
        sw = self.switches[name]
        try:
            status, data = await self._switch_call(sw, "DELETE", f"/jobs/{job_id}")
            if status not in (200, 404):
                log.warning("switch %s: removing job %d answered HTTP %d %s", name, job_id, status, data)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            log.warning("switch %s: could not remove job %d: %s", name, job_id, exc or type(exc).__name__)

    def _end(self, job: Job, state: str, reason: str) -> None:
        """Move ``job`` to the history in ``state`` and wake its waiting ranks."""
        job.state, job.reason, job.ended = state, reason, time.monotonic()
        if self.jobs.get(job.name) is job:
            del self.jobs[job.name]
        if job.job_id is not None:
            self.history[job.job_id] = job
            while len(self.history) > HISTORY:
                self.history.popitem(last=False)
        self.counters[state] = self.counters.get(state, 0) + 1
        log.log(logging.WARNING if state == FAILED else logging.INFO, "job %s (job_id %s) %s: %s", job.name, job.job_id, state, reason)
        job.ready.set()

    async def teardown(self, job: Job, state: str, reason: str) -> None:
        """Remove ``job`` from its daemons and the controller; keep it in the history."""
        if job.state not in (RUNNING, REGISTERING, INSTALLING):
            return
        was_running = job.state == RUNNING
        self._end(job, state, reason)
        if was_running and job.plan is not None and self.controller is not None:
            recorders = {s: _Recorder(s, {}) for s in job.plan.switches}
            uninstall(job.plan, recorders)
            await asyncio.gather(*(self._delete_on(s, job.plan.job_id) for s in recorders))
            self.controller.release(job.name)

    async def _monitor(self) -> None:
        """Heartbeat deadlines and daemon health of running jobs."""
        next_probe = 0.0
        while True:
            await asyncio.sleep(min(0.25, self.heartbeat_timeout_s / 4))
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if job.state != RUNNING:
                    continue
                stale = [x for x in job.ranks.values() if not x.left and now - x.last_seen > self.heartbeat_timeout_s]
                if stale:
                    x = stale[0]
                    await self.teardown(
                        job,
                        FAILED,
                        f"rank {x.rank} (udp {format_addr(x.udp)}) stopped heart-beating "
                        f"({now - x.last_seen:.1f} s > heartbeat_timeout_s {self.heartbeat_timeout_s:g})",
                    )
            if now >= next_probe:
                next_probe = now + self.probe_interval_s
                used = sorted({s for j in self.jobs.values() if j.state == RUNNING and j.plan for s in j.plan.switches})
                if used:
                    await self.probe_all(used)
                for job in list(self.jobs.values()):
                    if job.state != RUNNING or job.plan is None:
                        continue
                    down = [self.switches[s] for s in job.plan.switches if not self.switches[s].up]
                    if down:
                        sw = down[0]
                        await self.teardown(
                            job,
                            FAILED,
                            f"switch {sw.name} (udp {format_addr(sw.udp)}, control {format_addr(sw.control)}) "
                            f"is down: {sw.error}",
                        )

    # ------------------------------------------------------------------ HTTP handlers
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        app.add_routes(
            [
                web.get(f"{API}/health", self.h_health),
                web.get(f"{API}/switches", self.h_switches),
                web.get(f"{API}/jobs", self.h_jobs),
                web.get(f"{API}/jobs/{{job}}", self.h_job),
                web.delete(f"{API}/jobs/{{job}}", self.h_delete_job),
                web.post(f"{API}/jobs/{{job}}/register", self.h_register),
                web.post(f"{API}/jobs/{{job}}/heartbeat", self.h_heartbeat),
                web.post(f"{API}/jobs/{{job}}/leave", self.h_leave),
                web.get("/metrics", self.h_metrics),
            ]
        )
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession()
        self._tasks.append(asyncio.create_task(self._monitor()))

    async def _on_cleanup(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        for job in list(self.jobs.values()):
            await self.teardown(job, FAILED, "controller shut down")
        if self._session is not None:
            await self._session.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except _BadRequest as exc:
            self.counters["bad_requests"] += 1
            return web.json_response({"error": str(exc)}, status=exc.status)
        except ControllerError as exc:
            self.counters["bad_requests"] += 1
            return web.json_response({"error": str(exc)}, status=400)

    async def h_health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "topology": self.topology.name,
                "hosts": len(self.topology.hosts),
                "threshold_bytes": self.threshold_bytes,
                "heartbeat_timeout_s": self.heartbeat_timeout_s,
                "jobs": len(self.jobs),
                "uptime_s": round(time.monotonic() - self.started, 3),
            }
        )

    async def h_switches(self, request: web.Request) -> web.Response:
        if request.query.get("probe") in ("1", "true"):
            await self.probe_all()
        return web.json_response({"switches": [s.to_dict() for s in self.switches.values()]})

    async def h_jobs(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "jobs": [j.summary() for j in self.jobs.values()],
                "history": [j.summary() for j in list(self.history.values())[-20:]],
            }
        )

    def _find(self, name: str, job_id: int | None = None) -> Job | None:
        job = self.jobs.get(name)
        if job is not None and (job_id is None or job.job_id == job_id):
            return job
        if job_id is not None:
            old = self.history.get(job_id)
            if old is not None and old.name == name:
                return old
        elif job is None:
            for old in reversed(self.history.values()):
                if old.name == name:
                    return old
        return None

    async def h_job(self, request: web.Request) -> web.Response:
        name = request.match_info["job"]
        job = self._find(name)
        if job is None:
            raise _BadRequest(404, f"job: unknown job {name!r}")
        out = job.summary()
        now = time.monotonic()
        out["stale_ranks"] = sorted(
            x.rank for x in job.ranks.values() if not x.left and job.state == RUNNING and now - x.last_seen > 2 * self._hb_hint()
        )
        if job.plan is not None and job.plan.admitted:
            if request.query.get("probe") in ("1", "true"):
                await self.probe_all(job.plan.switches)
            out["switches"] = {
                s: {"udp": format_addr(self.switches[s].udp), "up": self.switches[s].up, "error": self.switches[s].error}
                for s in job.plan.switches
            }
        return web.json_response(out)

    def _hb_hint(self) -> float:
        return self.heartbeat_timeout_s / 4

    async def h_delete_job(self, request: web.Request) -> web.Response:
        name = request.match_info["job"]
        job = self.jobs.get(name)
        if job is None:
            raise _BadRequest(404, f"job: unknown job {name!r}")
        await self.teardown(job, FAILED, "deleted by an operator (DELETE /v1/jobs)")
        return web.json_response(job.summary())

    async def h_register(self, request: web.Request) -> web.Response:
        name = request.match_info["job"]
        body = await _json_object(request)
        rank = _int_field(body, "rank", 0)
        world_size = _int_field(body, "world_size", 1)
        size_bytes = _int_field(body, "size_bytes", 0, default=0)
        trees = _int_field(body, "trees", 1, default=None)
        payload = _int_field(body, "payload_elems", 1, default=None)
        wait_s = body.get("wait_s", 30.0)
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 < wait_s <= MAX_WAIT_S:
            raise _BadRequest(400, f"wait_s: expected a number in (0, {MAX_WAIT_S:g}], got {wait_s!r}")
        if rank >= world_size:
            raise _BadRequest(400, f"rank: {rank} is not below world_size {world_size}")
        if world_size > len(self.hosts_in_order):
            raise _BadRequest(
                400, f"world_size: {world_size} workers do not fit the {len(self.hosts_in_order)} hosts of {self.topology.name}"
            )
        try:
            udp = parse_addr(body.get("udp"), field="udp")
        except AddressError as exc:
            raise _BadRequest(400, str(exc)) from None
        job = self.jobs.get(name)
        if job is None:
            job = Job(name, world_size, time.monotonic())
            self.jobs[name] = job
        if job.state != REGISTERING:
            raise _BadRequest(
                409, f"job: {name!r} is {job.state} (job_id {job.job_id}); register again after it ends"
            )
        if job.world_size != world_size:
            raise _BadRequest(409, f"world_size: {world_size} differs from {job.world_size} given by other ranks of {name!r}")
        if trees is not None and job.trees not in (None, trees):
            raise _BadRequest(409, f"trees: {trees} differs from {job.trees} asked by other ranks of {name!r}")
        if trees is not None:
            job.trees = trees
        if payload is not None:
            job.payload_elems = payload if job.payload_elems is None else min(job.payload_elems, payload)
        job.size_bytes = max(job.size_bytes, size_bytes)
        if rank in job.ranks:
            other = job.ranks[rank]
            raise _BadRequest(
                409, f"rank: {rank} of {name!r} is already registered (from udp {format_addr(other.udp)}); ranks must be unique"
            )
        mine = Rank(rank, udp, self.hosts_in_order[rank], time.monotonic())
        job.ranks[rank] = mine
        log.info("job %s: rank %d/%d registered from %s", name, rank, world_size, format_addr(udp))
        if len(job.ranks) == world_size:
            await self._admit(job)
        else:
            try:
                await asyncio.wait_for(job.ready.wait(), timeout=wait_s)
            except asyncio.TimeoutError:
                if job.state == REGISTERING and job.ranks.get(rank) is mine:
                    del job.ranks[rank]
                    if not job.ranks and self.jobs.get(name) is job:
                        del self.jobs[name]
                missing = sorted(set(range(world_size)) - set(job.ranks) - {rank})
                raise _BadRequest(
                    504,
                    f"job {name!r}: ranks {missing} of world_size {world_size} did not register within "
                    f"wait_s={wait_s:g} (registered: {sorted(job.ranks)})",
                ) from None
        return self._register_reply(job, rank)

    def _register_reply(self, job: Job, rank: int) -> web.Response:
        if job.state == REFUSED:
            return web.json_response({"job": job.name, "job_id": job.job_id, "admitted": False, "reason": job.reason})
        if job.state != RUNNING:
            raise _BadRequest(503, f"job {job.name!r}: {job.state}: {job.reason}")
        plan = job.plan
        assert plan is not None
        host = job.ranks[rank].host
        leaf = self.topology.tor_of(host)
        return web.json_response(
            {
                "job": job.name,
                "job_id": plan.job_id,
                "admitted": True,
                "reason": plan.reason,
                "warnings": list(plan.warnings),
                "rank": rank,
                "host": host,
                "trees": [
                    {"tree_id": t.tree_id, "root": t.root, "group": t.group, "cwnd_cap": t.cwnd_cap} for t in plan.trees
                ],
                "first_hop": {"switch": leaf, "udp": format_addr(self.switches[leaf].udp)},
                "payload_elems": job.payload_for_job,
                "heartbeat_timeout_s": self.heartbeat_timeout_s,
            }
        )

    async def _registered_rank(self, request: web.Request) -> tuple[Job, Rank]:
        """The job and the rank a heartbeat or leave request names; 404 when either is unknown."""
        name = request.match_info["job"]
        body = await _json_object(request)
        rank = _int_field(body, "rank", 0)
        job_id = _int_field(body, "job_id", 1, default=None)
        job = self._find(name, job_id)
        if job is None:
            raise _BadRequest(404, f"job: unknown job {name!r}" + (f" with job_id {job_id}" if job_id else ""))
        x = job.ranks.get(rank)
        if x is None:
            raise _BadRequest(404, f"rank: {rank} is not registered in job {name!r}")
        return job, x

    async def h_heartbeat(self, request: web.Request) -> web.Response:
        job, x = await self._registered_rank(request)
        if job.state == RUNNING:
            x.last_seen = time.monotonic()
        return web.json_response({"state": job.state, "reason": job.reason, "job_id": job.job_id})

    async def h_leave(self, request: web.Request) -> web.Response:
        job, x = await self._registered_rank(request)
        x.left = True
        if job.state == RUNNING and all(r.left for r in job.ranks.values()):
            await self.teardown(job, COMPLETED, f"all {job.world_size} ranks left")
        return web.json_response({"state": job.state, "reason": job.reason, "job_id": job.job_id})

    async def h_metrics(self, request: web.Request) -> web.Response:
        lines = []
        for key, value in self.counters.items():
            lines += [
                f"# TYPE panama_controller_jobs_{key}_total counter",
                f"panama_controller_jobs_{key}_total {value}",
            ]
        lines += ["# TYPE panama_controller_jobs_live gauge", f"panama_controller_jobs_live {len(self.jobs)}"]
        lines.append("# TYPE panama_controller_switch_up gauge")
        for s in sorted(self.switches.values(), key=lambda s: natural_key(s.name)):
            lines.append(f'panama_controller_switch_up{{switch="{s.name}"}} {int(s.up)}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _BadRequest(400, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise _BadRequest(400, f"body: expected a JSON object, got {type(body).__name__}")
    return body


_MISSING = object()


def _int_field(body: dict, key: str, low: int, default: Any = _MISSING) -> Any:
    value = body.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise _BadRequest(400, f"{key}: missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadRequest(400, f"{key}: expected an integer, got {value!r}")
    if value < low:
        raise _BadRequest(400, f"{key}: must be >= {low}, got {value}")
    return value


async def serve(service: ControllerService, listen: Address, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Run the service until ``stop`` is set."""
    runner = web.AppRunner(service.make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, listen[0], listen[1], reuse_address=True)
    await site.start()
    service.address = tuple(runner.addresses[0][:2])
    log.info(
        "controller on http://%s: topology %s, %d switches, threshold_bytes %d, heartbeat_timeout_s %g",
        format_addr(service.address),
        service.topology.name,
        len(service.switches),
        service.threshold_bytes,
        service.heartbeat_timeout_s,
    )
    if ready is not None:
        ready.set()
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()


def run_controller(service: ControllerService, listen: Address, ready_file: str | None = None) -> None:
    """Serve in the foreground until SIGTERM/SIGINT; write ``{"listen", "pid"}`` to ``ready_file``."""
    import os
    import signal

    from panama.runtime.switchd import write_ready_file

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready = asyncio.Event()
        task = asyncio.create_task(serve(service, listen, ready, stop))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set() and ready_file:
            write_ready_file(ready_file, {"listen": format_addr(service.address), "pid": os.getpid()})
        waiter.cancel()
        await task

    asyncio.run(main())
