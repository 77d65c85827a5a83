"""The control protocol's messages, declared once (pydantic models) and used by both sides.

Requests are :class:`Body` models: unknown keys refused (heartbeat, leave and unicast
bodies ignore them, as ever), strict JSON types (``true`` is not an integer, ``"0"`` is
not a number, ``4.5`` is not a rank), bounds. A server reads one with
:func:`panama.runtime.control.server.read_body` (400 naming the field as the APIs always
have: ``rank: ...``, ``trees[0].children: ...``); a client builds one and sends it with
:mod:`panama.runtime.control.client`. What depends on the receiver's state (an address a
daemon can reach, a rank below a world size that fits the topology, a job that exists)
is checked by the handler afterwards.

Replies are :class:`Reply` models: the server builds one and answers
``reply.to_json()``; a client gets it back typed from
:func:`panama.runtime.control.client.call` (keys it does not know are ignored, so an
older client reads a newer server). Optional parts of a reply are left out of the JSON
when not set (``exclude_unset``), as the API has always answered.

The JSON of each path is tabled in docs/runtime.md; ``tests/runtime/test_control_messages.py``
checks those tables against these models' JSON schema.

Controller (``/v1``): ``POST jobs/{job}/register`` :class:`RegisterBody` →
:class:`RegisterReply`; ``heartbeat`` and ``leave`` :class:`ProgressBody` →
:class:`HeartbeatReply`, :class:`LeaveReply`; ``unicast`` :class:`UnicastBody` →
:class:`UnicastReply`; ``GET jobs`` :class:`JobsReply`; ``GET jobs/{job}`` :class:`JobDetail`; ``DELETE jobs/{job}``
:class:`JobSummary`; ``GET switches`` :class:`SwitchesReply`; ``GET health``
:class:`ControllerHealth`. Switch daemon: ``PUT /jobs/{job_id}`` :class:`InstallBody` →
:class:`InstallReply`; ``DELETE /jobs/{job_id}`` :class:`RemoveReply`; ``DELETE
/jobs/{job_id}/multicast`` :class:`MulticastOffBody` → :class:`MulticastOffReply`;
``GET /jobs`` :class:`InstalledJobs`; ``GET /health`` :class:`SwitchHealth`; ``GET
/stats`` :class:`SwitchStats`. Every error: :class:`ErrorReply`.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from panama.core.codec import MAX_KEY, MAX_PAYLOAD_ELEMS
from panama.core.errors import FieldError
from panama.settings import settings_error

B = TypeVar("B", bound="Body")
R = TypeVar("R", bound="Reply")

MAX_WAIT_S = 600.0  # the longest a register call may wait for its job's admission
MAX_SIZE_BYTES = 1 << 50  # the largest gradient a register may announce
MAX_INT = 1 << 53  # counters and ranks: what every JSON reader holds exactly
# An install's lists: a job has at most this many trees on one daemon, and the daemon joins
# at most one results group per tree (its parent's). Each joined group holds a socket and
# about 1 MB of receive buffers, so the cap keeps one request from taking gigabytes.
MAX_INSTALL_TREES = 64
_INDEX = re.compile(r"\.(\d+)(?=\.|$)")

# Job names: what may appear in a URL path segment and a log line unescaped.
JOB_NAME_MAX = 128
JOB_NAME_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{JOB_NAME_MAX - 1}}}$")
JOB_NAME_RULE = f"1-{JOB_NAME_MAX} characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"
INCARNATION_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
TOKEN_PATTERN = r"^[A-Za-z0-9._~+/=-]{16,512}$"  # the shape of every bearer token (control.tokens)


def body_error(exc: ValidationError) -> FieldError:
    """The first error of a body's validation, its field as the APIs name it (``trees[0].tree_id``)."""
    err = settings_error(exc)
    field = "body" if err.field == "settings" else _INDEX.sub(r"[\1]", err.field)
    return FieldError(field, err.detail)


