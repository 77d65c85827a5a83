"""HTTP/JSON on both sides of the control plane: a tiny blocking client (workers, cluster
tools) and what the controller and the daemons share as servers (bearer-token
authentication, request limits, JSON bodies that never cause a 500).

Token flow (docs/runtime.md, "Trust model"): every control request carries
``Authorization: Bearer <token>``; servers answer 401 without it, except on their health
path (``/health``, ``/v1/health``). Clients take ``token=`` or, when it is None, the
environment variable ``PANAMA_TOKEN``.
"""

from __future__ import annotations

import asyncio
import hmac
import http.client
import json
import logging
import re
import secrets
import socket
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from panama import environment
from panama.core.errors import FieldError
from panama.runtime.files import write_private_file
from panama.runtime.net.udp import Address

log = logging.getLogger("panama.http")

TOKEN_ENV = environment.TOKEN  # named in panama.environment
TOKEN_BYTES = 32  # 256 bits of randomness, 43 url-safe characters
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")

# Job names: what may appear in a URL path segment and a log line unescaped.
JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
JOB_NAME_RULE = "1-128 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"

# Server limits (both services).
MAX_BODY_BYTES = 64 * 1024  # control bodies are small; more is refused with 413
MAX_JSON_DEPTH = 32
HEADER_TIMEOUT_S = 10.0  # a connection must complete a request's headers within this
BODY_TIMEOUT_S = 10.0  # and its body within this once the headers are in
KEEPALIVE_TIMEOUT_S = 30.0  # idle keep-alive connections are closed after this
MAX_CONNECTIONS = 256  # open connections; past it the oldest pending one is closed (else 503)
PENDING_TIMEOUT_S = 2.0  # a connection must send a request with the token within this
EVICT_MIN_AGE_S = 0.2  # a pending connection younger than this is never closed to make room
BUSY_RETRY_S = 5.0  # clients ask a server at its connection limit again for this long

# Connections (their handlers' ids) that sent a request with the right token: they are
# never closed to make room (start_site). Counters of what admission closed or refused.
_AUTHENTICATED: set[int] = set()
ADMISSION_COUNTERS: dict[str, int] = {}


