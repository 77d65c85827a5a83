"""The authenticated client side of the control plane: a blocking one (workers, cluster
tools) and an asyncio one (the controller towards its switch daemons).

:func:`call` sends one request (a :class:`~panama.runtime.control.messages.Body` or
nothing) and returns the answer as the given :class:`~panama.runtime.control.messages.Reply`
model; any other outcome is an :class:`HttpError`: ``status`` None when the server
could not be reached or the connection broke, else the HTTP status (``body`` the decoded
answer, ``str(exc)`` its ``error``) — also for a 200 whose JSON does not fit the model.
:func:`request_json` is the untyped request under it (``(status, decoded JSON or text)``).
Every request carries ``Authorization: Bearer <token>`` (``token=``, default
``$PANAMA_TOKEN``). A server at its connection limit (503 ``connections: ...``) is asked
again with back-off for up to ``min(timeout_s, BUSY_RETRY_S)``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from typing import Any, TypeVar
from urllib.parse import quote

from panama.core.errors import FieldError
from panama.runtime.control.admission import BUSY_RETRY_S
from panama.runtime.control.messages import Body, Reply
from panama.runtime.control.tokens import TOKEN_ENV, resolve_token
from panama.runtime.net.udp import Address

__all__ = ["AsyncClient", "HttpError", "call", "check_access", "error_text", "job_path", "request_json"]

R = TypeVar("R", bound=Reply)


class HttpError(RuntimeError):
    """A request that did not get the answer it asked for; ``status`` is None when the
    server was unreachable, else the HTTP status (``body``: the decoded answer)."""

    def __init__(self, message: str, status: int | None = None, body: Any = None, timed_out: bool = False):
        super().__init__(message)
        self.status = status
        self.body = body
        self.timed_out = timed_out  # unreachable because the answer took too long (not refused)

    @property
    def busy(self) -> bool:
        """A server at its connection limit (503 ``connections: ...``, before reading the request)."""
        return self.status == 503 and error_text(self.body).startswith("connections:")


def error_text(body: Any) -> str:
    """The ``error`` field of a JSON error body, or the body itself."""
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return str(body)


def job_path(job: str) -> str:
    """``job`` as one URL path segment (quoted; names are validated by the controller)."""
    return quote(job, safe="")


def _payload(body: Body | dict | None) -> Any:
    if body is None or isinstance(body, dict):
        return body
    return body.to_json()


def typed(status: int, data: Any, reply: type[R], what: str, method: str, path: str) -> R:
    """``data`` as ``reply`` when ``status`` is 200; :class:`HttpError` otherwise."""
    if status != 200:
        raise HttpError(f"{what} answered {method} {path} with HTTP {status}: {error_text(data)}", status, data)
    try:
        return reply.parse(data)
    except FieldError as exc:
        raise HttpError(f"{what} answered {method} {path} with a {reply.__name__} that does not fit: {exc}", 200, data)


# ---------------------------------------------------------------------- blocking
def call(
    addr: Address,
    method: str,
    path: str,
    body: Body | None,
    reply: type[R],
    *,
    timeout_s: float = 5.0,
    what: str = "server",
    token: str | None = None,
) -> R:
    """One request whose 200 answer is ``reply`` (see the module docstring)."""
    status, data = request_json(addr, method, path, body, timeout_s=timeout_s, what=what, token=token)
    return typed(status, data, reply, f"{what} at {addr[0]}:{addr[1]}", method, path)


def request_json(
    addr: Address,
    method: str,
    path: str,
    body: Body | dict | None = None,
    *,
    timeout_s: float = 5.0,
    what: str = "server",
    token: str | None = None,
) -> tuple[int, Any]:
    """Send one request and return ``(status, decoded JSON or text)``; HTTP error statuses
    are returned, not raised; :class:`HttpError` (``status`` None) when the server is
    unreachable or the connection breaks. Busy servers are asked again (module docstring)."""
    deadline = time.monotonic() + min(timeout_s, BUSY_RETRY_S)
    delay = 0.05
    payload = _payload(body)
    while True:
        status, data = _request_once(addr, method, path, payload, timeout_s, what, token)
        busy = status == 503 and error_text(data).startswith("connections:")
        if not busy or time.monotonic() + delay >= deadline:
            return status, data
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


# ---------------------------------------------------------------------- asyncio
class AsyncClient:
    """Requests from an asyncio service (the controller) to other control servers (the
    daemons), each bounded by ``timeout_s``, with the service's ``token``. Open with
    :meth:`open` inside the loop, close with :meth:`close`."""

    def __init__(self, token: str | None, timeout_s: float):
        self.token = token
        self.timeout_s = timeout_s
        self.session: Any = None

    async def open(self) -> None:
        import aiohttp

        if self.session is None:
            self.session = aiohttp.ClientSession()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def request(self, addr: Address, method: str, path: str, body: Body | None = None) -> tuple[int, Any]:
        """``(status, decoded JSON or text)``; :class:`HttpError` (``status`` None) when the
        server cannot be reached in time (``cause``: the underlying exception)."""
        import aiohttp

        if self.session is None:
            raise HttpError(f"control client closed: cannot {method} {path}")
        url = f"http://{addr[0]}:{addr[1]}{path}"
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            async with self.session.request(method, url, json=_payload(body), timeout=timeout, headers=headers) as resp:
                try:
                    data = await resp.json(content_type=None)
                except (json.JSONDecodeError, aiohttp.ContentTypeError, UnicodeDecodeError):
                    data = await resp.text()
                return resp.status, data
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise HttpError(str(exc) or type(exc).__name__, timed_out=isinstance(exc, asyncio.TimeoutError)) from exc

    async def call(self, addr: Address, method: str, path: str, body: Body | None, reply: type[R], what: str) -> R:
        """One request whose 200 answer is ``reply``; :class:`HttpError` otherwise."""
        status, data = await self.request(addr, method, path, body)
        return typed(status, data, reply, what, method, path)