class Body(BaseModel):
    """Base of the request bodies: unknown keys refused, strict JSON types, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def parse(cls: type[B], data: Any) -> B:
        """Validate a parsed JSON body; :class:`FieldError` naming the field otherwise."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise body_error(exc) from None

    def to_json(self) -> dict[str, Any]:
        """The body as the client sends it (fields left at None are not sent)."""
        return self.model_dump(mode="json", exclude_none=True)


class Reply(BaseModel):
    """Base of the replies: keys the reader does not know are ignored; optional parts the
    writer did not set are not sent."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @classmethod
    def parse(cls: type[R], data: Any) -> R:
        """A received reply as this model; :class:`FieldError` naming the field otherwise."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise body_error(exc) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class ErrorReply(Reply):
    """Every refused request: ``{"error": "<field>: <message>"}``."""

    error: str


# ---------------------------------------------------------------------- switch daemon
class TreeBody(Body):
    """One tree of an install: its id, children and parent (``HOST:PORT``, resolved by the daemon)."""

    tree_id: int = Field(ge=0, le=0xFFFF)
    children: list[str] = Field(min_length=1)
    parent: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")  # "parent": null is part of a root's entry


class MulticastBody(Body):
    """An install's results group: ``GROUP:PORT`` and the children that read it (2 or more)."""

    group: str
    members: list[str] = Field(min_length=2)


class InstallBody(Body):
    """``PUT /jobs/{job_id}``: the job's trees, its data-plane key (1-16 hex digits), and the
    loopback groups it sends results to (``multicast``) and receives them from (``join``)."""

    trees: list[TreeBody] = Field(min_length=1, max_length=MAX_INSTALL_TREES)
    key: str = "0"
    multicast: MulticastBody | None = None
    join: list[str] | None = Field(None, min_length=1, max_length=MAX_INSTALL_TREES)

    @field_validator("join")
    @classmethod
    def _one_group_per_tree_at_most(cls, join: list[str] | None, info: ValidationInfo) -> list[str] | None:
        trees = info.data.get("trees")  # validated before join (declared first); absent when invalid
        if join is not None and trees is not None and len(join) > len(trees):
            raise ValueError(f"{len(join)} groups for {len(trees)} tree(s) (at most one per tree)")
        return join

    @field_validator("key")
    @classmethod
    def _hex_key(cls, value: str) -> str:
        try:
            number = int(value, 16) if 1 <= len(value) <= 16 else -1
        except ValueError:
            number = -1
        if not 0 <= number <= MAX_KEY:
            raise ValueError("expected 1-16 hex digits")
        return value

    @property
    def key_value(self) -> int:
        return int(self.key, 16)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["trees"] = [t.to_json() for t in self.trees]
        return out


class MulticastOffBody(Body):
    """``DELETE /jobs/{job_id}/multicast``: why the job's results go by unicast from now on."""

    reason: str = Field("asked by the controller", min_length=1, max_length=500)


class JoinReply(Reply):
    """Whether an install joined every group of its ``join`` list (``reason`` when not)."""

    joined: bool
    reason: str | None


class InstallReply(Reply):
    """``PUT /jobs/{job_id}`` answered 200: the job id, its tree count, its results path
    (``"multicast"``, ``"unicast: <why>"`` or null) and, with ``join``, whether it joined."""

    installed: int
    trees: int
    multicast: str | None
    join: JoinReply | None = None


class RemoveReply(Reply):
    """``DELETE /jobs/{job_id}`` answered 200."""

    removed: int


class MulticastOffReply(Reply):
    """``DELETE /jobs/{job_id}/multicast`` answered 200: the results path from now on."""

    job: int
    multicast: str | None


class InstalledJobs(Reply):
    """``GET /jobs``: the trees installed, per job id (as the install gave them)."""

    jobs: dict[str, list[dict[str, Any]]]


