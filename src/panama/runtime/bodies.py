"""The control APIs' request bodies, declared once (pydantic models), checked before a handler acts.

Each body is a :class:`Body`: its fields' names, JSON types and bounds. :meth:`Body.parse`
turns a body that does not fit into a :class:`~panama.core.errors.FieldError` naming the
field as the APIs' messages always have (``rank: ...``, ``trees[0].children: ...``,
``multicast.members: ...``; the errors of :func:`panama.settings.settings_error`, list
indices in brackets); the handler answers 400 with it. Types are strict, as JSON has
them: ``true`` is not an integer, ``"0"`` is not a number, ``4.5`` is not a rank.

What depends on the receiver's state is checked by the handler afterwards: an address a
daemon can resolve and reach, a rank below a world size that fits the topology, a job
that exists.

Switch daemon (``PUT /jobs/{job_id}``, ``DELETE /jobs/{job_id}/multicast``):
:class:`InstallBody` (:class:`TreeBody`, :class:`MulticastBody`), :class:`MulticastOffBody`.
Controller (``POST /v1/jobs/{job}/register``, ``heartbeat``, ``leave``, ``unicast``):
:class:`RegisterBody`, :class:`ProgressBody`, :class:`UnicastBody`. A register body with
an unknown key is refused (as ever); heartbeat, leave and unicast bodies ignore keys they
do not know (as ever: an older or newer worker's extra progress fields are no error).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from panama.core.codec import MAX_KEY, MAX_PAYLOAD_ELEMS
from panama.core.errors import FieldError
from panama.runtime.http import BadRequest, read_json_object
from panama.settings import settings_error

__all__ = [
    "Body",
    "InstallBody",
    "MAX_SIZE_BYTES",
    "MAX_WAIT_S",
    "MulticastBody",
    "MulticastOffBody",
    "ProgressBody",
    "RegisterBody",
    "TreeBody",
    "UnicastBody",
    "body_error",
    "read_body",
]

B = TypeVar("B", bound="Body")

MAX_WAIT_S = 600.0  # the longest a register call may wait for its job's admission
MAX_SIZE_BYTES = 1 << 50  # the largest gradient a register may announce
MAX_INT = 1 << 53  # counters and ranks: what every JSON reader holds exactly
_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


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


async def read_body(request: Any, model: type[B]) -> B:
    """The request's JSON object body as ``model``; :class:`~panama.runtime.http.BadRequest`
    (400 naming the field; 408, 413 from :func:`~panama.runtime.http.read_json_object`)."""
    data = await read_json_object(request)
    try:
        return model.parse(data)
    except FieldError as exc:
        raise BadRequest(400, str(exc)) from None


# ---------------------------------------------------------------------- switch daemon
class TreeBody(Body):
    """One tree of an install: its id, children and parent (``HOST:PORT``, resolved by the daemon)."""

    tree_id: int = Field(ge=0, le=0xFFFF)
    children: list[str] = Field(min_length=1)
    parent: str | None = None


class MulticastBody(Body):
    """An install's results group: ``GROUP:PORT`` and the children that read it (2 or more)."""

    group: str
    members: list[str] = Field(min_length=2)


class InstallBody(Body):
    """``PUT /jobs/{job_id}``: the job's trees, its data-plane key (1-16 hex digits), and the
    loopback groups it sends results to (``multicast``) and receives them from (``join``)."""

    trees: list[TreeBody] = Field(min_length=1)
    key: str = "0"
    multicast: MulticastBody | None = None
    join: list[str] | None = Field(None, min_length=1)

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


class MulticastOffBody(Body):
    """``DELETE /jobs/{job_id}/multicast``: why the job's results go by unicast from now on."""

    reason: str = Field("asked by the controller", min_length=1, max_length=500)


# ---------------------------------------------------------------------- controller
class RegisterBody(Body):
    """``POST /v1/jobs/{job}/register``: one rank joins its job and waits for the admission."""

    rank: int = Field(ge=0, le=MAX_INT)
    world_size: int = Field(ge=1, le=MAX_INT)
    udp: str
    size_bytes: int | None = Field(0, ge=0, le=MAX_SIZE_BYTES)
    trees: int | None = Field(None, ge=1, le=0xFFFF)
    payload_elems: int | None = Field(None, ge=1, le=MAX_PAYLOAD_ELEMS)
    wait_s: float = Field(30.0, gt=0.0, le=MAX_WAIT_S, allow_inf_nan=False)
    incarnation: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    multicast: bool = False


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
