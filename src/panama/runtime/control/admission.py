"""Connection admission of a control server: a process without a token cannot crowd out
the clients that have one, whatever the number of connections it opens.

Every accepted connection first meets a :class:`_Gate`, a small protocol that only
buffers bytes until the request's headers are complete (at most ``MAX_HEAD_BYTES``).
Then, in one pass over those bytes: a request carrying a bearer token the server accepts
(``accept(token)``: the cluster's or a job's), or one for an open path (``/health``),
is handed to aiohttp on the same transport (the connection is *trusted* from then on);
any other gets the 401 answer and is closed. Until then the connection is *pending*,
and pending connections cost O(1) each, however many are open:

- they are kept in insertion (= age) order, overall and per peer address, in ordered
  dicts; no operation scans them;
- one peer holds at most ``per_peer`` pending connections: its oldest is closed when it
  opens another; at most ``max_pending`` are pending overall: the oldest is closed;
- a pending connection is closed ``pending_timeout_s`` after it opened (slowloris);
- the listen backlog is ``LISTEN_BACKLOG`` (the kernel caps it at ``somaxconn``), and
  the loop accepts at most ``ACCEPT_BATCH`` connections before it reads again.

A legitimate client sends its request as soon as it is connected, so it is the newest
of the pending connections when its bytes arrive: the gate reads them in the next loop
iteration, long before ``max_pending`` newer connections could close it. Trusted
connections (aiohttp's) are at most ``max_connections``; past it a newcomer is answered
503 ``connections: ...`` (clients retry); one that has not started a request within
``header_timeout_s`` of its last one is closed. ``counters``: what admission closed or
refused, by reason (``/v1/health`` ``connections``).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "Admission",
    "BUSY_RETRY_S",
    "HEADER_TIMEOUT_S",
    "KEEPALIVE_TIMEOUT_S",
    "LISTEN_BACKLOG",
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "MAX_PENDING",
    "PENDING_TIMEOUT_S",
    "start_site",
]

HEADER_TIMEOUT_S = 10.0  # a trusted connection must start its next request within this
KEEPALIVE_TIMEOUT_S = 30.0  # aiohttp's own bound on idle keep-alive connections
MAX_CONNECTIONS = 256  # trusted connections (handed to aiohttp); past it 503
MAX_PENDING = 1024  # connections that have not yet sent complete headers
PENDING_TIMEOUT_S = 2.0  # a connection must send its request's headers within this
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; more is refused (431)
LISTEN_BACKLOG = 4096  # the kernel's accept queue (capped by net.core.somaxconn)
ACCEPT_BATCH = 64  # connections asyncio accepts per readiness event (far below per_peer)
BUSY_RETRY_S = 5.0  # clients ask a server at its connection limit again for this long


class Admission:
    """The connection policy of one server (see the module docstring).

    ``accept(token)``: whether a bearer token lets a request in (set by
    :func:`panama.runtime.control.server.make_app` from the server's token and its
    ``authorize``; None: the server checks no token, complete headers suffice)."""

    def __init__(
        self,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        pending_timeout_s: float = PENDING_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
        per_peer: int | None = None,
    ):
        self.max_connections = max_connections
        self.max_pending = max_pending
        self.per_peer = per_peer if per_peer is not None else max(1, max_pending // 2)
        self.header_timeout_s, self.pending_timeout_s = header_timeout_s, pending_timeout_s
        self.counters: dict[str, int] = {}
        self.accept: Callable[[str], bool] | None = None
        self.open_paths: frozenset[str] = frozenset()
        self.unauthorized: dict[str, int] | None = None  # the server's counters: 401s count there
        self.refused = _busy_response(max_connections)
        self.pending: OrderedDict[_Gate, None] = OrderedDict()
        self.by_peer: dict[str, OrderedDict[_Gate, None]] = {}
        self.trusted: dict[Any, list] = {}  # aiohttp handler -> [since, requests parsed then]
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: Any = None

    def configure(
        self, accept: Callable[[str], bool] | None, open_paths: Iterable[str], unauthorized: dict[str, int]
    ) -> None:
        """What the gate lets in (see the class docstring), and where it counts 401s."""
        self.accept, self.open_paths, self.unauthorized = accept, frozenset(open_paths), unauthorized

    def count(self, why: str) -> None:
        self.counters[why] = self.counters.get(why, 0) + 1

    # ------------------------------------------------------------------ pending
    def factory(self) -> asyncio.Protocol:
        """The listening socket's protocol factory: a gate for every connection."""
        return _Gate(self)

    def enqueue(self, gate: _Gate) -> None:
        """A new pending connection (its peer known): cap its peer's and the overall count."""
        self.pending[gate] = None
        mine = self.by_peer.get(gate.peer)
        if mine is None:
            mine = self.by_peer[gate.peer] = OrderedDict()
        mine[gate] = None
        if len(mine) > self.per_peer:
            self.close(next(iter(mine)), "evicted_per_peer")
        if len(self.pending) > self.max_pending:
            self.close(next(iter(self.pending)), "evicted_pending")

    def forget(self, gate: _Gate) -> None:
        """``gate`` is no longer pending (handed over, answered or closed)."""
        if self.pending.pop(gate, 0) is None:
            mine = self.by_peer.get(gate.peer)
            if mine is not None:
                mine.pop(gate, None)
                if not mine:
                    del self.by_peer[gate.peer]

    def close(self, gate: _Gate, why: str) -> None:
        self.count(why)
        self.forget(gate)
        gate.transport.abort()

    # ------------------------------------------------------------------ trusted
    def hand_over(self, gate: _Gate, head: bytes) -> None:
        """Give a connection whose request may be served to aiohttp (or answer 503 when
        ``max_connections`` trusted ones are open)."""
        self.forget(gate)
        transport = gate.transport
        if len(self.trusted) >= self.max_connections:
            self.prune()  # at most max_connections entries: bounded, and only when at the limit
            if len(self.trusted) >= self.max_connections:
                self.count("refused_busy")
                transport.write(self.refused)
                transport.close()
                return
        handler = self.server()
        self.trusted[handler] = [self.loop.time(), 0]
        transport.set_protocol(handler)
        handler.connection_made(transport)
        handler.data_received(head)

    def prune(self) -> None:
        """Forget trusted connections that closed."""
        for handler in [h for h in self.trusted if h.transport is None]:
            del self.trusted[handler]

    async def watchdog(self) -> None:
        """Close pending connections older than ``pending_timeout_s`` (oldest first: the
        scan stops at the first younger one) and trusted ones idle for ``header_timeout_s``."""
        while True:
            await asyncio.sleep(min(0.25, self.pending_timeout_s / 4, self.header_timeout_s / 4))
            now = self.loop.time()
            while self.pending:
                gate = next(iter(self.pending))
                if now - gate.opened <= self.pending_timeout_s:
                    break
                self.close(gate, "closed_idle")
            self.prune()
            for handler, info in list(self.trusted.items()):
                count = getattr(handler, "_request_count", 0)
                if count != info[1] or getattr(handler, "_current_request", None) is not None:
                    info[0], info[1] = now, count
                elif now - info[0] > self.header_timeout_s:
                    self.count("closed_idle")
                    handler.force_close()
                    if handler.transport is not None:
                        handler.transport.close()