class DataPlaneFacts(Reply):
    """Whether a daemon's data-plane loop runs, its restarts and send errors."""

    alive: bool
    errors: int
    last_error: str | None
    send_errors: int
    last_send_error: str | None


class SwitchHealth(Reply):
    """``GET /health`` of a daemon (200 ``ok``, 503 ``data plane down``)."""

    id: str
    udp: str
    payload_elems: int
    packet_memory: int
    status: str
    data_plane: DataPlaneFacts
    jobs: list[int]


class SwitchStats(Reply):
    """``GET /stats`` of a daemon: its counters (the fields the controller reads are typed;
    every other counter is kept as sent)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    udp: str
    rx_packets: int
    rx_bytes: int
    tx_packets: int
    tx_bytes: int
    drops: dict[str, int]
    malformed: dict[str, int]
    retransmits_received: int
    ce_received: int
    ce_marked: int
    batches: int
    max_backlog_pkts: int
    rx_syscalls: int
    gso_sends: int
    gso_datagrams: int
    offload: dict[str, Any]
    occupancy: dict[str, int]
    jobs: list[int]
    accelerator: dict[str, Any]
    send_errors: int
    send_errors_by_dest: dict[str, dict[str, int]]
    data_plane: DataPlaneFacts
    control: dict[str, int]


# ---------------------------------------------------------------------- controller
class RegisterBody(Body):
    """``POST /v1/jobs/{job}/register``: one rank joins its job and waits for the admission.

    ``job_token``: the run's credential (docs/runtime.md, "Trust model"): the first
    registration of a job name binds the job to it (a new run, admitted with the cluster
    token); every later registration must carry the same, in the body or as its bearer
    token, else 409 naming the job and its live run (a second run with the same name)."""

    rank: int = Field(ge=0, le=MAX_INT)
    world_size: int = Field(ge=1, le=MAX_INT)
    udp: str
    size_bytes: int | None = Field(0, ge=0, le=MAX_SIZE_BYTES)
    trees: int | None = Field(None, ge=1, le=0xFFFF)
    payload_elems: int | None = Field(None, ge=1, le=MAX_PAYLOAD_ELEMS)
    wait_s: float = Field(30.0, gt=0.0, le=MAX_WAIT_S, allow_inf_nan=False)
    incarnation: str | None = Field(None, pattern=INCARNATION_PATTERN)
    multicast: bool = False
    job_token: str | None = Field(None, pattern=TOKEN_PATTERN, repr=False)


class RankBody(Body):
    """A registered rank (and, to tell incarnations of a job name apart, its ``job_id``)."""

    model_config = ConfigDict(extra="ignore")

    rank: int = Field(ge=0, le=MAX_INT)
    job_id: int | None = Field(None, ge=1, le=MAX_INT)


class ProgressBody(RankBody):
    """``heartbeat`` and ``leave``: calls completed, the size of the last one, the call under
    way (``call``, ``elems``) and, on a leave after a failure, the ``error``."""

    calls: int | None = Field(None, ge=0, le=MAX_INT)
    last: int | None = Field(None, ge=0, le=MAX_INT)
    call: int | None = Field(None, ge=0, le=MAX_INT)
    elems: int | None = Field(None, ge=0, le=MAX_INT)
    error: str | None = None


class UnicastBody(RankBody):
    """``unicast``: the rank could not join its leaf's results group; ``reason`` says why."""

    reason: str | None = Field(None, min_length=1, max_length=300)


class TreeInfo(Reply):
    """One aggregation tree of an admitted job, as a rank sees it."""

    tree_id: int
    root: str
    group: str
    cwnd_cap: int


class FirstHop(Reply):
    """The rank's leaf daemon: its name and data address."""

    switch: str
    udp: str


class ResultsGroup(Reply):
    """The loopback group this rank reads results from, or (``group`` null) why none."""

    group: str | None
    reason: str | None = None


