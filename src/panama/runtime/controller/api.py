"""The controller service's HTTP API (``/v1``): routes and handlers.

:class:`ControllerHttp` is built from a
:class:`panama.runtime.controller.service.ControllerService` (composition) and calls its
public surface only (``ranks.register``, ``ranks.heartbeat``, ``ranks.leave``,
``ranks.unicast``, ``job_detail``, ``delete_job``, ``jobs_view``, ``switches_view``,
``health``, ``metrics_text``, ``holds_token``, ``start``, ``shutdown``, and its
``token``, ``counters``, ``admission``).

Who may do what (docs/runtime.md, "Trust model"): the cluster token (operators) admits
new jobs (the first registration of a name), lists jobs and switches, reads any job and
ends any job on the explicit operator path ``DELETE /v1/admin/jobs/{job}``; a job's own
token (its run's) registers further ranks, heartbeats, leaves, asks for unicast, reads
and deletes that job only. Anything else is 401 (no token the service knows) or 403. A handler
reads the job name from the path and the body as its model
(:mod:`panama.runtime.control.messages`), and answers the service's reply model; the
service raises :class:`~panama.runtime.control.server.BadRequest` for what it refuses.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from panama.runtime.control.messages import JOB_NAME_RE, JOB_NAME_RULE, ProgressBody, RegisterBody, UnicastBody
from panama.runtime.control.server import OPERATOR, BadRequest, Credential, make_app, read_body, reply

log = logging.getLogger("panama.controller")

API = "/v1"


class ControllerHttp:
    """HTTP handlers of one controller service (see the module docstring)."""

    def __init__(self, service: Any):
        self.service = service

    def make_app(self) -> web.Application:
        service = self.service
        return make_app(
            [
                web.get(f"{API}/health", self.h_health),
                web.get(f"{API}/switches", self.h_switches),
                web.get(f"{API}/jobs", self.h_jobs),
                web.get(f"{API}/jobs/{{job}}", self.h_job),
                web.delete(f"{API}/jobs/{{job}}", self.h_delete_job),
                web.delete(f"{API}/admin/jobs/{{job}}", self.h_admin_delete_job),
                web.post(f"{API}/jobs/{{job}}/register", self.h_register),
                web.post(f"{API}/jobs/{{job}}/heartbeat", self.h_heartbeat),
                web.post(f"{API}/jobs/{{job}}/leave", self.h_leave),
                web.post(f"{API}/jobs/{{job}}/unicast", self.h_unicast),
                web.get("/metrics", self.h_metrics),
            ],
            what="controller",
            counters=service.counters,
            token=service.token,
            open_paths=frozenset({f"{API}/health"}),
            admission=service.admission,
            authorize=service.holds_token,
            on_startup=self.on_startup,
            on_cleanup=self.on_cleanup,
        )

    async def on_startup(self, app: web.Application) -> None:
        if self.service.controller is None:  # not started by its owner already
            await self.service.start()

    async def on_cleanup(self, app: web.Application) -> None:
        await self.service.shutdown()

    async def h_health(self, request: web.Request) -> web.Response:
        ok, health = self.service.health()
        return reply(health, status=200 if ok else 503)

    def credential(self, request: web.Request) -> Credential:
        """What the request proved (a service without a token trusts every request)."""
        return OPERATOR if self.service.token is None else Credential.of(request)

    def operator(self, request: web.Request, what: str) -> None:
        """403 unless the request carries the cluster token: ``what`` is for operators."""
        if not self.credential(request).operator:
            raise BadRequest(403, f"authorization: {what} needs the cluster token (operators); a job token is not")

    async def h_switches(self, request: web.Request) -> web.Response:
        self.operator(request, "GET /v1/switches")
        return reply(await self.service.switches_view(probe=_probe(request)))

    async def h_jobs(self, request: web.Request) -> web.Response:
        self.operator(request, "GET /v1/jobs")
        return reply(self.service.jobs_view())

    async def h_job(self, request: web.Request) -> web.Response:
        name = job_name(request)
        return reply(await self.service.job_detail(name, probe=_probe(request), credential=self.credential(request)))

    async def h_delete_job(self, request: web.Request) -> web.Response:
        return reply(await self.service.delete_job(job_name(request), self.credential(request)))

    async def h_admin_delete_job(self, request: web.Request) -> web.Response:
        name = job_name(request)
        self.operator(request, "DELETE /v1/admin/jobs/{job}")
        return reply(await self.service.delete_job(name, admin=True))

    async def h_register(self, request: web.Request) -> web.Response:
        name = job_name(request)
        body = await read_body(request, RegisterBody)
        return reply(await self.service.ranks.register(name, body, self.credential(request), request))

    async def h_heartbeat(self, request: web.Request) -> web.Response:
        name = job_name(request)
        body = await read_body(request, ProgressBody)
        return reply(await self.service.ranks.heartbeat(name, body, self.credential(request)))

    async def h_leave(self, request: web.Request) -> web.Response:
        name = job_name(request)
        body = await read_body(request, ProgressBody)
        return reply(await self.service.ranks.leave(name, body, self.credential(request)))

    async def h_unicast(self, request: web.Request) -> web.Response:
        name = job_name(request)
        body = await read_body(request, UnicastBody)
        return reply(await self.service.ranks.unicast(name, body, self.credential(request)))

    async def h_metrics(self, request: web.Request) -> web.Response:
        self.operator(request, "GET /metrics")
        return web.Response(text=self.service.metrics_text(), content_type="text/plain")


def job_name(request: web.Request) -> str:
    """The ``{job}`` of the path; 400 naming ``job`` unless it is a valid job name."""
    name = request.match_info["job"]
    if not JOB_NAME_RE.match(name):
        raise BadRequest(400, f"job: {name[:64]!r} is not a valid job name ({JOB_NAME_RULE})")
    return name


def _probe(request: web.Request) -> bool:
    return request.query.get("probe") in ("1", "true")