class _Gate(asyncio.Protocol):
    """One pending connection: bytes buffered until the headers are complete, then handed
    to aiohttp or answered 401 (:class:`Admission`)."""

    __slots__ = ("admission", "transport", "peer", "opened", "head")

    def __init__(self, admission: Admission):
        self.admission = admission
        self.head = bytearray()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.opened = self.admission.loop.time()
        peername = transport.get_extra_info("peername")
        self.peer = peername[0] if peername else "?"
        self.admission.enqueue(self)

    def data_received(self, data: bytes) -> None:
        head = self.head
        head += data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > MAX_HEAD_BYTES:
                self.answer(431, "headers: larger than 16 KiB", "refused_headers")
            return
        admission = self.admission
        path, token = _path_and_token(head[:end])
        accept = admission.accept
        if accept is None or path in admission.open_paths or (token is not None and accept(token)):
            admission.hand_over(self, bytes(head))
            return
        if admission.unauthorized is not None:
            admission.unauthorized["unauthorized"] = admission.unauthorized.get("unauthorized", 0) + 1
        why = "missing" if token is None else "wrong token"
        self.answer(401, f"authorization: {why} ({UNAUTHORIZED_HINT})", None)

    def answer(self, status: int, message: str, why: str | None) -> None:
        self.admission.forget(self)
        if why is not None:
            self.admission.count(why)
        self.transport.write(_response(status, message))
        self.transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.admission.forget(self)


UNAUTHORIZED_HINT = "send Authorization: Bearer <token>; clients take token= or $PANAMA_TOKEN"
_REASONS = {401: "Unauthorized", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def _path_and_token(head: bytes) -> tuple[str, str | None]:
    """The request line's path (without the query) and the bearer token of an
    ``Authorization`` header (None when there is none)."""
    lines = bytes(head).split(b"\r\n")
    parts = lines[0].split(b" ")
    path = parts[1].split(b"?", 1)[0].decode("latin-1") if len(parts) >= 2 else ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            value = value.strip()
            if value[:7].lower() == b"bearer ":
                return path, value[7:].strip().decode("latin-1")
            return path, ""
    return path, None


def _response(status: int, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    extra = 'WWW-Authenticate: Bearer realm="panama"\r\n' if status == 401 else ""
    return (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json; charset=utf-8\r\n{extra}"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _busy_response(limit: int) -> bytes:
    return _response(503, f"connections: more than {limit} open, try again later")


async def start_site(runner: Any, host: str, port: int, admission: Admission) -> tuple[Any, asyncio.Task]:
    """Listen on ``host:port`` for ``runner`` (an aiohttp ``AppRunner``, set up) under
    ``admission``'s policy. Returns the asyncio server and the admission's watchdog task
    (close and cancel both on shutdown)."""
    loop = asyncio.get_running_loop()
    admission.loop, admission.server = loop, runner.server
    # asyncio accepts up to ``backlog`` connections per readiness of the listening socket:
    # ACCEPT_BATCH keeps a burst from closing a client's connection before its bytes are
    # read; the kernel's queue is then raised to LISTEN_BACKLOG on the same socket.
    srv = await loop.create_server(admission.factory, host, port, reuse_address=True, backlog=ACCEPT_BATCH)
    for listening in srv.sockets:
        with socket.socket(fileno=os.dup(listening.fileno())) as same:
            same.listen(LISTEN_BACKLOG)
    return srv, asyncio.create_task(admission.watchdog())