class RegisterReply(Reply):
    """``register`` answered 200: admitted (the plan this rank needs), or not (``reason``).

    A refused job's reply holds ``job``, ``job_id``, ``admitted`` (false) and ``reason`` only."""

    job: str
    job_id: int | None
    admitted: bool
    reason: str
    warnings: list[str] = []
    rank: int | None = None
    host: str | None = None
    trees: list[TreeInfo] = []
    first_hop: FirstHop | None = None
    payload_elems: int | None = None
    key: str | None = None
    heartbeat_timeout_s: float | None = None
    multicast: ResultsGroup | None = None
    run: str | None = None
    job_token: str | None = Field(None, repr=False)  # only when the controller drew it (none was given)


class LeaveReply(Reply):
    """``leave`` answered 200: the job's state (``running`` or why it ended)."""

    state: str
    reason: str
    job_id: int | None


class HeartbeatReply(LeaveReply):
    """``heartbeat`` answered 200: the job's state and the ranks that left cleanly
    (``left``: rank -> allreduces it completed)."""

    left: dict[str, int | None] = {}


class UnicastReply(Reply):
    """``unicast`` answered 200: the rank's leaf sends the job's results by unicast."""

    switch: str
    results_path: str


class JobSummary(Reply):
    """One job in ``GET /v1/jobs`` (and the base of ``GET /v1/jobs/{job}``); ``run`` names
    the run that holds the job name (never its token)."""

    job: str
    run: str | None = None
    job_id: int | None
    state: str
    reason: str
    world_size: int
    registered: list[int]
    left: list[int]
    failed_ranks: dict[str, str | None]
    size_bytes: int
    payload_elems: int | None
    hosts: dict[str, str]
    recovered: bool
    plan: dict[str, Any] | None
    multicast: dict[str, Any]


class JobSwitch(Reply):
    """A daemon of a job's trees in ``GET /v1/jobs/{job}``; ``holds_job`` once probed
    after the install; with ``probe=1`` its counters for the job (or ``stats_error``)."""

    udp: str
    up: bool
    error: str
    holds_job: bool | None = None
    drops: dict[str, int] | None = None
    malformed: dict[str, int] | None = None
    occupancy: int | None = None
    share_exceeded: int | None = None
    send_errors: int | None = None
    data_plane: DataPlaneFacts | None = None
    stats_error: str | None = None


class JobDetail(JobSummary):
    """``GET /v1/jobs/{job}``: the summary, ``stale_ranks`` and, once admitted, ``switches``."""

    stale_ranks: list[int] | None = None
    switches: dict[str, JobSwitch] | None = None


class JobsReply(Reply):
    """``GET /v1/jobs``: live jobs and the last 20 ended ones."""

    jobs: list[JobSummary]
    history: list[JobSummary]


class SwitchView(Reply):
    """A daemon in ``GET /v1/switches``: what the controller knows of it."""

    id: str
    role: str
    udp: str
    control: str
    up: bool
    error: str
    payload_elems: int | None
    packet_memory: int | None


class SwitchesReply(Reply):
    """``GET /v1/switches``."""

    switches: list[SwitchView]


class StateFileFacts(Reply):
    """Where the controller keeps running jobs, and why its last write failed."""

    path: str | None
    error: str | None


class MonitorFacts(Reply):
    """Whether the controller's monitor runs and ticks; how often and how long the
    controller was stalled (its ranks' heartbeat deadlines moved on by as much)."""

    alive: bool
    last_pass_age_s: float | None
    errors: int
    restarts: int
    last_error: str | None
    stalls: int = 0
    stalled_s: float = 0.0


class ControllerHealth(Reply):
    """``GET /v1/health`` (200, or 503 when the monitor is not ticking)."""

    status: str
    state_file: StateFileFacts
    connections: dict[str, int]
    monitor: MonitorFacts
    topology: str
    hosts: int
    threshold_bytes: int
    heartbeat_timeout_s: float
    jobs: int
    controllers_created: int
    uptime_s: float
