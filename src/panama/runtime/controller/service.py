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

Lifecycle of a job: the pure state machine :mod:`panama.core.jobs` (its table is the
rule); this service fires its inputs. Ranks register (a barrier: each ``register`` call
waits until all ``world_size`` ranks are in, or ``wait_s`` passes). A registration is
provisional until admission: a rank whose register call hung up is dropped, and a rank
that registers again with a new ``incarnation`` replaces its stale self. The controller
admits the job (one admission at a time), gives it a random data-plane key, installs
it on every daemon of its trees (all or nothing) and answers every rank with its trees,
key and first-hop daemon (and, with ``multicast_results``, the loopback group its leaf
sends results to: :func:`panama.runtime.controller.jobs.allocate_groups`). Ranks
heart-beat; the job is torn down (removed from the daemons, released in the controller)
when every rank has left (``completed``), when a rank leaves after an error, misses
heartbeats for ``heartbeat_timeout_s``, or a daemon of its trees is down or no longer
holds the job (``failed``), or on ``DELETE /v1/jobs/{job}``. Ended jobs are kept in a
short history so late heartbeats learn why.

Crash safety: running jobs are written to a state file (``state_file``, mode 0600) on
every change; a restarted controller takes back those that every daemon of their trees
still holds, and removes from the daemons every job nobody owns. A controller that
stops leaves running jobs installed (their ranks' heartbeats fail until it is back).

All state lives in one asyncio loop; the core Controller is made once, before the
service accepts requests (:meth:`ControllerService.start`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web

from panama.core.controller import (
    Controller,
    ControllerError,
    install,
    uninstall,
)
from panama.core.jobs import JobInput, JobState
from panama.core.plans import JobPlan
from panama.core.topology import natural_key
from panama.runtime.control.admission import KEEPALIVE_TIMEOUT_S, Admission, start_site
from panama.runtime.control.client import AsyncClient, HttpError, error_text
from panama.runtime.control.messages import (
    ControllerHealth,
    FirstHop,
    HeartbeatReply,
    InstallBody,
    InstalledJobs,
    InstallReply,
    JobDetail,
    JobsReply,
    JobSummary,
    JobSwitch,
    LeaveReply,
    MonitorFacts,
    MulticastOffBody,
    MulticastOffReply,
    ProgressBody,
    RankBody,
    RegisterBody,
    RegisterReply,
    ResultsGroup,
    StateFileFacts,
    SwitchesReply,
    SwitchHealth,
    SwitchStats,
    SwitchView,
    TreeInfo,
    UnicastBody,
    UnicastReply,
)
from panama.runtime.control.server import BadRequest
from panama.runtime.controller.api import ControllerHttp
from panama.runtime.controller.cluster_file import ClusterFileError, ClusterSpec, SwitchInfo, load_cluster, spread_hosts
from panama.runtime.controller.jobs import (
    Job,
    Rank,
    _Recorder,
    allocate_groups,
    install_levels,
    join_failed,
    plan_from_dict,
)
from panama.runtime.files import write_private_file
from panama.runtime.net.udp import Address, AddressError, format_addr, parse_addr
from panama.runtime.process import write_ready_file
from panama.runtime.settings import ControllerConfig, ControllerOptions, ControllerProcess

log = logging.getLogger("panama.controller")
PROBE_TIMEOUTS_DOWN = 3  # consecutive /health timeouts before a daemon counts as down
HISTORY = 200

__all__ = [
    "ClusterFileError",
    "ControllerService",
    "load_cluster",
    "plan_from_dict",
    "run_controller",
    "serve",
    "spread_hosts",
]


class ControllerService:
    """The controller's HTTP service (see docs/runtime.md for the API).

    One core :class:`Controller` is created by :meth:`start`, before the service accepts
    requests; admissions (plan + install on the daemons) run one at a time under
    ``_admission``; the monitor task never dies (an error in one pass is logged and
    counted) and ``/v1/health`` reports it (503 when it is stalled or dead). Its HTTP API
    (:class:`~panama.runtime.controller.api.ControllerHttp`) is built from it and calls
    the public methods below.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        options: ControllerOptions | None = None,
        *,
        token: str | None = None,
        probe_interval_s: float = 1.0,
        switch_timeout_s: float = 2.0,
        default_packet_memory: int = 4096,
    ):
        """``cluster``: the loaded cluster file; ``options``: the service's settings (a
        :class:`ControllerConfig` is one; default: every default of the model, declared there
        once). ``token``: the bearer token of the API (None: no authentication, tests);
        the rest are timings of the daemon probes and a fallback slot count for daemons
        that report none."""
        options = options if options is not None else ControllerOptions()
        self.options = options
        self.cluster = cluster
        self.topology = cluster.topology
        self.switches = cluster.switches
        self.threshold_bytes = options.threshold_bytes
        self.max_jobs_per_switch = options.max_jobs_per_switch
        self.default_trees = options.trees or max(1, len(self.topology.spines) or len(self.topology.cores) or 1)
        self.heartbeat_timeout_s = options.heartbeat_timeout_s
        self.probe_interval_s = probe_interval_s
        self.switch_timeout_s = switch_timeout_s
        self.token = token
        self.state_file = options.state_file
        self.startup_wait_s = options.startup_wait_s
        self.default_packet_memory = default_packet_memory
        self.multicast_results = options.multicast_results
        self.controller: Controller | None = None  # exactly one, made by start()
        self.state_error: str | None = None  # why the last state file write failed (health: degraded)
        self.controllers_created = 0
        self.jobs: dict[str, Job] = {}
        self.history: OrderedDict[int, Job] = OrderedDict()
        self.hosts_in_order = spread_hosts(self.topology)
        self.counters = {
            "admitted": 0,
            "refused": 0,
            "completed": 0,
            "failed": 0,
            "recovered": 0,
            "bad_requests": 0,
            "unauthorized": 0,
            "internal_errors": 0,
            "monitor_errors": 0,
            "monitor_restarts": 0,
            "replaced_ranks": 0,
            "dropped_registrations": 0,
            "orphans_removed": 0,
        }
        self.monitor_last_error: str | None = None
        self.monitor_tick: float | None = None
        self.switch_jobs: dict[str, set[int] | None] = {}  # job ids each daemon reported at its last probe
        self.switch_jobs_asked: dict[str, float] = {}  # when that probe was sent
        self._admission = asyncio.Lock()
        self.daemons = AsyncClient(token, switch_timeout_s)  # requests to the switch daemons
        self.admission = Admission()  # who may hold a connection to the API
        self.address: Address | None = None  # where it listens, once serving
        self._monitor_task: asyncio.Task | None = None
        self.started = time.monotonic()

    # ------------------------------------------------------------------ daemons
    def _what(self, sw: SwitchInfo) -> str:
        return f"switch {sw.name} (control {format_addr(sw.control)})"

    async def probe(self, sw: SwitchInfo) -> bool:
        """Ask one daemon for ``/health``; update ``up``/``error``/memory facts and the jobs it holds."""
        asked = time.monotonic()
        try:
            status, data = await self.daemons.request(sw.control, "GET", "/health")
            if status == 503:
                unwell = SwitchHealth.parse(data).data_plane if isinstance(data, dict) else None
                last = unwell.last_error if unwell is not None else None
                raise HttpError(f"data plane down (last error: {last or 'none recorded'})", status)
            health = SwitchHealth.parse(data) if status == 200 and isinstance(data, dict) else None
            if health is None:
                raise HttpError(f"/health answered HTTP {status}", status)
        except (HttpError, ValueError) as exc:  # ValueError: a /health that does not fit SwitchHealth
            # A refused connection means the daemon is gone; a slow answer may only mean a
            # busy CPU, so it takes PROBE_TIMEOUTS_DOWN consecutive timeouts.
            timed_out = isinstance(exc, HttpError) and exc.timed_out
            sw.timeouts = sw.timeouts + 1 if timed_out else PROBE_TIMEOUTS_DOWN
            if sw.timeouts < PROBE_TIMEOUTS_DOWN:
                return sw.up
            if sw.up:
                log.warning(
                    "switch %s (control %s) is not answering: %s",
                    sw.name,
                    format_addr(sw.control),
                    exc or type(exc).__name__,
                )
            sw.up = False
            sw.error = str(exc) or type(exc).__name__
            self.switch_jobs[sw.name] = None
            return False
        sw.timeouts = 0
        if health.udp != format_addr(sw.udp):
            sw.up = False
            sw.error = f"daemon reports udp {health.udp}, cluster file says {format_addr(sw.udp)}"
            return False
        if not sw.up:
            log.info("switch %s is back", sw.name)
        sw.up = True
        sw.error = ""
        sw.payload_elems = _positive(health.payload_elems)
        sw.packet_memory = _positive(health.packet_memory)
        self.switch_jobs[sw.name] = set(health.jobs)
        self.switch_jobs_asked[sw.name] = asked
        return True

    async def probe_all(self, names: list[str] | None = None) -> None:
        targets = [self.switches[n] for n in (names if names is not None else list(self.switches))]
        await asyncio.gather(*(self.probe(sw) for sw in targets))

    async def _daemon_jobs(self, sw: SwitchInfo) -> dict[int, list] | None:
        try:
            installed = await self.daemons.call(sw.control, "GET", "/jobs", None, InstalledJobs, self._what(sw))
        except HttpError:
            return None
        try:
            return {int(j): t for j, t in installed.jobs.items()}
        except ValueError:
            return None

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        """Before serving: wait (bounded) for the daemons, make the one core Controller,
        take back the running jobs of a previous controller and free what nobody owns."""
        await self.daemons.open()
        deadline = time.monotonic() + self.startup_wait_s
        while True:
            await self.probe_all()
            down = [s.name for s in self.switches.values() if not s.up]
            if not down or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        if down:
            log.warning(
                "switch daemons not answering at start-up: %s (jobs on them will fail until they are up)",
                ", ".join(down),
            )
        memories = [s.packet_memory for s in self.switches.values() if s.packet_memory]
        self.controller = Controller(
            self.topology,
            threshold_bytes=self.threshold_bytes,
            max_jobs_per_switch=self.max_jobs_per_switch,
            packet_memory=min(memories) if memories else self.default_packet_memory,
        )
        self.controllers_created += 1
        await self._recover()
        self._monitor_task = asyncio.create_task(self._monitor())

    async def _recover(self) -> None:
        """Running jobs of the state file that every daemon of their trees still holds run on;
        any other job on a daemon is removed (nobody owns it)."""
        saved: list[dict] = []
        if self.state_file is not None and self.state_file.exists():
            try:
                saved = json.loads(self.state_file.read_text()).get("jobs", [])
            except (OSError, ValueError, AttributeError) as exc:
                log.warning("state file %s unreadable (%s): recovering nothing", self.state_file, exc)
        held = dict(zip(self.switches, await asyncio.gather(*(self._daemon_jobs(sw) for sw in self.switches.values()))))
        kept: set[tuple[str, int]] = set()
        now = time.monotonic()
        for entry in saved:
            try:
                plan = plan_from_dict(entry["plan"])
                missing = [s for s in plan.switches if held.get(s) is None or plan.job_id not in held[s]]
                if missing:
                    log.warning(
                        "job %s (job_id %d) not recovered: switch(es) %s no longer hold it",
                        plan.name,
                        plan.job_id,
                        ", ".join(missing),
                    )
                    continue
                assert self.controller is not None
                self.controller.restore(plan)
            except (KeyError, TypeError, ValueError, ControllerError) as exc:
                log.warning(
                    "state file entry %r not recovered: %s",
                    entry.get("name") if isinstance(entry, dict) else entry,
                    exc,
                )
                continue
            job = Job(plan.name, int(entry["world_size"]), now)
            job.plan, job.job_id, job.key = plan, plan.job_id, int(entry["key"], 16)
            job.payload_for_job, job.size_bytes, job.trees = (
                entry["payload_elems"],
                entry["size_bytes"],
                entry.get("trees"),
            )
            for r in entry["ranks"]:
                job.ranks[int(r["rank"])] = Rank(
                    int(r["rank"]), parse_addr(r["udp"]), r["host"], now, r.get("incarnation"), bool(r.get("left"))
                )
            job.groups = dict(entry.get("groups") or {})
            job.recovered = True
            job.installed_at = time.monotonic()
            self._fire(job, JobInput.RECOVERED, f"recovered after a controller restart: {plan.reason}")
            job.ready.set()
            self.jobs[job.name] = job
            self.counters["recovered"] += 1
            kept.update((s, plan.job_id) for s in plan.switches)
            log.info(
                "job %s (job_id %d) recovered: still installed on %s", plan.name, plan.job_id, ", ".join(plan.switches)
            )
        for name, jobs in held.items():
            for job_id in jobs or ():
                if (name, job_id) not in kept:
                    log.warning("switch %s: removing job %d that no running job owns", name, job_id)
                    self.counters["orphans_removed"] += 1
                    await self._delete_on(name, job_id)
        self._save_state()

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        running = [j.to_state() for j in self.jobs.values() if j.life.state is JobState.RUNNING]
        try:  # a full or unwritable disk leaves the previous file whole (write_private_file)
            write_private_file(self.state_file, json.dumps({"version": 1, "jobs": running}, indent=1))
        except OSError as exc:  # the service goes on, /v1/health says "degraded"; a restart recovers less
            self.state_error = f"cannot write state file {self.state_file}: {exc.strerror or exc}"
            log.error("%s (kept its previous content)", self.state_error)
        else:
            if self.state_error is not None:
                log.warning("state file %s written again", self.state_file)
            self.state_error = None

    # ------------------------------------------------------------------ job lifecycle
    def _fire(self, job: Job, event: JobInput, reason: str) -> None:
        job.life.fire(event)
        job.reason = reason
        if job.life.final:
            self._end(job)

    async def _admit(self, job: Job) -> None:
        """All ranks are in: plan, install on the daemons, and wake every waiting rank (one admission at a time)."""
        async with self._admission:
            try:
                await self._admit_locked(job)
            finally:
                job.ready.set()

    async def _admit_locked(self, job: Job) -> None:
        ctl = self.controller
        assert ctl is not None
        if job.life.state is not JobState.REGISTERING or len(job.ranks) != job.world_size:
            return  # a rank was dropped meanwhile, or another admission of it ran
        # Provisional registrations: a rank whose register call hung up is not admitted.
        gone = [x for x in job.ranks.values() if x.gone()]
        if gone:
            for x in gone:
                self._drop_rank(job, x, "its register call hung up before the job was admitted")
            return
        self._fire(job, JobInput.ALL_IN, "installing")
        hosts = [job.ranks[r].host for r in range(job.world_size)]
        try:
            plan = ctl.admit(job.name, hosts, job.size_bytes, job.trees or self.default_trees)
        except ControllerError as exc:
            self._fire(job, JobInput.INSTALL_FAILED, f"controller rejected the job: {exc}")
            return
        job.plan = plan
        job.job_id = plan.job_id
        if not plan.admitted:
            ctl.release(job.name)
            self._fire(job, JobInput.REFUSED, plan.reason)
            return
        recorders, joins = await self._layout(job, plan)
        done: list[str] = []
        errors: list[str] = []
        # Daemons that join a parent's group are installed before that parent (the parent
        # multicasts only to members that all joined); each level is one round.
        for level in install_levels(job.groups, joins, plan.switches):
            await asyncio.gather(*(self._put_job(job, s, recorders[s].trees, joins, done, errors) for s in level))
            if errors:
                break
        job.joins = joins
        if errors:
            await asyncio.gather(*(self._delete_on(s, plan.job_id) for s in done))
            ctl.release(job.name)
            self._fire(job, JobInput.INSTALL_FAILED, "install failed: " + "; ".join(errors))
            return
        now = time.monotonic()
        job.installed_at = now
        for x in job.ranks.values():
            x.last_seen = now
            x.request = None
        self._fire(job, JobInput.INSTALLED, plan.reason)
        self.counters["admitted"] += 1
        self._save_state()
        log.info("job %s admitted as job_id %d on %s: %s", job.name, plan.job_id, ", ".join(plan.switches), plan.reason)

    async def _layout(self, job: Job, plan: JobPlan) -> tuple[dict[str, _Recorder], dict[str, list]]:
        """What each daemon of an admitted ``plan`` installs: the job's payload size and key,
        each switch's trees (recorded from the core's ``install``) and the loopback groups
        (``job.groups``; returned: the groups each daemon joins)."""
        down = [self.switches[s] for s in plan.switches if not self.switches[s].up]
        if down:
            await self.probe_all([s.name for s in down])
        # Payload size: the smallest of what ranks asked for and what the daemons hold.
        limits = [self.switches[s].payload_elems or 0 for s in plan.switches]
        known = [x for x in limits if x]
        if job.payload_elems is not None:
            known.append(job.payload_elems)
        job.payload_for_job = min(known) if known else 1
        job.key = secrets.randbits(64) | 1  # the job's data-plane key (never 0, "no key")
        to_addr = {s: format_addr(info.udp) for s, info in self.switches.items()}
        to_addr.update({x.host: format_addr(x.udp) for x in job.ranks.values()})
        recorders = {s: _Recorder(s, to_addr) for s in plan.switches}
        install(plan, recorders)
        job.groups, job.group_reasons, joins = allocate_groups(
            job, recorders, {s: self.switches[s].udp for s in plan.switches}, self.jobs.values(), self.multicast_results
        )
        return recorders, joins

    async def _put_job(
        self, job: Job, name: str, trees: list, joins: dict[str, list], done: list[str], errors: list[str]
    ) -> None:
        """``PUT /jobs/{job_id}`` on daemon ``name``: appends it to ``done``, or why not to
        ``errors``; a daemon that cannot multicast or join drops the job's group there."""
        sw = self.switches[name]
        job_id = job.job_id
        body = InstallBody.parse(
            {
                "trees": trees,
                "key": f"{job.key:016x}",
                **({"multicast": job.groups[name]} if name in job.groups else {}),
                **({"join": joins[name]} if joins.get(name) else {}),
            }
        )
        try:
            installed = await self.daemons.call(sw.control, "PUT", f"/jobs/{job_id}", body, InstallReply, name)
        except HttpError as exc:
            if exc.status is None:
                errors.append(f"switch {name} (control {format_addr(sw.control)}) unreachable: {exc}")
                sw.up, sw.error = False, str(exc)
            else:
                errors.append(f"switch {name} refused job {job_id}: HTTP {exc.status} {error_text(exc.body)}")
            return
        done.append(name)
        path = installed.multicast
        if name in job.groups and path != "multicast":  # the daemon cannot: its workers need not join
            job.drop_group(name, f"daemon {name} sends results by unicast ({path})")
        if joins.get(name):
            joined = installed.join
            if joined is None or not joined.joined:
                why = joined.reason if joined is not None else "no join in its reply"
                join_failed(job, name, joins, str(why))
                log.warning(
                    "job %s: %s did not join its parents' groups (%s): they send it unicast", job.name, name, why
                )

    def _drop_rank(self, job: Job, x: Rank, why: str) -> None:
        """Forget a provisional registration (the job keeps waiting for that rank)."""
        if job.ranks.get(x.rank) is x:
            del job.ranks[x.rank]
            self.counters["dropped_registrations"] += 1
            log.warning("job %s: rank %d (udp %s) dropped: %s", job.name, x.rank, format_addr(x.udp), why)
        if not job.ranks and self.jobs.get(job.name) is job and job.life.state is JobState.REGISTERING:
            self._fire(job, JobInput.ABANDONED, f"every registered rank gave up: {why}")

    async def _delete_on(self, name: str, job_id: int) -> None:
        sw = self.switches[name]
        try:
            status, data = await self.daemons.request(sw.control, "DELETE", f"/jobs/{job_id}")
            if status not in (200, 404):
                log.warning("switch %s: removing job %d answered HTTP %d %s", name, job_id, status, data)
        except HttpError as exc:
            log.warning("switch %s: could not remove job %d: %s", name, job_id, exc)

    def _end(self, job: Job) -> None:
        """``job`` reached a final state: move it to the history and wake its waiting ranks."""
        state = job.state
        job.ended = time.monotonic()
        if self.jobs.get(job.name) is job:
            del self.jobs[job.name]
        if job.job_id is not None:
            self.history[job.job_id] = job
            while len(self.history) > HISTORY:
                self.history.popitem(last=False)
        self.counters[state] = self.counters.get(state, 0) + 1
        log.log(
            logging.WARNING if state == "failed" else logging.INFO,
            "job %s (job_id %s) %s: %s",
            job.name,
            job.job_id,
            state,
            job.reason,
        )
        job.ready.set()

    async def teardown(self, job: Job, event: JobInput, reason: str) -> None:
        """End a running (or registering) job with ``event``: remove it from its daemons and the controller."""
        if job.life.final or not job.life.accepts(event):
            return
        was_running = job.life.state is JobState.RUNNING
        self._fire(job, event, reason)
        if was_running and job.plan is not None and self.controller is not None:
            async with self._admission:
                recorders = {s: _Recorder(s, {}) for s in job.plan.switches}
                uninstall(job.plan, recorders)
                await asyncio.gather(*(self._delete_on(s, job.plan.job_id) for s in recorders))
                if job.name in self.controller.plans and self.controller.plans[job.name] is job.plan:
                    self.controller.release(job.name)
            self._save_state()

    async def _monitor(self) -> None:
        """Heartbeat deadlines, provisional registrations, and daemon health of running jobs. Never dies."""
        next_probe = 0.0
        while True:
            await asyncio.sleep(min(0.25, self.heartbeat_timeout_s / 4))
            try:
                next_probe = await self._monitor_pass(next_probe)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug in one pass must not end monitoring
                self.counters["monitor_errors"] += 1
                self.monitor_last_error = f"{type(exc).__name__}: {exc}"
                if self.counters["monitor_errors"] <= 10:
                    log.exception("monitor pass failed (monitoring goes on)")
                else:
                    log.error("monitor pass failed (monitoring goes on): %s", self.monitor_last_error)
            self.monitor_tick = time.monotonic()

    async def _monitor_pass(self, next_probe: float) -> float:
        now = time.monotonic()
        for job in list(self.jobs.values()):
            if job.life.state is JobState.REGISTERING:
                for x in list(job.ranks.values()):
                    if x.gone():
                        self._drop_rank(job, x, "its register call hung up")
                continue
            if job.life.state is not JobState.RUNNING:
                continue
            stale = [x for x in job.ranks.values() if not x.left and now - x.last_seen > self.heartbeat_timeout_s]
            if stale:
                x = stale[0]
                await self.teardown(
                    job,
                    JobInput.RANK_LOST,
                    f"rank {x.rank} (udp {format_addr(x.udp)}) stopped heart-beating "
                    f"({now - x.last_seen:.1f} s > heartbeat_timeout_s {self.heartbeat_timeout_s:g})",
                )
        if now >= next_probe:
            next_probe = now + self.probe_interval_s
            used = sorted(
                {s for j in self.jobs.values() if j.life.state is JobState.RUNNING and j.plan for s in j.plan.switches}
            )
            if used:
                await self.probe_all(used)
            for job in list(self.jobs.values()):
                if job.life.state is not JobState.RUNNING or job.plan is None:
                    continue
                for s in job.plan.switches:
                    sw = self.switches[s]
                    held = self.switch_jobs.get(s)
                    fresh = self.switch_jobs_asked.get(s, 0.0) > job.installed_at  # asked after the install
                    if not sw.up:
                        why = f"is down: {sw.error}"
                    elif held is not None and fresh and job.job_id not in held:
                        why = (
                            f"lost job {job.job_id} (no longer installed there: removed outside the controller or "
                            f"the daemon restarted)"
                        )
                    else:
                        continue
                    await self.teardown(
                        job,
                        JobInput.SWITCH_LOST,
                        f"switch {sw.name} (udp {format_addr(sw.udp)}, control {format_addr(sw.control)}) {why}",
                    )
                    break
        return next_probe

    def monitor_health(self) -> tuple[bool, MonitorFacts]:
        """Whether the monitor runs and ticks (restarting it if its task ended), with facts."""
        task = self._monitor_task
        if task is not None and task.done() and not task.cancelled():
            self.counters["monitor_restarts"] += 1
            log.error(
                "monitor task ended (%s): restarting it", task.exception() if not task.cancelled() else "cancelled"
            )
            self._monitor_task = task = asyncio.create_task(self._monitor())
        age = None if self.monitor_tick is None else time.monotonic() - self.monitor_tick
        limit = max(10.0, 20 * min(0.25, self.heartbeat_timeout_s / 4))
        ok = (
            task is not None
            and not task.done()
            and (age is None and time.monotonic() - self.started < limit or age is not None and age < limit)
        )
        return ok, MonitorFacts(
            alive=task is not None and not task.done(),
            last_pass_age_s=None if age is None else round(age, 3),
            errors=self.counters["monitor_errors"],
            restarts=self.counters["monitor_restarts"],
            last_error=self.monitor_last_error,
        )

    # ------------------------------------------------------------------ requests (the API calls these)
    async def shutdown(self) -> None:
        """Stop monitoring; running jobs stay installed (a restarted controller recovers them)."""
        if self._monitor_task is not None:
            self._monitor_task.cancel()
        for job in list(self.jobs.values()):
            if job.life.state is JobState.REGISTERING:
                job.ready.set()
        self._save_state()
        await self.daemons.close()

    def health(self) -> tuple[bool, ControllerHealth]:
        """``GET /v1/health``: whether the service is healthy (the monitor ticks), and its facts."""
        ok, monitor = self.monitor_health()
        return ok, ControllerHealth(
            # degraded: serving, but a failed state file write means a restart would lose jobs
            status=("degraded" if self.state_error else "ok") if ok else "monitor not running",
            state_file=StateFileFacts(path=str(self.state_file) if self.state_file else None, error=self.state_error),
            connections=dict(self.admission.counters),  # closed (pending, idle) or refused by admission
            monitor=monitor,
            topology=self.topology.name,
            hosts=len(self.topology.hosts),
            threshold_bytes=self.threshold_bytes,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            jobs=len(self.jobs),
            controllers_created=self.controllers_created,
            uptime_s=round(time.monotonic() - self.started, 3),
        )

    async def switches_view(self, probe: bool = False) -> SwitchesReply:
        """``GET /v1/switches``: every daemon as the controller knows it (``probe``: asked now)."""
        if probe:
            await self.probe_all()
        return SwitchesReply(switches=[SwitchView.model_validate(s.to_dict()) for s in self.switches.values()])

    def jobs_view(self) -> JobsReply:
        """``GET /v1/jobs``: live jobs and the last 20 ended ones."""
        return JobsReply(
            jobs=[JobSummary.model_validate(j.summary()) for j in self.jobs.values()],
            history=[JobSummary.model_validate(j.summary()) for j in list(self.history.values())[-20:]],
        )

    def find_job(self, name: str, job_id: int | None = None) -> Job | None:
        """The live job ``name`` (of ``job_id`` when given), else the latest ended one of that name."""
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

    async def job_detail(self, name: str, probe: bool = False) -> JobDetail:
        """``GET /v1/jobs/{job}``: the job's summary, stale ranks, and its daemons (``probe``:
        asked now, with their counters for the job); 404 when unknown."""
        job = self.find_job(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        out = job.summary()
        now = time.monotonic()
        out["stale_ranks"] = sorted(
            x.rank
            for x in job.ranks.values()
            if not x.left and job.state == "running" and now - x.last_seen > self.heartbeat_timeout_s / 2
        )
        if job.plan is not None and job.plan.admitted:
            if probe:
                await self.probe_all(job.plan.switches)
            switches: dict[str, JobSwitch] = {}
            for s in job.plan.switches:
                sw = self.switches[s]
                info: dict[str, Any] = {"udp": format_addr(sw.udp), "up": sw.up, "error": sw.error}
                held = self.switch_jobs.get(s)
                if (
                    held is not None
                    and job.life.state is JobState.RUNNING
                    and self.switch_jobs_asked.get(s, 0.0) > job.installed_at
                ):
                    info["holds_job"] = job.job_id in held
                if probe and sw.up:
                    info.update(await self._job_counters(sw, job))
                switches[s] = JobSwitch.model_validate(info)
            out["switches"] = switches
        return JobDetail.model_validate(out)

    async def _job_counters(self, sw: SwitchInfo, job: Job) -> dict[str, Any]:
        """What a daemon's counters say about ``job``: drops by reason, its slots, send errors, data plane."""
        try:
            st = await self.daemons.call(sw.control, "GET", "/stats", None, SwitchStats, self._what(sw))
        except HttpError as exc:
            return {"stats_error": f"HTTP {exc.status}" if exc.status is not None else str(exc)}
        return {
            "drops": st.drops,
            "malformed": st.malformed,
            "occupancy": st.occupancy.get(str(job.job_id), 0),
            "share_exceeded": (st.accelerator.get("drops") or {}).get("share_exceeded", 0),
            "send_errors": st.send_errors,
            "data_plane": st.data_plane,
        }

    async def delete_job(self, name: str) -> JobSummary:
        """``DELETE /v1/jobs/{job}`` (operator): tear the job down; 404 unknown, 409 while it installs."""
        job = self.jobs.get(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        if not job.life.accepts(JobInput.DELETED):
            raise BadRequest(409, f"job: {name!r} is {job.state}; delete it once its admission has finished")
        await self.teardown(job, JobInput.DELETED, "deleted by an operator (DELETE /v1/jobs)")
        return JobSummary.model_validate(job.summary())

    async def register(self, name: str, reg: RegisterBody, connection: Any = None) -> RegisterReply:
        """``POST /v1/jobs/{job}/register``: rank ``reg.rank`` joins job ``name`` and waits
        (``reg.wait_s``) until the job is admitted, refused or failed. ``connection``: the
        waiting request (anything with a ``transport``): a registration whose client hung
        up is dropped before admission."""
        udp = self._check_register(reg)
        # Every check first; the job changes only once the request is accepted (a 409 changes nothing).
        job = self.jobs.get(name)
        if job is not None:
            self._check_joins(job, reg)
        else:
            job = Job(name, reg.world_size, time.monotonic())
            self.jobs[name] = job
        rank, incarnation = reg.rank, reg.incarnation
        other = job.ranks.get(rank)
        if other is not None:  # a stale registration of this rank: the new incarnation replaces it
            self.counters["replaced_ranks"] += 1
            job.ready.set()  # its waiting register call (if any) wakes up and answers 409 "replaced"
            log.warning(
                "job %s: rank %d re-registered from %s (incarnation %s) replaces %s (incarnation %s)",
                name, rank, format_addr(udp), incarnation, format_addr(other.udp), other.incarnation,
            )  # fmt: skip
        if reg.trees is not None:
            job.trees = reg.trees
        if reg.payload_elems is not None:
            payload = reg.payload_elems
            job.payload_elems = payload if job.payload_elems is None else min(job.payload_elems, payload)
        job.size_bytes = max(job.size_bytes, reg.size_bytes or 0)
        host = self.hosts_in_order[rank]
        mine = Rank(rank, udp, host, time.monotonic(), incarnation, request=connection, multicast=reg.multicast)
        job.ranks[rank] = mine
        log.info("job %s: rank %d/%d registered from %s", name, rank, reg.world_size, format_addr(udp))
        if len(job.ranks) == reg.world_size:
            await self._admit(job)
        await self._wait_admission(job, mine, reg.wait_s)  # returns at once once admitted or ended
        if job.ranks.get(rank) is not mine:
            raise BadRequest(409, f"rank: {rank} of {name!r} was replaced by a newer registration of the same rank")
        return self._register_reply(job, rank)

    def _check_register(self, reg: RegisterBody) -> Address:
        """What a register body's types cannot say (400): the rank below the world size, a
        world that fits the topology, the worker's address; returns that address."""
        if reg.rank >= reg.world_size:
            raise BadRequest(400, f"rank: {reg.rank} is not below world_size {reg.world_size}")
        if reg.world_size > len(self.hosts_in_order):
            raise BadRequest(
                400,
                f"world_size: {reg.world_size} workers do not fit the {len(self.hosts_in_order)} hosts of "
                f"{self.topology.name}",
            )
        try:
            return parse_addr(reg.udp, field="udp")
        except AddressError as exc:
            raise BadRequest(400, str(exc)) from None

    def _check_joins(self, job: Job, reg: RegisterBody) -> None:
        """A register for a job other ranks registered: it must agree with them (409 otherwise)."""
        name, rank = job.name, reg.rank
        if job.life.state is not JobState.REGISTERING:
            raise BadRequest(
                409,
                f"job: {name!r} is {job.state} (job_id {job.job_id}); register again after it ends "
                f"(a job whose ranks died ends within heartbeat_timeout_s={self.heartbeat_timeout_s:g})",
            )
        if job.world_size != reg.world_size:
            raise BadRequest(
                409, f"world_size: {reg.world_size} differs from {job.world_size} given by other ranks of {name!r}"
            )
        if reg.trees is not None and job.trees not in (None, reg.trees):
            raise BadRequest(409, f"trees: {reg.trees} differs from {job.trees} asked by other ranks of {name!r}")
        other = job.ranks.get(rank)
        if other is not None and not other.gone() and (reg.incarnation is None or other.incarnation == reg.incarnation):
            raise BadRequest(
                409,
                f"rank: {rank} of {name!r} is already registered (from udp {format_addr(other.udp)}); ranks must "
                f"be unique",
            )

    async def _wait_admission(self, job: Job, mine: Rank, wait_s: float) -> None:
        """Wait until the job leaves ``registering`` (admitted, refused, failed) or ``wait_s`` passes."""
        deadline = time.monotonic() + wait_s
        while job.ranks.get(mine.rank) is mine and job.life.state in (JobState.REGISTERING, JobState.INSTALLING):
            left = deadline - time.monotonic()
            if job.life.state is JobState.INSTALLING:
                left = max(left, 4 * self.switch_timeout_s)  # an admission under way is bounded by its PUTs
            elif left <= 0:
                break
            job.ready.clear()  # no await since the state was read: no wake-up is lost
            try:
                await asyncio.wait_for(job.ready.wait(), timeout=left)
            except asyncio.TimeoutError:
                if job.life.state is not JobState.INSTALLING:
                    break
        if job.life.state is JobState.REGISTERING and job.ranks.get(mine.rank) is mine:
            missing = sorted(set(range(job.world_size)) - set(job.ranks))
            registered = sorted(job.ranks)
            self._drop_rank(job, mine, f"no admission within wait_s={wait_s:g}")
            raise BadRequest(
                504,
                f"job {job.name!r}: ranks {missing} of world_size {job.world_size} did not register within "
                f"wait_s={wait_s:g} (registered: {registered})",
            )

    def _register_reply(self, job: Job, rank: int) -> RegisterReply:
        if job.life.state is JobState.REFUSED:
            return RegisterReply(job=job.name, job_id=job.job_id, admitted=False, reason=job.reason)
        if job.life.state is not JobState.RUNNING:
            raise BadRequest(503, f"job {job.name!r}: {job.state}: {job.reason}")
        plan = job.plan
        assert plan is not None
        host = job.ranks[rank].host
        leaf = self.topology.tor_of(host)
        group = job.groups.get(leaf)
        if group is not None and format_addr(job.ranks[rank].udp) in group["members"]:
            multicast = ResultsGroup(group=group["group"])
        else:
            multicast = ResultsGroup(group=None, reason=job.group_reasons.get(leaf, "no group for this rank's leaf"))
        return RegisterReply(
            job=job.name,
            job_id=plan.job_id,
            admitted=True,
            reason=plan.reason,
            warnings=list(plan.warnings),
            rank=rank,
            host=host,
            trees=[TreeInfo(tree_id=t.tree_id, root=t.root, group=t.group, cwnd_cap=t.cwnd_cap) for t in plan.trees],
            first_hop=FirstHop(switch=leaf, udp=format_addr(self.switches[leaf].udp)),
            payload_elems=job.payload_for_job,
            key=f"{job.key:016x}",
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            multicast=multicast,
        )

    def _registered_rank(self, name: str, body: RankBody) -> tuple[Job, Rank]:
        """The job and the rank a heartbeat, leave or unicast request names; 404 when either is unknown."""
        rank, job_id = body.rank, body.job_id
        job = self.find_job(name, job_id)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}" + (f" with job_id {job_id}" if job_id else ""))
        x = job.ranks.get(rank)
        if x is None:
            raise BadRequest(404, f"rank: {rank} is not registered in job {name!r}")
        return job, x

    async def heartbeat(self, name: str, body: ProgressBody) -> HeartbeatReply:
        """``POST /v1/jobs/{job}/heartbeat``: a rank is alive; its progress (``calls``; ``call``
        and ``elems`` during an allreduce) lets the controller name a size mismatch; the
        answer names the ranks that left cleanly (``left``: rank -> calls completed)."""
        job, x = self._registered_rank(name, body)
        self._progress(x, body)
        call, elems = body.call, body.elems
        if job.life.state is JobState.RUNNING:
            x.last_seen = time.monotonic()
            if call is not None and elems is not None:
                x.call = (call, elems)
            await self._check_sizes(job)
        left = {str(r.rank): r.calls for r in job.ranks.values() if r.left}
        return HeartbeatReply(state=job.state, reason=job.reason, job_id=job.job_id, left=left)

    async def leave(self, name: str, body: ProgressBody) -> LeaveReply:
        """``POST /v1/jobs/{job}/leave``: the rank is done (after an ``error``: the job fails)."""
        job, x = self._registered_rank(name, body)
        error = body.error
        self._progress(x, body)
        if job.life.state is JobState.RUNNING:
            await self._check_sizes(job)
        if job.life.state is JobState.RUNNING:
            x.left = True
            if not error and not all(r.left for r in job.ranks.values()):
                log.info("job %s: rank %d left cleanly after %s allreduce(s)", job.name, x.rank, x.calls)
            if error:
                x.error = error[:500]
                await self.teardown(job, JobInput.RANK_FAILED, f"rank {x.rank} left after an error: {x.error}")
            elif all(r.left for r in job.ranks.values()):
                await self.teardown(job, JobInput.ALL_LEFT, f"all {job.world_size} ranks left")
            else:
                self._save_state()
        return LeaveReply(state=job.state, reason=job.reason, job_id=job.job_id)

    @staticmethod
    def _progress(x: Rank, body: ProgressBody) -> None:
        """A heartbeat's or leave's ``calls`` and ``last`` (the size of the last completed call)."""
        if body.calls is not None:
            x.calls = body.calls
        if x.calls and body.last is not None:
            x.last = (x.calls - 1, body.last)

    async def _check_sizes(self, job: Job) -> None:
        """Fail the job when two ranks passed different sizes to the same allreduce."""
        seen: dict[int, tuple[int, int]] = {}  # call index -> (rank, elements)
        for r in sorted(job.ranks.values(), key=lambda r: r.rank):
            for index, elems in (c for c in (r.last, r.call) if c is not None):
                first = seen.setdefault(index, (r.rank, elems))
                if first[1] != elems:
                    why = (
                        f"size mismatch in allreduce #{index + 1}: rank {first[0]} passed {first[1]} floats, rank "
                        f"{r.rank} passed {elems} (every rank must pass the same size to each allreduce)"
                    )
                    log.warning("job %s: %s", job.name, why)
                    await self.teardown(job, JobInput.RANK_FAILED, why)
                    return

    async def unicast(self, name: str, body: UnicastBody) -> UnicastReply:
        """``POST /v1/jobs/{job}/unicast``: a rank could not join its leaf's results group
        after all (its probe passed): the leaf daemon sends that job's results to each child
        from now on (``DELETE /jobs/{job_id}/multicast``), so the rank gets them on its own
        socket, not only as answers to its retransmissions."""
        job, x = self._registered_rank(name, body)
        reason = body.reason
        if reason is None:
            raise BadRequest(400, "reason: required (a string of 1-300 characters)")
        if job.life.state is not JobState.RUNNING or job.job_id is None:
            raise BadRequest(409, f"job {job.name!r}: {job.state}: {job.reason}")
        leaf = self.topology.tor_of(x.host)
        group = job.groups.get(leaf)
        if group is None or format_addr(x.udp) not in group["members"]:
            return UnicastReply(switch=leaf, results_path="unicast")
        why = f"rank {x.rank} could not join {group['group']}: {reason}"
        sw = self.switches[leaf]
        try:
            await self.daemons.call(
                sw.control,
                "DELETE",
                f"/jobs/{job.job_id}/multicast",
                MulticastOffBody(reason=why),
                MulticastOffReply,
                leaf,
            )
        except HttpError as exc:
            if exc.status is None:
                raise BadRequest(502, f"switch {leaf} unreachable: {exc}") from None
            raise BadRequest(
                502, f"switch {leaf} refused to stop multicast: HTTP {exc.status} {error_text(exc.body)}"
            ) from None
        job.drop_group(leaf, why)
        self._save_state()
        log.warning("job %s: %s sends results by unicast: %s", job.name, leaf, why)
        return UnicastReply(switch=leaf, results_path="unicast")

    def metrics_text(self) -> str:
        """``GET /metrics``: job counters, the monitor and every daemon's liveness (Prometheus text 0.0.4)."""
        lines = []
        for key, value in self.counters.items():
            lines += [
                f"# TYPE panama_controller_jobs_{key}_total counter",
                f"panama_controller_jobs_{key}_total {value}",
            ]
        lines += ["# TYPE panama_controller_jobs_live gauge", f"panama_controller_jobs_live {len(self.jobs)}"]
        ok, _ = self.monitor_health()
        lines += ["# TYPE panama_controller_monitor_up gauge", f"panama_controller_monitor_up {int(ok)}"]
        lines.append("# TYPE panama_controller_switch_up gauge")
        for s in sorted(self.switches.values(), key=lambda s: natural_key(s.name)):
            lines.append(f'panama_controller_switch_up{{switch="{s.name}"}} {int(s.up)}')
        return "\n".join(lines) + "\n"


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def serve(
    service: ControllerService, listen: Address, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None
) -> None:
    """Run the service until ``stop`` is set."""
    app = ControllerHttp(service).make_app()
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT_S, shutdown_timeout=2.0)
    await runner.setup()  # on_startup: daemons probed, the one Controller made, jobs recovered
    try:
        server, watchdog = await start_site(runner, listen[0], listen[1], service.admission)
    except BaseException:  # e.g. the port is taken: close what on_startup opened, then report
        await runner.cleanup()
        raise
    service.address = tuple(server.sockets[0].getsockname()[:2])
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
        watchdog.cancel()
        server.close()
        await runner.cleanup()


def run_controller(service: ControllerService, listen: Address, ready_file: str | None = None) -> None:
    """Serve in the foreground until SIGTERM/SIGINT; write ``{"listen", "pid"}`` to ``ready_file``."""
    import os
    import signal

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


def service_from_config(config: ControllerConfig, token: str) -> ControllerService:
    """The service a :class:`ControllerConfig` describes (its cluster file read and checked)."""
    return ControllerService(load_cluster(config.cluster_file), config, token=token)


def run_controller_process(settings: ControllerProcess, token: str) -> None:
    """Run the controller a :class:`ControllerProcess` file describes (``panama controller serve`` and ``-m``)."""
    service = service_from_config(settings.controller, token)
    run_controller(service, settings.controller.listen, str(settings.ready_file) if settings.ready_file else None)


if __name__ == "__main__":  # python -m panama.runtime.controller.service CONFIG.json (LocalCluster uses it)
    import sys

    from panama.runtime.process import main_from_file

    sys.exit(
        main_from_file(sys.argv[1:], ControllerProcess, run_controller_process, "panama.runtime.controller.service")
    )
