"""The controller service's HTTP API (``/v1``): routes, handlers and request parsing.

:class:`ControllerHttp` is the request side of
:class:`panama.runtime.controller.service.ControllerService` (a mixin: the handlers read
and change the service's state in its one asyncio loop); the job lifecycle, daemon
probing and recovery live there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from panama.core.jobs import JobInput, JobState
from panama.core.topology import natural_key
from panama.runtime.bodies import ProgressBody, RankBody, RegisterBody, UnicastBody, read_body
from panama.runtime.controller.cluster_file import SwitchInfo
from panama.runtime.controller.jobs import Job, Rank
from panama.runtime.http import (
    ADMISSION_COUNTERS,
    JOB_NAME_RE,
    JOB_NAME_RULE,
    MAX_BODY_BYTES,
    BadRequest,
    auth_middleware,
    error_text,
    errors_middleware,
)
from panama.runtime.net.udp import Address, AddressError, format_addr, parse_addr

log = logging.getLogger("panama.controller")


API = "/v1"
R = TypeVar("R", bound=RankBody)


class ControllerHttp:
    """HTTP handlers of the controller service (see the module docstring)."""

    def make_app(self) -> web.Application:
        middlewares = [errors_middleware(self.counters, "controller")]
        if self.token is not None:
            middlewares.insert(0, auth_middleware(self.token, frozenset({f"{API}/health"}), self.counters))
        app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
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
                web.post(f"{API}/jobs/{{job}}/unicast", self.h_unicast),
                web.get("/metrics", self.h_metrics),
            ]
        )
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        if self.controller is None:
            await self.start()

    async def _on_cleanup(self, app: web.Application) -> None:
        """Stop monitoring; running jobs stay installed (a restarted controller recovers them)."""
        if self._monitor_task is not None:
            self._monitor_task.cancel()
        for job in list(self.jobs.values()):
            if job.life.state is JobState.REGISTERING:
                job.ready.set()
        self._save_state()
        if self._session is not None:
            await self._session.close()

    async def h_health(self, request: web.Request) -> web.Response:
        ok, monitor = self.monitor_health()
        return web.json_response(
            {
                # degraded: serving, but a failed state file write means a restart would lose jobs
                "status": ("degraded" if self.state_error else "ok") if ok else "monitor not running",
                "state_file": {"path": str(self.state_file) if self.state_file else None, "error": self.state_error},
                "connections": dict(ADMISSION_COUNTERS),  # closed (pending, idle) or refused by start_site
                "monitor": monitor,
                "topology": self.topology.name,
                "hosts": len(self.topology.hosts),
                "threshold_bytes": self.threshold_bytes,
                "heartbeat_timeout_s": self.heartbeat_timeout_s,
                "jobs": len(self.jobs),
                "controllers_created": self.controllers_created,
                "uptime_s": round(time.monotonic() - self.started, 3),
            },
            status=200 if ok else 503,
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
        name = _job_name(request)
        job = self._find(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        out = job.summary()
        now = time.monotonic()
        out["stale_ranks"] = sorted(
            x.rank
            for x in job.ranks.values()
            if not x.left and job.state == "running" and now - x.last_seen > 2 * self._hb_hint()
        )
        if job.plan is not None and job.plan.admitted:
            probe = request.query.get("probe") in ("1", "true")
            if probe:
                await self.probe_all(job.plan.switches)
            out["switches"] = {}
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
                out["switches"][s] = info
        return web.json_response(out)

    async def _job_counters(self, sw: SwitchInfo, job: Job) -> dict[str, Any]:
        """What a daemon's counters say about ``job``: drops by reason, its slots, send errors, data plane."""
        try:
            status, st = await self._switch_call(sw, "GET", "/stats")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return {"stats_error": str(exc) or type(exc).__name__}
        if status != 200 or not isinstance(st, dict):
            return {"stats_error": f"HTTP {status}"}
        acc = st.get("accelerator") or {}
        return {
            "drops": st.get("drops", {}),
            "malformed": st.get("malformed", {}),
            "occupancy": (st.get("occupancy") or {}).get(str(job.job_id), 0),
            "share_exceeded": (acc.get("drops") or {}).get("share_exceeded", 0),
            "send_errors": st.get("send_errors", 0),
            "data_plane": st.get("data_plane", {}),
        }

    def _hb_hint(self) -> float:
        return self.heartbeat_timeout_s / 4

    async def h_delete_job(self, request: web.Request) -> web.Response:
        name = _job_name(request)
        job = self.jobs.get(name)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}")
        if not job.life.accepts(JobInput.DELETED):
            raise BadRequest(409, f"job: {name!r} is {job.state}; delete it once its admission has finished")
        await self.teardown(job, JobInput.DELETED, "deleted by an operator (DELETE /v1/jobs)")
        return web.json_response(job.summary())

    async def h_register(self, request: web.Request) -> web.Response:
        name = _job_name(request)
        reg = await read_body(request, RegisterBody)
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
        mine = Rank(rank, udp, host, time.monotonic(), incarnation, request=request, multicast=reg.multicast)
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

    def _register_reply(self, job: Job, rank: int) -> web.Response:
        if job.life.state is JobState.REFUSED:
            return web.json_response({"job": job.name, "job_id": job.job_id, "admitted": False, "reason": job.reason})
        if job.life.state is not JobState.RUNNING:
            raise BadRequest(503, f"job {job.name!r}: {job.state}: {job.reason}")
        plan = job.plan
        assert plan is not None
        host = job.ranks[rank].host
        leaf = self.topology.tor_of(host)
        group = job.groups.get(leaf)
        if group is not None and format_addr(job.ranks[rank].udp) in group["members"]:
            multicast: dict[str, Any] = {"group": group["group"]}
        else:
            multicast = {"group": None, "reason": job.group_reasons.get(leaf, "no group for this rank's leaf")}
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
                "key": f"{job.key:016x}",
                "heartbeat_timeout_s": self.heartbeat_timeout_s,
                "multicast": multicast,
            }
        )

    async def _registered_rank(self, request: web.Request, model: type[R]) -> tuple[Job, Rank, R]:
        """The job and the rank a heartbeat, leave or unicast request names (its body as
        ``model``); 404 when either is unknown."""
        name = _job_name(request)
        body = await read_body(request, model)
        rank, job_id = body.rank, body.job_id
        job = self._find(name, job_id)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}" + (f" with job_id {job_id}" if job_id else ""))
        x = job.ranks.get(rank)
        if x is None:
            raise BadRequest(404, f"rank: {rank} is not registered in job {name!r}")
        return job, x, body

    async def h_heartbeat(self, request: web.Request) -> web.Response:
        """A rank is alive; its progress (``calls``; ``call`` and ``elems`` during an
        allreduce) lets the controller name a size mismatch; the answer names the ranks
        that left cleanly (``left``: rank -> calls completed)."""
        job, x, body = await self._registered_rank(request, ProgressBody)
        self._progress(x, body)
        call, elems = body.call, body.elems
        if job.life.state is JobState.RUNNING:
            x.last_seen = time.monotonic()
            if call is not None and elems is not None:
                x.call = (call, elems)
            await self._check_sizes(job)
        left = {str(r.rank): r.calls for r in job.ranks.values() if r.left}
        return web.json_response({"state": job.state, "reason": job.reason, "job_id": job.job_id, "left": left})

    async def h_leave(self, request: web.Request) -> web.Response:
        job, x, body = await self._registered_rank(request, ProgressBody)
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
        return web.json_response({"state": job.state, "reason": job.reason, "job_id": job.job_id})

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

    async def h_unicast(self, request: web.Request) -> web.Response:
        """A rank could not join its leaf's results group after all (its probe passed): the
        leaf daemon sends that job's results to each child from now on (``DELETE
        /jobs/{job_id}/multicast``), so the rank gets them on its own socket, not only as
        answers to its retransmissions."""
        job, x, body = await self._registered_rank(request, UnicastBody)
        reason = body.reason
        if reason is None:
            raise BadRequest(400, "reason: required (a string of 1-300 characters)")
        if job.life.state is not JobState.RUNNING or job.job_id is None:
            raise BadRequest(409, f"job {job.name!r}: {job.state}: {job.reason}")
        leaf = self.topology.tor_of(x.host)
        group = job.groups.get(leaf)
        if group is None or format_addr(x.udp) not in group["members"]:
            return web.json_response({"switch": leaf, "results_path": "unicast"})
        why = f"rank {x.rank} could not join {group['group']}: {reason}"
        sw = self.switches[leaf]
        try:
            status, data = await self._switch_call(sw, "DELETE", f"/jobs/{job.job_id}/multicast", {"reason": why})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise BadRequest(502, f"switch {leaf} unreachable: {exc or type(exc).__name__}") from None
        if status != 200:
            raise BadRequest(502, f"switch {leaf} refused to stop multicast: HTTP {status} {error_text(data)}")
        job.drop_group(leaf, why)
        self._save_state()
        log.warning("job %s: %s sends results by unicast: %s", job.name, leaf, why)
        return web.json_response({"switch": leaf, "results_path": "unicast"})

    async def h_metrics(self, request: web.Request) -> web.Response:
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
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def _job_name(request: web.Request) -> str:
    name = request.match_info["job"]
    if not JOB_NAME_RE.match(name):
        raise BadRequest(400, f"job: {name[:64]!r} is not a valid job name ({JOB_NAME_RULE})")
    return name
