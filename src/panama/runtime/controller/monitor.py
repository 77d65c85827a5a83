"""The controller's monitor: heartbeat deadlines, provisional registrations, and the
health of the daemons of running jobs, one pass every ``tick_s``; it never dies.

Liveness is judged by what the ranks sent, not by the monitor's own clock: a rank is
lost when it sent no heartbeat for ``heartbeat_timeout_s`` *of time the controller was
able to receive one*. A watch callback runs every ``WATCH_S`` in the service's event
loop; when the loop has not run for longer than that plus ``STALL_SLACK_S`` (the process
was stopped, SIGSTOP or a debugger, or its loop was blocked), the heartbeats sent
meanwhile are still in the kernel's queues and not yet read: the monitor counts the
stall (``stalls``, ``stalled_s`` in ``/v1/health``) and moves every running rank's
deadline on by the stall's length. The same check runs right before the deadlines are
judged (the first thing the loop runs after a stall may be the monitor itself), so a
controller that was stalled fails no job whose ranks kept sending, and a job whose rank
really stopped is failed one ``heartbeat_timeout_s`` of live controller time later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from panama.core.jobs import JobInput, JobState
from panama.runtime.control.messages import MonitorFacts
from panama.runtime.controller.jobs import Job, Rank
from panama.runtime.net.udp import format_addr

log = logging.getLogger("panama.controller")

WATCH_S = 0.1  # the loop-watch callback's period
STALL_SLACK_S = 0.5  # the loop silent for WATCH_S + this: the controller was stalled


class Monitor:
    """The monitor of one controller service (see the module docstring).

    ``service``: its public state (``jobs``, ``switches``, ``daemons``, ``counters``, ``state``,
    ``heartbeat_timeout_s``, ``probe_interval_s``, ``teardown``); ``drop_rank(job, rank,
    why)``: forget a provisional registration whose register call hung up."""

    def __init__(self, service: Any, drop_rank):
        self.service = service
        self.drop_rank = drop_rank
        self.tick_s = min(0.25, service.heartbeat_timeout_s / 4)
        self.task: asyncio.Task | None = None
        self.tick: float | None = None  # when the last pass ended (monotonic)
        self.seen: float | None = None  # when the loop last ran the watch (or a deadline check)
        self.watch_handle: asyncio.TimerHandle | None = None
        self.last_error: str | None = None
        self.stalls = 0
        self.stalled_s = 0.0
        self.started = time.monotonic()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())
        self.seen = time.monotonic()
        self.watch()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.watch_handle is not None:
            self.watch_handle.cancel()

    def watch(self) -> None:
        """The loop-watch callback: note that the loop runs (granting a stall), then again in ``WATCH_S``."""
        self.observe(time.monotonic())
        self.watch_handle = asyncio.get_running_loop().call_later(WATCH_S, self.watch)

    async def run(self) -> None:
        """Pass after pass until cancelled; an error in one pass is logged, counted, survived."""
        counters = self.service.counters
        next_probe = 0.0
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                next_probe = await self.run_pass(next_probe)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug in one pass must not end monitoring
                counters["monitor_errors"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if counters["monitor_errors"] <= 10:
                    log.exception("monitor pass failed (monitoring goes on)")
                else:
                    log.error("monitor pass failed (monitoring goes on): %s", self.last_error)
            self.tick = time.monotonic()

    def observe(self, now: float) -> float:
        """The loop runs at ``now``: the time it did not run beyond one watch period when
        that is a stall (else 0); the deadlines of every running rank move on by it."""
        last, self.seen = self.seen, now
        if last is None:
            return 0.0
        late = now - last - WATCH_S
        if late <= STALL_SLACK_S:
            return 0.0
        self.stalls += 1
        self.stalled_s += late
        moved = 0
        for job in self.service.jobs.values():
            if job.life.state is JobState.RUNNING:
                for x in job.ranks.values():
                    if not x.left:
                        x.last_seen = min(now, x.last_seen + late)
                        moved += 1
        log.warning(
            "controller stalled for %.1f s (process stopped or event loop blocked): the heartbeat deadlines of %d "
            "running rank(s) move on by as much",
            late,
            moved,
        )
        return late

    async def run_pass(self, next_probe: float) -> float:
        """One pass: stall grace, provisional registrations, heartbeat deadlines, daemon probes."""
        service = self.service
        now = time.monotonic()
        if service.state is not None:
            service.state.retry()  # a failed state write, until the disk takes it
        self.observe(now)  # a stall not yet noticed (the loop's first task after it may be this pass)
        for job in list(service.jobs.values()):
            if job.life.state is JobState.REGISTERING:
                for x in list(job.ranks.values()):
                    if x.gone():
                        self.drop_rank(job, x, "its register call hung up")
                continue
            if job.life.state is not JobState.RUNNING:
                continue
            now = time.monotonic()  # a teardown above may have awaited
            self.observe(now)
            stale = [x for x in job.ranks.values() if not x.left and now - x.last_seen > service.heartbeat_timeout_s]
            if stale:
                await service.teardown(job, JobInput.RANK_LOST, self._lost(stale[0], now))
        if now >= next_probe:
            next_probe = now + service.probe_interval_s
            await self._check_daemons()
        return next_probe

    def _lost(self, x: Rank, now: float) -> str:
        return (
            f"rank {x.rank} (udp {format_addr(x.udp)}) stopped heart-beating "
            f"({now - x.last_seen:.1f} s > heartbeat_timeout_s {self.service.heartbeat_timeout_s:g})"
        )

    async def _check_daemons(self) -> None:
        """Probe the daemons of running jobs; fail a job one of whose daemons is down or lost it."""
        service = self.service
        running = [j for j in service.jobs.values() if j.life.state is JobState.RUNNING and j.plan]
        used = sorted({s for j in running for s in j.plan.switches})
        if used:
            await service.daemons.probe_all(used)
        for job in list(service.jobs.values()):
            if job.life.state is JobState.RUNNING and job.plan is not None:
                why = self._daemon_trouble(job)
                if why is not None:
                    await service.teardown(job, JobInput.SWITCH_LOST, why)

    def _daemon_trouble(self, job: Job) -> str | None:
        """Why a daemon of ``job``'s trees fails it (down, or no longer holding it), else None."""
        service = self.service
        for s in job.plan.switches:
            sw = service.switches[s]
            held = service.daemons.knows_holds(s, job.installed_at)  # asked after the install
            if not sw.up:
                why = f"is down: {sw.error}"
            elif held is not None and job.job_id not in held:
                why = (
                    f"lost job {job.job_id} (no longer installed there: removed outside the controller or "
                    f"the daemon restarted)"
                )
            else:
                continue
            return f"switch {sw.name} (udp {format_addr(sw.udp)}, control {format_addr(sw.control)}) {why}"
        return None

    def health(self) -> tuple[bool, MonitorFacts]:
        """Whether the monitor runs and ticks (restarting it if its task ended), with facts."""
        counters = self.service.counters
        task = self.task
        if task is not None and task.done() and not task.cancelled():
            counters["monitor_restarts"] += 1
            log.error("monitor task ended (%s): restarting it", task.exception())
            self.task = task = asyncio.create_task(self.run())
        now = time.monotonic()
        age = None if self.tick is None else now - self.tick
        limit = max(10.0, 20 * self.tick_s)
        ticking = (now - self.started < limit) if age is None else age < limit
        alive = task is not None and not task.done()
        return alive and ticking, MonitorFacts(
            alive=alive,
            last_pass_age_s=None if age is None else round(age, 3),
            errors=counters["monitor_errors"],
            restarts=counters["monitor_restarts"],
            last_error=self.last_error,
            stalls=self.stalls,
            stalled_s=round(self.stalled_s, 3),
        )
