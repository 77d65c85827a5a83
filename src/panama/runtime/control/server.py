"""The server side of the control plane, shared by the controller and the switch daemons:
authentication and error middlewares, bounded JSON bodies read as models, replies.

A refused request is a :class:`BadRequest` (its status and ``{"error": message}``, the
message starting with the field); any other exception of a handler is a counted, logged
500 (the first traceback of each exception type), never a traceback per request. Bodies
are bounded (:data:`MAX_BODY_BYTES`, :data:`MAX_JSON_DEPTH`, :data:`BODY_TIMEOUT_S`) and
never cause a 500. Connection admission (who may hold a connection) is
:mod:`panama.runtime.control.admission`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from panama.core.errors import FieldError
from panama.runtime.control.admission import Admission
from panama.runtime.control.messages import Body, Reply
from panama.runtime.control.tokens import TOKEN_ENV, same_token

__all__ = [
    "BODY_TIMEOUT_S",
    "BadRequest",
    "Credential",
    "NO_CREDENTIAL",
    "OPERATOR",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "auth_middleware",
    "bearer",
    "errors_middleware",
    "make_app",
    "read_body",
    "read_json_object",
    "reply",
]

log = logging.getLogger("panama.http")

B = TypeVar("B", bound=Body)

MAX_BODY_BYTES = 64 * 1024  # control bodies are small; more is refused with 413
MAX_JSON_DEPTH = 32
BODY_TIMEOUT_S = 10.0  # a body must arrive within this once the headers are in


class BadRequest(Exception):
    """Answer ``status`` with ``{"error": message}`` (the message starts with the field)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Credential:
    """What a request proved (``request["credential"]``, set by :func:`auth_middleware`):
    ``operator`` when it carried the cluster token, else ``token``, another bearer token
    the server accepted (a job's: each handler checks that it covers what it touches)."""

    operator: bool
    token: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, request: web.Request) -> Credential:
        """The request's credential (none on an open path without a token)."""
        return request.get("credential") or NO_CREDENTIAL


NO_CREDENTIAL = Credential(operator=False)
OPERATOR = Credential(operator=True)  # the cluster token, or a server that checks none


def reply(message: Reply, status: int = 200) -> web.Response:
    """``message`` as the JSON answer."""
    return web.json_response(message.to_json(), status=status)


def bearer(request: web.Request) -> bytes:
    """The ``Authorization`` header's raw bytes (empty when absent)."""
    return request.headers.get("Authorization", "").encode("utf-8", "replace")


def unauthorized(got: bytes, what: str = "the cluster's token") -> web.Response:
    """The 401 answer to a request without the right bearer token."""
    why = "missing" if not got else "wrong token"
    hint = f"send Authorization: Bearer <token>; clients take token= or ${TOKEN_ENV}"
    if what != "the cluster's token":
        hint = f"{what}; {hint}"
    response = web.json_response(
        {"error": f"authorization: {why} ({hint})"},
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="panama"'},
    )
    response.force_close()  # a connection without a token holds no place once answered
    return response


Authorizer = Callable[[str], bool]


def auth_middleware(
    token: str,
    open_paths: frozenset[str],
    counters: dict[str, int],
    authorize: Authorizer | None = None,
):
    """aiohttp middleware: 401 unless ``Authorization: Bearer <token>`` (constant-time
    compare), except on ``open_paths``. ``authorize(token)``: whether another bearer
    token is one the server accepts (a job's own: the handler then checks it covers what
    the request touches); ``request["credential"]`` (:class:`Credential`) says which kind
    the request carried. A request without one gets its answer and its connection is
    closed (the first request of a connection is checked by
    :mod:`~panama.runtime.control.admission`'s gate already; this checks every request)."""
    expected = f"Bearer {token}"

    @web.middleware
    async def check(request: web.Request, handler):
        got = bearer(request)
        credential = None
        if same_token(got, expected):
            credential = Credential(operator=True)
        elif authorize is not None and got.startswith(b"Bearer "):
            other = got[7:].decode("ascii", "replace")
            if authorize(other):
                credential = Credential(operator=False, token=other)
        if credential is not None:
            request["credential"] = credential
            return await handler(request)
        if request.path in open_paths:
            response = await handler(request)
            response.force_close()
            return response
        counters["unauthorized"] = counters.get("unauthorized", 0) + 1
        return unauthorized(got)

    return check


