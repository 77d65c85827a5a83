"""Tiny blocking HTTP/JSON client used by workers and the cluster tools (no event loop)."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from panama.runtime.udp import Address


class HttpError(RuntimeError):
    """The server could not be reached or did not answer JSON; ``status`` is None when unreachable."""

    def __init__(self, message: str, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


def request_json(
    addr: Address, method: str, path: str, body: Any = None, *, timeout_s: float = 5.0, what: str = "server"
) -> tuple[int, Any]:
    """Send one request and return ``(status, decoded JSON or text)``.

    Raises :class:`HttpError` naming ``what`` and the address when the server is unreachable
    or the connection breaks; HTTP error statuses are returned, not raised.
    """
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout_s)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
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
