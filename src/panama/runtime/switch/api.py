"""A switch daemon's HTTP control and metrics API: routes, handlers, Prometheus text.

:class:`SwitchHttp` is built from a :class:`panama.runtime.switch.daemon.SwitchDaemon`
(composition) and calls its public surface only: ``health()``, ``stats()``,
``installed()``, ``install()``, ``multicast_off()``, ``multicast_path()``,
``remove_job()``, ``config``, ``token``, ``control_counters``, ``admission``. Bodies
and replies are the models of :mod:`panama.runtime.control.messages`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from panama.core.accelerator import AcceleratorError
from panama.runtime.control.messages import (
    InstallBody,
    InstalledJobs,
    InstallReply,
    JoinReply,
    MulticastOffBody,
    MulticastOffReply,
    RemoveReply,
)
from panama.runtime.control.server import make_app, read_body, reply

log = logging.getLogger("panama.switch")


class SwitchHttp:
    """HTTP handlers of one switch daemon (see the module docstring)."""

    def __init__(self, daemon: Any):
        self.daemon = daemon

    def metrics_text(self) -> str:
        """Counters in the Prometheus text exposition format (version 0.0.4): one family per
        row of :data:`_METRICS`, in its order."""
        st = self.daemon.stats()
        sw = _label(st["id"])
        lines: list[str] = []
        for name, kind, help_text, samples in _METRICS:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples(st):
                lines.append(f"{name}{{switch={sw}{labels}}} {value}")
        return "\n".join(lines) + "\n"

    def make_app(self) -> web.Application:
        daemon = self.daemon
        return make_app(
            [
                web.get("/health", self.h_health),
                web.get("/stats", self.h_stats),
                web.get("/metrics", self.h_metrics),
                web.get("/jobs", self.h_jobs),
                web.put("/jobs/{job_id}", self.h_install),
                web.delete("/jobs/{job_id}", self.h_remove),
                web.delete("/jobs/{job_id}/multicast", self.h_multicast_off),
            ],
            what=f"switch {daemon.config.switch_id}",
            counters=daemon.control_counters,
            token=daemon.token,
            open_paths=frozenset({"/health"}),
            admission=daemon.admission,
        )

    async def h_health(self, request: web.Request) -> web.Response:
        health = self.daemon.health()
        return reply(health, status=200 if health.data_plane.alive else 503)

    async def h_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.daemon.stats())

    async def h_metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_text(), content_type="text/plain", charset="utf-8")

    async def h_jobs(self, request: web.Request) -> web.Response:
        return reply(InstalledJobs(jobs={str(j): t for j, t in self.daemon.installed().items()}))

    async def h_install(self, request: web.Request) -> web.Response:
        job_id = _job_id(request)
        body = await read_body(request, InstallBody)  # 400 naming the field of a body that does not fit
        try:
            join_reason = self.daemon.install(job_id, body, body.key_value)
        except AcceleratorError as exc:
            return _error(409, str(exc))
        except ValueError as exc:  # FieldError, AddressError: an address this daemon cannot use
            return _error(400, str(exc))
        fields: dict[str, Any] = {
            "installed": job_id,
            "trees": len(body.trees),
            "multicast": self.daemon.multicast_path(job_id),
        }
        if body.join is not None:
            fields["join"] = JoinReply(joined=join_reason is None, reason=join_reason)
        return reply(InstallReply(**fields))

    async def h_multicast_off(self, request: web.Request) -> web.Response:
        job_id = _job_id(request)
        body = await read_body(request, MulticastOffBody)
        try:
            path = self.daemon.multicast_off(job_id, body.reason)
        except AcceleratorError as exc:
            return _error(404, str(exc))
        return reply(MulticastOffReply(job=job_id, multicast=path))

    async def h_remove(self, request: web.Request) -> web.Response:
        job_id = _job_id(request)
        try:
            self.daemon.remove_job(job_id)
        except AcceleratorError as exc:
            return _error(404, str(exc))
        return reply(RemoveReply(removed=job_id))


def _job_id(request: web.Request) -> int:
    text = request.match_info["job_id"]
    try:
        job_id = int(text)
    except ValueError:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"job_id: expected an integer, got {text!r}"}), content_type="application/json"
        ) from None
    if not 1 <= job_id <= 0xFFFFFFFF:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"job_id: must be in [1, 2^32-1], got {job_id}"}), content_type="application/json"
        )
    return job_id


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _label(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def _one(*path: str):
    """Samples of a family with one unlabelled sample: the ``/stats`` value at ``path`` (a bool as 0/1)."""

    def samples(st: dict) -> list[tuple[str, float]]:
        value = st
        for key in path:
            value = value[key]
        return [("", int(value) if isinstance(value, bool) else value)]

    return samples


def _by(label: str, key: str, total: bool = False):
    """Samples of a family labelled ``label``: one per entry of the ``/stats`` dict ``key``
    (sorted; ``total``: each entry's values summed)."""

    def samples(st: dict) -> list[tuple[str, float]]:
        return [(f",{label}={_label(k)}", sum(v.values()) if total else v) for k, v in sorted(st[key].items())]

    return samples


# The metric families, in the order /metrics lists them: (name, type, help, samples from /stats).
_METRICS = (
    ("panama_switch_rx_packets_total", "counter", "Datagrams received.", _one("rx_packets")),
    ("panama_switch_rx_bytes_total", "counter", "UDP payload bytes received.", _one("rx_bytes")),
    ("panama_switch_tx_packets_total", "counter", "Datagrams sent.", _one("tx_packets")),
    ("panama_switch_tx_bytes_total", "counter", "UDP payload bytes sent.", _one("tx_bytes")),
    (
        "panama_switch_rx_syscalls_total",
        "counter",
        "Receive system calls (GRO: several datagrams each).",
        _one("rx_syscalls"),
    ),
    ("panama_switch_gso_sends_total", "counter", "GSO sends (several datagrams each).", _one("gso_sends")),
    ("panama_switch_gso_datagrams_total", "counter", "Datagrams sent by GSO sends.", _one("gso_datagrams")),
    ("panama_switch_drops_total", "counter", "Packets dropped, by reason.", _by("reason", "drops")),
    (
        "panama_switch_malformed_total",
        "counter",
        "Datagrams rejected by the codec, by reason.",
        _by("reason", "malformed"),
    ),
    (
        "panama_switch_retransmits_received_total",
        "counter",
        "Contributions received with the retransmit flag.",
        _one("retransmits_received"),
    ),
    ("panama_switch_ce_received_total", "counter", "Datagrams received with ECN CE.", _one("ce_received")),
    ("panama_switch_ce_marked_total", "counter", "Packets this daemon marked CE.", _one("ce_marked")),
    (
        "panama_switch_send_errors_total",
        "counter",
        "Datagrams the kernel refused to send, by destination.",
        _by("dest", "send_errors_by_dest", total=True),
    ),
    ("panama_switch_data_plane_up", "gauge", "1 while the data-plane loop runs.", _one("data_plane", "alive")),
    ("panama_switch_data_plane_errors_total", "counter", "Data-plane loop restarts.", _one("data_plane", "errors")),
    ("panama_switch_contributions_total", "counter", "Contributions aggregated.", _one("accelerator", "contributions")),
    ("panama_switch_results_out_total", "counter", "Result packets emitted.", _one("accelerator", "results_out")),
    ("panama_switch_used_slots", "gauge", "Accelerator slots in use.", _one("accelerator", "used_slots")),
    ("panama_switch_packet_memory_slots", "gauge", "Accelerator slots.", _one("accelerator", "packet_memory")),
    ("panama_switch_occupancy_slots", "gauge", "Slots in use per job.", _by("job", "occupancy")),
)