def accepts(token: str, authorize: Authorizer | None) -> Callable[[str], bool]:
    """Whether a bearer token opens this server: the cluster token, or one ``authorize`` knows."""

    def accept(got: str) -> bool:
        return same_token(got, token) or (authorize is not None and authorize(got))

    return accept


def errors_middleware(counters: dict[str, int], what: str):
    """aiohttp middleware: BadRequest -> its status; any other exception -> 500, logged once per kind, counted."""
    seen: set[str] = set()

    @web.middleware
    async def guard(request: web.Request, handler):
        try:
            return await handler(request)
        except BadRequest as exc:
            counters["bad_requests"] = counters.get("bad_requests", 0) + 1
            return web.json_response({"error": str(exc)}, status=exc.status)
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: answer, count, log the first of each kind with its traceback
            counters["internal_errors"] = counters.get("internal_errors", 0) + 1
            kind = type(exc).__name__
            if kind not in seen:
                seen.add(kind)
                log.exception("%s: %s %s failed", what, request.method, request.path)
            else:
                log.error("%s: %s %s failed: %s: %s", what, request.method, request.path, kind, exc)
            return web.json_response({"error": f"internal: {kind}: {exc}"}, status=500)

    return guard


def make_app(
    routes: list[web.RouteDef],
    *,
    what: str,
    counters: dict[str, int],
    token: str | None,
    open_paths: frozenset[str],
    admission: Admission | None = None,
    authorize: Authorizer | None = None,
    on_startup: Callable[[web.Application], Awaitable[None]] | None = None,
    on_cleanup: Callable[[web.Application], Awaitable[None]] | None = None,
) -> web.Application:
    """An aiohttp application with the control plane's middlewares (authentication when
    ``token`` is given, errors always) and body limit, serving ``routes``."""
    middlewares = [errors_middleware(counters, what)]
    if token is not None:
        middlewares.insert(0, auth_middleware(token, open_paths, counters, authorize))
    if admission is not None:
        admission.configure(None if token is None else accepts(token, authorize), open_paths, counters)
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app.add_routes(routes)
    if on_startup is not None:
        app.on_startup.append(on_startup)
    if on_cleanup is not None:
        app.on_cleanup.append(on_cleanup)
    return app


async def read_json_object(request: web.Request, timeout_s: float = BODY_TIMEOUT_S) -> dict[str, Any]:
    """The request's body as a JSON object, or :class:`BadRequest` (400/408/413), never a 500."""
    try:
        raw = await asyncio.wait_for(request.read(), timeout_s)
    except asyncio.TimeoutError:
        raise BadRequest(408, f"body: not received within {timeout_s:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(413, f"body: larger than {MAX_BODY_BYTES} bytes") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(400, "body: not UTF-8") from None
    if _json_depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(400, f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, 4300-digit integers, ...
        raise BadRequest(400, f"body: not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(body, dict):
        raise BadRequest(400, f"body: expected a JSON object, got {type(body).__name__}")
    return body


async def read_body(request: web.Request, model: type[B]) -> B:
    """The request's JSON object body as ``model``; :class:`BadRequest` (400 naming the
    field; 408, 413 from :func:`read_json_object`)."""
    data = await read_json_object(request)
    try:
        return model.parse(data)
    except FieldError as exc:
        raise BadRequest(400, str(exc)) from None


def _json_depth(text: str) -> int:
    """Upper bound of the nesting depth of a JSON text (brackets inside strings count too)."""
    depth = worst = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > worst:
                worst = depth
                if worst > MAX_JSON_DEPTH:
                    return worst
        elif ch in "]}":
            depth -= 1
    return worst
