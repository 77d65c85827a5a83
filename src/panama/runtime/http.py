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
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

from panama.core.errors import FieldError
from panama.runtime.udp import Address

log = logging.getLogger("panama.http")

TOKEN_ENV = "PANAMA_TOKEN"
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
MAX_CONNECTIONS = 256  # more concurrent connections are answered 503 and closed


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
    env = os.environ.get(TOKEN_ENV, "").strip()
    return env or None


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
    """Write ``text`` to ``path`` atomically, readable by the owner only (mode 0600)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, p)


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
    or the connection breaks; HTTP error statuses are returned, not raised.
    """
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
        if request.path not in open_paths:
            got = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(got, expected):
                if counters is not None:
                    counters["unauthorized"] = counters.get("unauthorized", 0) + 1
                why = "missing" if not got else "wrong token"
                return web.json_response(
                    {
                        "error": f"authorization: {why} (send Authorization: Bearer <token>; clients take token= or "
                        f"${TOKEN_ENV})"
                    },
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="panama"'},
                )
        return await handler(request)

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
    runner, host: str, port: int, *, max_connections: int = MAX_CONNECTIONS, header_timeout_s: float = HEADER_TIMEOUT_S
) -> tuple[Any, asyncio.Task]:
    """Listen on ``host:port`` for ``runner`` (an aiohttp ``AppRunner``, set up) with limits.

    More than ``max_connections`` concurrent connections: the new one is answered 503 and
    closed. A connection that is not handling a request and has not started one within
    ``header_timeout_s`` (since it opened or since its last request) is closed: this bounds
    both idle connections and headers trickled in slowly. Bodies are bounded by
    :func:`read_json_object`. Returns the asyncio server and its watchdog task (close
    and cancel both on shutdown).
    """
    loop = asyncio.get_running_loop()
    server = runner.server
    clocks: dict[Any, tuple[float, int]] = {}  # handler -> (since, requests parsed then)
    refused = _busy_body(max_connections)

    class Busy(asyncio.Protocol):
        """Over the limit: answer 503 once the client has sent its request (so it reads the
        answer instead of a reset), or close after a second of silence."""

        def connection_made(self, transport):
            self.transport = transport
            self.timer = loop.call_later(1.0, transport.close)

        def data_received(self, data):
            self.timer.cancel()
            if not self.transport.is_closing():
                self.transport.write(refused)
                self.transport.close()

        def connection_lost(self, exc):
            self.timer.cancel()

    def factory():
        if len(server.connections) >= max_connections:
            return Busy()
        handler = server()
        clocks[handler] = (loop.time(), 0)
        return handler

    async def watchdog() -> None:
        while True:
            await asyncio.sleep(min(1.0, header_timeout_s / 4))
            now = loop.time()
            live = set(server.connections)
            for handler, (since, seen) in list(clocks.items()):
                if handler not in live:
                    if now - since > 1.0:  # not yet registered, or gone
                        del clocks[handler]
                    continue
                count = getattr(handler, "_request_count", 0)
                if count != seen or getattr(handler, "_current_request", None) is not None:
                    clocks[handler] = (now, count)
                elif now - since > header_timeout_s:
                    handler.force_close()
                    transport = handler.transport
                    if transport is not None:
                        transport.close()
                    del clocks[handler]

    srv = await loop.create_server(factory, host, port, reuse_address=True, backlog=128)
    return srv, asyncio.create_task(watchdog())


def _busy_body(limit: int) -> bytes:
    body = json.dumps({"error": f"connections: more than {limit} open, try again later"}).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
