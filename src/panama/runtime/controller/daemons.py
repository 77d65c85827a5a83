"""The switch daemons as the controller sees them, and its requests to them.

:class:`Daemons` asks each daemon's control API (:mod:`panama.runtime.control.client`,
typed replies of :mod:`panama.runtime.control.messages`): ``/health`` probes (up, memory
facts, the jobs it holds), ``GET /jobs`` at recovery, ``PUT``/``DELETE /jobs/{job_id}``,
``DELETE /jobs/{job_id}/multicast`` and ``/stats``. A refused connection marks a daemon
down at once; a slow answer only after ``PROBE_TIMEOUTS_DOWN`` consecutive probes (a
busy CPU is not a dead daemon).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from panama.runtime.control.client import AsyncClient, HttpError
from panama.runtime.control.messages import (
    InstallBody,
    InstalledJobs,
    InstallReply,
    MulticastOffBody,
    MulticastOffReply,
    SwitchHealth,
    SwitchStats,
)
from panama.runtime.controller.cluster_file import SwitchInfo
from panama.runtime.net.udp import format_addr

log = logging.getLogger("panama.controller")
PROBE_TIMEOUTS_DOWN = 3  # consecutive /health timeouts before a daemon counts as down


class Daemons:
    """Every daemon of the cluster file (``switches``, by name), what each said at its last
    probe (``held``: job ids, None when unknown; ``asked``: when), and the client that asks
    them (open it with :meth:`open` inside the service's loop)."""

    def __init__(self, switches: dict[str, SwitchInfo], token: str | None, timeout_s: float):
        self.switches = switches
        self.client = AsyncClient(token, timeout_s)
        self.held: dict[str, set[int] | None] = {}
        self.asked: dict[str, float] = {}

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    @staticmethod
    def describe(sw: SwitchInfo) -> str:
        return f"switch {sw.name} (control {format_addr(sw.control)})"

    async def probe(self, sw: SwitchInfo) -> bool:
        """Ask one daemon for ``/health``; update ``up``/``error``/memory facts and the jobs it holds."""
        asked = time.monotonic()
        try:
            status, data = await self.client.request(sw.control, "GET", "/health")
            if status == 503:
                unwell = SwitchHealth.parse(data).data_plane if isinstance(data, dict) else None
                last = unwell.last_error if unwell is not None else None
                raise HttpError(f"data plane down (last error: {last or 'none recorded'})", status)
            if status != 200 or not isinstance(data, dict):
                raise HttpError(f"/health answered HTTP {status}", status)
            health = SwitchHealth.parse(data)
        except (HttpError, ValueError) as exc:  # ValueError: a /health that does not fit SwitchHealth
            return self.unanswered(sw, exc)
        sw.timeouts = 0
        if health.udp != format_addr(sw.udp):
            sw.up = False
            sw.error = f"daemon reports udp {health.udp}, cluster file says {format_addr(sw.udp)}"
            return False
        if not sw.up:
            log.info("switch %s is back", sw.name)
        sw.up, sw.error = True, ""
        sw.payload_elems = _positive(health.payload_elems)
        sw.packet_memory = _positive(health.packet_memory)
        self.held[sw.name] = set(health.jobs)
        self.asked[sw.name] = asked
        return True

    def unanswered(self, sw: SwitchInfo, exc: BaseException) -> bool:
        """A call to daemon ``sw`` (a probe, an install) got no usable answer: a refused
        connection or an unwell daemon is down at once; a timeout may only mean a busy CPU
        or a slow request, so it takes ``PROBE_TIMEOUTS_DOWN`` in a row (one slow install
        never fails the other jobs on that daemon). Returns whether ``sw`` still counts as up."""
        timed_out = isinstance(exc, HttpError) and exc.timed_out
        sw.timeouts = sw.timeouts + 1 if timed_out else PROBE_TIMEOUTS_DOWN
        if sw.timeouts < PROBE_TIMEOUTS_DOWN:
            return sw.up
        if sw.up:
            log.warning("%s is not answering: %s", self.describe(sw), exc or type(exc).__name__)
        sw.up = False
        sw.error = str(exc) or type(exc).__name__
        self.held[sw.name] = None
        return False

    async def probe_all(self, names: list[str] | None = None) -> None:
        targets = [self.switches[n] for n in (names if names is not None else list(self.switches))]
        await asyncio.gather(*(self.probe(sw) for sw in targets))

    def knows_holds(self, name: str, since: float) -> set[int] | None:
        """The job ids daemon ``name`` held at a probe sent after ``since`` (None: no such probe)."""
        held = self.held.get(name)
        return held if held is not None and self.asked.get(name, 0.0) > since else None

    async def installed_jobs(self, sw: SwitchInfo) -> dict[int, list] | None:
        """``GET /jobs``: the trees a daemon holds per job id (None when it cannot say)."""
        try:
            installed = await self.client.call(sw.control, "GET", "/jobs", None, InstalledJobs, self.describe(sw))
            return {int(j): t for j, t in installed.jobs.items()}
        except (HttpError, ValueError):
            return None

    async def install(self, name: str, job_id: int, body: InstallBody) -> InstallReply:
        """``PUT /jobs/{job_id}`` on daemon ``name``; HttpError when refused or unreachable
        (an unreachable daemon is down at once, a slow one after repeated timeouts: :meth:`unanswered`)."""
        sw = self.switches[name]
        try:
            reply = await self.client.call(sw.control, "PUT", f"/jobs/{job_id}", body, InstallReply, name)
        except HttpError as exc:
            if exc.status is None:
                self.unanswered(sw, exc)  # this install fails; the daemon's other jobs only after repeated timeouts
            raise
        sw.timeouts = 0  # it answered
        return reply

    async def remove(self, name: str, job_id: int) -> None:
        """``DELETE /jobs/{job_id}`` on daemon ``name``; a failure is logged (the daemon may be gone)."""
        sw = self.switches[name]
        try:
            status, data = await self.client.request(sw.control, "DELETE", f"/jobs/{job_id}")
            if status not in (200, 404):
                log.warning("switch %s: removing job %d answered HTTP %d %s", name, job_id, status, data)
        except HttpError as exc:
            log.warning("switch %s: could not remove job %d: %s", name, job_id, exc)

    async def multicast_off(self, name: str, job_id: int, why: str) -> MulticastOffReply:
        """``DELETE /jobs/{job_id}/multicast`` on daemon ``name``; HttpError when it cannot."""
        sw = self.switches[name]
        body = MulticastOffBody(reason=why)
        return await self.client.call(sw.control, "DELETE", f"/jobs/{job_id}/multicast", body, MulticastOffReply, name)

    async def job_counters(self, sw: SwitchInfo, job_id: int | None) -> dict[str, Any]:
        """What a daemon's ``/stats`` say about one job: drops by reason, its slots, send
        errors, data plane (or ``stats_error``)."""
        try:
            st = await self.client.call(sw.control, "GET", "/stats", None, SwitchStats, self.describe(sw))
        except HttpError as exc:
            return {"stats_error": f"HTTP {exc.status}" if exc.status is not None else str(exc)}
        return {
            "drops": st.drops,
            "malformed": st.malformed,
            "occupancy": st.occupancy.get(str(job_id), 0),
            "share_exceeded": (st.accelerator.get("drops") or {}).get("share_exceeded", 0),
            "send_errors": st.send_errors,
            "data_plane": st.data_plane,
        }


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
