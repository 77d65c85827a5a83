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
every change, and a failed write is retried until it succeeds
(:mod:`panama.runtime.controller.state_file`); a restarted controller takes back those
that every daemon of their trees still holds, and removes from the daemons every job
nobody owns. A controller that stops leaves running jobs installed (their ranks'
heartbeats fail until it is back).

All state lives in one asyncio loop; the core Controller is made once, before the
service accepts requests (:meth:`ControllerService.start`).
"""

from __future__ import annotations

import asyncio
import hashlib
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
from panama.runtime.control.client import HttpError, error_text
from panama.runtime.control.messages import (
    ControllerHealth,
    InstallBody,
    JobDetail,
    JobsReply,
    JobSummary,
    JobSwitch,
    StateFileFacts,
    SwitchesReply,
    SwitchView,
)
from panama.runtime.control.server import OPERATOR, BadRequest, Credential
from panama.runtime.controller.api import ControllerHttp
from panama.runtime.controller.cluster_file import ClusterFileError, ClusterSpec, load_cluster, spread_hosts
from panama.runtime.controller.daemons import Daemons
from panama.runtime.controller.jobs import (
    Job,
    Rank,
    _Recorder,
    allocate_groups,
    install_levels,
    join_failed,
    plan_from_dict,
)
from panama.runtime.controller.monitor import Monitor
from panama.runtime.controller.rank_requests import RankRequests
from panama.runtime.controller.state_file import SavedJob, StateFile
from panama.runtime.net.udp import Address, format_addr
from panama.runtime.process import write_ready_file
from panama.runtime.settings import ControllerConfig, ControllerOptions, ControllerProcess

log = logging.getLogger("panama.controller")
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
        self.state = StateFile(options.state_file, time.monotonic) if options.state_file is not None else None
        self.controllers_created = 0
        self.jobs: dict[str, Job] = {}
        self.tokens: dict[bytes, dict[int, Job]] = {}  # token digest -> the live or recent jobs holding it
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
        self._admission = asyncio.Lock()
        self.daemons = Daemons(self.switches, token, switch_timeout_s)  # the switch daemons, and requests to them
        self.ranks = RankRequests(self, self._admit, self._drop_rank, self._save_state)  # what ranks ask
        self.admission = Admission()  # who may hold a connection to the API
        self.address: Address | None = None  # where it listens, once serving
        self.monitor = Monitor(self, self._drop_rank)  # heartbeat deadlines, daemon health
        self.started = time.monotonic()

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        """Before serving: wait (bounded) for the daemons, make the one core Controller,
        take back the running jobs of a previous controller and free what nobody owns."""
        saved = self.state.load() if self.state is not None else []  # StateFileError (one line): not started
        await self.daemons.open()
        deadline = time.monotonic() + self.startup_wait_s
        while True:
            await self.daemons.probe_all()
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
        await self._recover(saved)
        self.monitor.start()

    async def _recover(self, saved: list[SavedJob]) -> None:
        """Running jobs of the state file that every daemon of their trees still holds run on;
        any other job on a daemon is removed (nobody owns it)."""
        found = await asyncio.gather(*(self.daemons.installed_jobs(sw) for sw in self.switches.values()))
        held = dict(zip(self.switches, found))
        kept: set[tuple[str, int]] = set()
        now = time.monotonic()
        for entry in saved:
            plan = entry.job_plan()
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
            try:
                self.controller.restore(plan)
            except (ControllerError, KeyError, ValueError, TypeError) as exc:  # e.g. a host not in the topology
                log.warning("state file %s: job %r not recovered: %s", self.state_file, entry.name, exc)
                continue
            job = Job(plan.name, entry.world_size, now, run=entry.run)
            job.token = entry.token  # a state file of an older controller has none
            self.remember_token(job)
            job.plan, job.job_id, job.key = plan, plan.job_id, int(entry.key, 16)
            job.payload_for_job, job.size_bytes, job.trees = entry.payload_elems, entry.size_bytes, entry.trees
            for r in entry.ranks:
                job.ranks[r.rank] = Rank(r.rank, r.address, r.host, now, r.incarnation, r.left)
            job.groups = dict(entry.groups)
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
                    await self.daemons.remove(name, job_id)
        self._save_state()

    @property
    def state_error(self) -> str | None:
        """Why the last state file write failed (``/v1/health``: degraded until a retry succeeds)."""
        return self.state.error if self.state is not None else None

    def _save_state(self) -> None:
        if self.state is not None:  # a failed write stays pending: the monitor retries it
            self.state.save([j.to_state() for j in self.jobs.values() if j.life.state is JobState.RUNNING])

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
            await asyncio.gather(*(self.daemons.remove(s, plan.job_id) for s in done))
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
            await self.daemons.probe_all([s.name for s in down])
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
            installed = await self.daemons.install(name, job_id, body)
        except HttpError as exc:
            if exc.status is None:
                what = f"timed out after {self.switch_timeout_s:g} s" if exc.timed_out else "unreachable"
                errors.append(f"switch {name} (control {format_addr(sw.control)}) {what}: {exc}")
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

    def _end(self, job: Job) -> None:
        """``job`` reached a final state: move it to the history and wake its waiting ranks."""
        state = job.state
        job.ended = time.monotonic()
        if self.jobs.get(job.name) is job:
            del self.jobs[job.name]
        if job.job_id is not None:
            self.history[job.job_id] = job
            while len(self.history) > HISTORY:
                self.forget_token(self.history.popitem(last=False)[1])
        else:
            self.forget_token(job)
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
                await asyncio.gather(*(self.daemons.remove(s, job.plan.job_id) for s in recorders))
                if job.name in self.controller.plans and self.controller.plans[job.name] is job.plan:
                    self.controller.release(job.name)
            self._save_state()

    # ------------------------------------------------------------------ requests (the API calls these)
    async def shutdown(self) -> None:
        """Stop monitoring; running jobs stay installed (a restarted controller recovers them)."""
        self.monitor.cancel()
        for job in list(self.jobs.values()):
            if job.life.state is JobState.REGISTERING:
                job.ready.set()
        self._save_state()
        await self.daemons.close()

    def health(self) -> tuple[bool, ControllerHealth]:
        """``GET /v1/health``: whether the service is healthy (the monitor ticks), and its facts."""
        ok, monitor = self.monitor.health()
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
            await self.daemons.probe_all()
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

    def holds_token(self, token: str) -> bool:
        """Whether ``token`` is the token of a live or recently ended job (the API then
        accepts it as a bearer token; each request checks it is the right job's): one
        lookup of its digest, whatever the number of jobs (admission asks it for every
        connection that carries a bearer token)."""
        holders = self.tokens.get(_digest(token))
        return bool(holders) and next(iter(holders.values())).holds(token)

    def remember_token(self, job: Job) -> None:
        """Index ``job``'s token until the job leaves the history (:meth:`holds_token`)."""
        if job.token:
            self.tokens.setdefault(_digest(job.token), {})[id(job)] = job

    def forget_token(self, job: Job) -> None:
        holders = self.tokens.get(_digest(job.token)) if job.token else None
        if holders is not None:
            holders.pop(id(job), None)
            if not holders:
                del self.tokens[_digest(job.token)]

    async def job_detail(self, name: str, probe: bool = False, credential: Credential = OPERATOR) -> JobDetail:
        """``GET /v1/jobs/{job}``: the job's summary, stale ranks, and its daemons (``probe``:
        asked now, with their counters for the job); 404 when unknown; for operators and
        the job's own ranks (403 otherwise)."""
        job = self.find_job(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        if not credential.operator:
            self.ranks.check_holder(job, credential, "reading")
        out = job.summary()
        now = time.monotonic()
        out["stale_ranks"] = sorted(
            x.rank
            for x in job.ranks.values()
            if not x.left and job.state == "running" and now - x.last_seen > self.heartbeat_timeout_s / 2
        )
        if job.plan is not None and job.plan.admitted:
            if probe:
                await self.daemons.probe_all(job.plan.switches)
            switches: dict[str, JobSwitch] = {}
            for s in job.plan.switches:
                sw = self.switches[s]
                info: dict[str, Any] = {"udp": format_addr(sw.udp), "up": sw.up, "error": sw.error}
                held = self.daemons.held.get(s)
                if (
                    held is not None
                    and job.life.state is JobState.RUNNING
                    and self.daemons.asked.get(s, 0.0) > job.installed_at
                ):
                    info["holds_job"] = job.job_id in held
                if probe and sw.up:
                    info.update(await self.daemons.job_counters(sw, job.job_id))
                switches[s] = JobSwitch.model_validate(info)
            out["switches"] = switches
        return JobDetail.model_validate(out)

    async def delete_job(self, name: str, credential: Credential = OPERATOR, admin: bool = False) -> JobSummary:
        """Tear a live job down: ``DELETE /v1/jobs/{job}`` by its own run (its job token;
        the cluster token alone is refused, 403), or ``DELETE /v1/admin/jobs/{job}``
        (``admin``: an operator's, the API checks the cluster token). 404 unknown, 409
        while its admission runs."""
        job = self.jobs.get(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        if not admin and self.token is not None and not job.holds(credential.token):
            hint = "; an operator ends any job with DELETE /v1/admin/jobs/{job}" if credential.operator else ""
            raise BadRequest(403, f"job: deleting {name!r} needs its job token (the run's credential){hint}")
        if not job.life.accepts(JobInput.DELETED):
            raise BadRequest(409, f"job: {name!r} is {job.state}; delete it once its admission has finished")
        why = "deleted by an operator (DELETE /v1/admin/jobs)" if admin else "deleted by its run (DELETE /v1/jobs)"
        await self.teardown(job, JobInput.DELETED, why)
        return JobSummary.model_validate(job.summary())

    def metrics_text(self) -> str:
        """``GET /metrics``: job counters, the monitor and every daemon's liveness (Prometheus text 0.0.4)."""
        lines = []
        for key, value in self.counters.items():
            lines += [
                f"# TYPE panama_controller_jobs_{key}_total counter",
                f"panama_controller_jobs_{key}_total {value}",
            ]
        lines += ["# TYPE panama_controller_jobs_live gauge", f"panama_controller_jobs_live {len(self.jobs)}"]
        ok, _ = self.monitor.health()
        lines += ["# TYPE panama_controller_monitor_up gauge", f"panama_controller_monitor_up {int(ok)}"]
        lines.append("# TYPE panama_controller_switch_up gauge")
        for s in sorted(self.switches.values(), key=lambda s: natural_key(s.name)):
            lines.append(f'panama_controller_switch_up{{switch="{s.name}"}} {int(s.up)}')
        return "\n".join(lines) + "\n"


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


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


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
