"""Connection admission of a control server: which connections may stay open, so that a
process without the token cannot crowd out those with it.

A connection is *pending* until it has sent a request with a credential the server
accepts (:func:`panama.runtime.control.server.auth_middleware` marks it
:meth:`Admission.authenticated`; a request without one is answered and its connection
closed). Pending connections are closed after ``pending_timeout_s`` without a request;
one peer address may hold at most half of ``max_connections`` of them. When
``max_connections`` are open, a new connection closes the oldest pending one older than
``EVICT_MIN_AGE_S`` instead of being refused, so authenticated clients always find room;
only when every connection is authenticated or brand new is the newcomer answered 503
and closed. An authenticated connection that has not started a request within
``header_timeout_s`` of its last one is closed. :func:`start_site` listens with it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = [
    "Admission",
    "BUSY_RETRY_S",
    "EVICT_MIN_AGE_S",
    "HEADER_TIMEOUT_S",
    "KEEPALIVE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "PENDING_TIMEOUT_S",
    "start_site",
]

HEADER_TIMEOUT_S = 10.0  # an authenticated connection must start its next request within this
KEEPALIVE_TIMEOUT_S = 30.0  # idle keep-alive connections are closed after this (aiohttp)
MAX_CONNECTIONS = 256  # open connections; past it the oldest pending one is closed (else 503)
PENDING_TIMEOUT_S = 2.0  # a connection must send a request with the token within this
EVICT_MIN_AGE_S = 0.2  # a pending connection younger than this is never closed to make room
BUSY_RETRY_S = 5.0  # clients ask a server at its connection limit again for this long


class Admission:
    """The connection policy of one server (see the module docstring). ``counters``: what
    it closed or refused, by reason (``/v1/health`` ``connections``)."""

    def __init__(
        self,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        pending_timeout_s: float = PENDING_TIMEOUT_S,
    ):
        self.max_connections = max_connections
        self.per_peer = max(1, max_connections // 2)
        self.header_timeout_s, self.pending_timeout_s = header_timeout_s, pending_timeout_s
        self.counters: dict[str, int] = {}
        self.refused = _busy_body(max_connections)
        self.clocks: dict[Any, list] = {}  # handler -> [opened, since, requests parsed then, peer]
        self.trusted: set[int] = set()  # ids of handlers that sent a request with a credential
        self.gated = False  # True once its app checks a token (make_app); False: every served request counts
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: Any = None

    def authenticated(self, handler: Any) -> None:
        """``handler``'s connection sent a request with a credential: it keeps its place."""
        self.trusted.add(id(handler))

    def bind(self, loop: asyncio.AbstractEventLoop, runner: Any) -> None:
        self.loop, self.server = loop, runner.server

    def is_trusted(self, handler) -> bool:
        return id(handler) in self.trusted or (not self.gated and getattr(handler, "_request_count", 0) > 0)

    def pending(self, handler) -> bool:
        return (
            handler.transport is not None
            and not self.is_trusted(handler)
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
        self.trusted.discard(id(handler))  # a recycled id of a closed connection
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
                        self.trusted.discard(id(handler))
                    continue
                count = getattr(handler, "_request_count", 0)
                if count != seen or getattr(handler, "_current_request", None) is not None:
                    info[1], info[2] = now, count
                elif now - since > (header_timeout_s if self.is_trusted(handler) else pending_timeout_s):
                    self.evict(handler, "closed_idle")
                    self.trusted.discard(id(handler))


async def start_site(runner: Any, host: str, port: int, admission: Admission) -> tuple[Any, asyncio.Task]:
    """Listen on ``host:port`` for ``runner`` (an aiohttp ``AppRunner``, set up) under
    ``admission``'s policy (the one its app's auth middleware marks). Returns the asyncio
    server and the admission's watchdog task (close and cancel both on shutdown)."""
    loop = asyncio.get_running_loop()
    admission.bind(loop, runner)
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


def _busy_body(limit: int) -> bytes:
    body = json.dumps({"error": f"connections: more than {limit} open, try again later"}).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