class HttpError(RuntimeError):
    """The server could not be reached or did not answer JSON; ``status`` is None when unreachable."""

    def __init__(self, message: str, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


# ---------------------------------------------------------------------- tokens
def new_token() -> str:
    """A fresh random secret for a cluster."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def check_token(token: str, field: str = "token") -> str:
    if not isinstance(token, str) or not _TOKEN_RE.match(token):
        raise FieldError(field, "expected 16-512 characters of [A-Za-z0-9._~+/=-]")
    return token


def resolve_token(token: str | None) -> str | None:
    """``token``, or ``$PANAMA_TOKEN`` when it is None (None if neither is set)."""
    if token is not None:
        return token
    return environment.token()


def read_token_file(path: str | Path) -> str:
    """The token in ``path`` (surrounding whitespace ignored); refuses files others can read."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text().strip()
    except OSError as exc:
        raise FieldError("token-file", f"cannot read {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise FieldError("token-file", f"{path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    return check_token(text, "token-file")


def write_secret_file(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only (mode 0600): a fresh
    ``O_EXCL | O_NOFOLLOW`` temporary name, every byte written, fsynced, renamed
    (:func:`panama.runtime.files.write_private_file`); OSError leaves ``path`` as it was."""
    write_private_file(path, text)


def job_path(job: str) -> str:
    """``job`` as one URL path segment (quoted; names are validated by the controller)."""
    return quote(job, safe="")


# ---------------------------------------------------------------------- client
def request_json(
    addr: Address,
    method: str,
    path: str,
    body: Any = None,
    *,
    timeout_s: float = 5.0,
    what: str = "server",
    token: str | None = None,
) -> tuple[int, Any]:
    """Send one request and return ``(status, decoded JSON or text)``.

    ``token`` (default ``$PANAMA_TOKEN``) goes in ``Authorization: Bearer``. Raises
    :class:`HttpError` naming ``what`` and the address when the server is unreachable
    or the connection breaks; HTTP error statuses are returned, not raised. A server at
    its connection limit (503 ``connections: ...``, answered before the request is read)
    is asked again with back-off for up to ``min(timeout_s, BUSY_RETRY_S)``.
    """
    deadline = time.monotonic() + min(timeout_s, BUSY_RETRY_S)
    delay = 0.05
    while True:
        status, reply = _request_once(addr, method, path, body, timeout_s, what, token)
        busy = status == 503 and error_text(reply).startswith("connections:")
        if not busy or time.monotonic() + delay >= deadline:
            return status, reply
        time.sleep(delay)
        delay = min(2 * delay, 0.5)


def _request_once(
    addr: Address, method: str, path: str, body: Any, timeout_s: float, what: str, token: str | None
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout_s)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        token = resolve_token(token)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException, socket.timeout) as exc:
        raise HttpError(f"{what} at {addr[0]}:{addr[1]} did not answer {method} {path}: {exc}") from None
    finally:
        conn.close()
    ctype = resp.getheader("Content-Type", "")
    if "json" in ctype:
        try:
            return resp.status, json.loads(data)
        except json.JSONDecodeError:
            pass
    return resp.status, data.decode("utf-8", "replace")


def check_access(addr: Address, token: str | None, what: str = "controller", timeout_s: float = 5.0) -> None:
    """Raise :class:`HttpError` unless the controller at ``addr`` answers an authenticated
    request (``GET /v1/jobs``) with ``token`` (default ``$PANAMA_TOKEN``): it is down, or
    the token is missing or wrong (``status`` 401)."""
    status, body = request_json(addr, "GET", "/v1/jobs", timeout_s=timeout_s, what=what, token=token)
    if status == 401:
        raise HttpError(
            f"{what} at {addr[0]}:{addr[1]} refused the token: {error_text(body)} (the cluster's token goes in "
            f"${TOKEN_ENV} or token=)",
            status,
            body,
        )
    if status != 200:
        raise HttpError(f"{what} at {addr[0]}:{addr[1]} answered HTTP {status}: {error_text(body)}", status, body)


def error_text(body: Any) -> str:
    """The ``error`` field of a JSON error body, or the body itself."""
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return str(body)


# ---------------------------------------------------------------------- servers (aiohttp)
class BadRequest(Exception):
    """Answer ``status`` with ``{"error": message}`` (the message starts with the field)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def auth_middleware(token: str, open_paths: frozenset[str], counters: dict[str, int] | None = None):
    """aiohttp middleware: 401 unless ``Authorization: Bearer <token>`` (constant-time compare)."""
    from aiohttp import web

    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler):
        got = request.headers.get("Authorization", "").encode("utf-8", "replace")
        if hmac.compare_digest(got, expected):
            _AUTHENTICATED.add(id(request.protocol))  # this connection keeps its place (start_site)
            return await handler(request)
        if request.path in open_paths:
            response = await handler(request)
        else:
            if counters is not None:
                counters["unauthorized"] = counters.get("unauthorized", 0) + 1
            why = "missing" if not got else "wrong token"
            hint = f"send Authorization: Bearer <token>; clients take token= or ${TOKEN_ENV}"
            response = web.json_response(
                {"error": f"authorization: {why} ({hint})"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="panama"'},
            )
        response.force_close()  # a connection without the token holds no place once answered
        return response

    check._panama_auth = True  # type: ignore[attr-defined]  # start_site: connections must authenticate
    return check


def errors_middleware(counters: dict[str, int], what: str):
    """aiohttp middleware: BadRequest -> its status; any other exception -> 500, logged once per kind, counted."""
    from aiohttp import web

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


async def read_json_object(request, timeout_s: float = BODY_TIMEOUT_S) -> dict[str, Any]:
    """The request's body as a JSON object, or :class:`BadRequest` (400/408/413), never a 500."""
    from aiohttp import web

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


async def start_site(
    runner,
    host: str,
    port: int,
    *,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    pending_timeout_s: float = PENDING_TIMEOUT_S,
) -> tuple[Any, asyncio.Task]:
    """Listen on ``host:port`` for ``runner`` (an aiohttp ``AppRunner``, set up) with limits
    that a client without the token cannot exhaust.

    A connection is *pending* until it has sent a request with the right token (servers
    with :func:`auth_middleware` answer a request without it with 401 and close the
    connection). Pending connections are closed after ``pending_timeout_s`` without a
    request; one peer address may hold at most half of ``max_connections`` of them (its
    oldest older than ``EVICT_MIN_AGE_S`` is closed when it opens another). When
    ``max_connections`` are open, a new connection closes the oldest pending one older
    than ``EVICT_MIN_AGE_S`` instead of being refused, so
    authenticated clients always find room; only when every connection is authenticated
    or brand new is the newcomer answered 503 and closed. An authenticated connection
    that is not handling a request and has not started one within ``header_timeout_s``
    (since its last request) is closed. Bodies are bounded by :func:`read_json_object`.
    Returns the asyncio server and its watchdog task (close and cancel both on shutdown).
    """
    loop = asyncio.get_running_loop()
    admission = _Admission(loop, runner, max_connections, header_timeout_s, pending_timeout_s)
    srv = await loop.create_server(admission.factory, host, port, reuse_address=True, backlog=128)
    return srv, asyncio.create_task(admission.watchdog())


class _Busy(asyncio.Protocol):
    """Over the limit: answer 503 once the client has sent its request (so it reads the
    answer instead of a reset), or close after a second of silence."""

    def __init__(self, loop: asyncio.AbstractEventLoop, refused: bytes):
        self.loop, self.refused = loop, refused

    def connection_made(self, transport):
        self.transport = transport
        self.timer = self.loop.call_later(1.0, transport.close)

    def data_received(self, data):
        self.timer.cancel()
        if not self.transport.is_closing():
            self.transport.write(self.refused)
            self.transport.close()

    def connection_lost(self, exc):
        self.timer.cancel()


class _Admission:
    """The connection policy of :func:`start_site` for one server: which connections are
    pending or authenticated, which one a newcomer evicts, and the watchdog that closes
    idle ones. ``clocks``: handler -> [opened, since, requests parsed then, peer]."""

    def __init__(self, loop, runner, max_connections: int, header_timeout_s: float, pending_timeout_s: float):
        self.loop = loop
        self.server = runner.server
        self.gated = any(getattr(m, "_panama_auth", False) for m in runner.app.middlewares)
        self.clocks: dict[Any, list] = {}
        self.refused = _busy_body(max_connections)
        self.max_connections = max_connections
        self.per_peer = max(1, max_connections // 2)
        self.header_timeout_s, self.pending_timeout_s = header_timeout_s, pending_timeout_s
        self.counters = ADMISSION_COUNTERS

    def authenticated(self, handler) -> bool:
        return id(handler) in _AUTHENTICATED or (not self.gated and getattr(handler, "_request_count", 0) > 0)

    def pending(self, handler) -> bool:
        return (
            handler.transport is not None
            and not self.authenticated(handler)
            and getattr(handler, "_request_count", 0) == 0
            and getattr(handler, "_current_request", None) is None
        )

    def evict(self, handler, why: str) -> None:
        self.counters[why] = self.counters.get(why, 0) + 1
        self.clocks.pop(handler, None)
        handler.force_close()

    def oldest_pending(self, peer: str | None = None, min_age: float = 0.0):
        now = self.loop.time()
        clocks = self.clocks
        best = None
        for handler in self.server.connections:
            info = clocks.get(handler)
            if info is None or not self.pending(handler) or now - info[0] < min_age:
                continue
            if peer is not None and info[3] != peer:
                continue
            if best is None or info[0] < clocks[best][0]:
                best = handler
        return best

    def check_peer(self, handler) -> None:
        """Runs once the connection is made (its peer is known): one peer's pending connections are capped."""
        clocks = self.clocks
        info = clocks.get(handler)
        transport = handler.transport
        if info is None or transport is None:
            return
        peername = transport.get_extra_info("peername")
        info[3] = peername[0] if peername else "?"
        mine = [h for h in self.server.connections if h in clocks and clocks[h][3] == info[3] and self.pending(h)]
        if len(mine) > self.per_peer:
            victim = self.oldest_pending(info[3], min_age=EVICT_MIN_AGE_S)
            if victim is not None:
                self.evict(victim, "evicted_per_peer")

    def factory(self):
        """The server's protocol factory: a handler, after making room if needed, or :class:`_Busy`."""
        server = self.server
        if sum(1 for h in server.connections if h.transport is not None) >= self.max_connections:
            victim = self.oldest_pending(min_age=EVICT_MIN_AGE_S)
            if victim is None:
                self.counters["refused_busy"] = self.counters.get("refused_busy", 0) + 1
                return _Busy(self.loop, self.refused)
            self.evict(victim, "evicted_pending")
        handler = server()
        _AUTHENTICATED.discard(id(handler))  # a recycled id of a closed connection
        now = self.loop.time()
        self.clocks[handler] = [now, now, 0, None]
        self.loop.call_later(0, self.check_peer, handler)  # after connection_made
        return handler

    async def watchdog(self) -> None:
        """Close connections idle past their limit (``pending_timeout_s`` for pending ones,
        ``header_timeout_s`` for authenticated ones since their last request)."""
        header_timeout_s, pending_timeout_s = self.header_timeout_s, self.pending_timeout_s
        clocks = self.clocks
        while True:
            await asyncio.sleep(min(0.25, pending_timeout_s / 4, header_timeout_s / 4))
            now = self.loop.time()
            live = set(self.server.connections)
            for handler, info in list(clocks.items()):
                opened, since, seen, _ = info
                if handler not in live:
                    if now - opened > 1.0:  # not yet registered, or gone
                        del clocks[handler]
                        _AUTHENTICATED.discard(id(handler))
                    continue
                count = getattr(handler, "_request_count", 0)
                if count != seen or getattr(handler, "_current_request", None) is not None:
                    info[1], info[2] = now, count
                elif now - since > (header_timeout_s if self.authenticated(handler) else pending_timeout_s):
                    self.evict(handler, "closed_idle")
                    _AUTHENTICATED.discard(id(handler))


def _busy_body(limit: int) -> bytes:
    body = json.dumps({"error": f"connections: more than {limit} open, try again later"}).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
