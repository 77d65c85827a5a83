"""Batched datagram I/O for the runtime's plain (one datagram per buffer) hot loops.

Two implementations of one contract, chosen once at import:

* :mod:`panama.runtime.net._mmsg`, compiled by ``setup.py`` on Linux: one ``recvmmsg``
  receives a whole batch, one ``sendmmsg`` sends one datagram to all of a node's
  children (software multicast), no Python call and no user-level copy per datagram;
* :class:`PyReceiver` / :class:`PySender` here: the same results with one
  ``recvmsg_into`` / ``sendmsg`` per datagram (no compiler, another OS, or
  ``PANAMA_NO_EXTENSIONS`` set).

:data:`IMPLEMENTATION` names the one in use (``"recvmmsg/sendmmsg"`` or ``"python"``); the
daemon's ``/stats`` and the communicator's ``stats()`` report it as ``io``. The compiled
module is not in :data:`panama._ext.COMPILED_MODULES` (it has no ``.py`` twin to fall
back to: this module is the fallback), so ``panama._ext.compiled()`` does not cover it; a
build older than ``_mmsg.pyx`` is not used (one warning line on stderr says so, as for the
simulator's extensions).

Contract (both):

``Receiver(sock, buffers, sources=True)``
    ``recv(max_count)`` receives up to ``min(max_count, len(buffers))`` datagrams without
    blocking, datagram ``k`` into ``buffers[k]``, and returns how many (0: none waiting).
    For each, ``sizes[k]`` is its length in bytes (-1 when it did not fit its buffer and
    was cut), ``ecns[k]`` the ECN bits of its IP TOS byte (0 without an ``IP_TOS``
    control message: the socket must ask for ``IP_RECVTOS``), ``sources[k]`` its source
    ``(dotted IPv4, port)`` (None for other families; not filled with ``sources=False``).
    A receive error (e.g. ``ConnectionRefusedError`` from an ICMP error on a connected
    socket) raises ``OSError`` when no datagram was received first; after some datagrams
    it is kept by the kernel (compiled) or here (Python) and raised by the next ``recv``.
``Sender(sock)``
    ``send(parts, destinations, tos, default_tos)`` sends one datagram, the
    concatenation of the 1-3 buffers ``parts`` (no copy), to every destination in order
    (at most :data:`MAX_MESSAGES`; ``None``: the socket's connected peer), with IP TOS
    ``tos`` as a control message when it differs from the socket's ``default_tos``. Returns None when every
    destination took it, else a list of ``(index into destinations, exception)`` for the
    destinations the kernel refused, in order; a refused destination never stops the
    others.

    ``send_each(messages, destinations, toses, default_tos)`` sends each message (a list
    of 1-3 buffers, gathered into one datagram without a copy; at most
    :data:`MAX_MESSAGES`) in order, message ``k`` to ``destinations[k]`` (None: the
    connected peer) with IP TOS ``toses[k]`` (a control message when it differs from
    ``default_tos``). Returns None, or ``(index into messages, exception)`` for each
    message the kernel refused, in order; a refused message never stops the ones after
    it.

    The socket must be in blocking mode (the runtime's are): a send waits while the
    socket's buffer is full, in both implementations.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from panama import _ext, environment
from panama.runtime.net.offload import parse_cmsgs, tos_cmsg

_MSG_TRUNC = int(socket.MSG_TRUNC)
_DONTWAIT = int(socket.MSG_DONTWAIT)
_CMSG_SPACE = socket.CMSG_SPACE(4) * 2
_SEND_ERRORS = (OSError, TypeError, ValueError, OverflowError)
# Messages of one Sender.send_each call (the compiled module's MAX_MSGS).
MAX_MESSAGES = 64


class PyReceiver:
    """The pure-Python :class:`Receiver`: one ``recvmsg_into`` per datagram."""

    def __init__(self, sock: socket.socket, buffers: Sequence, sources: bool = True):
        if not buffers:
            raise ValueError("a receiver needs at least one buffer")
        self._recv = sock.recvmsg_into
        self._iovs = [[memoryview(b)] for b in buffers]
        self.capacity = len(buffers)
        self.sizes = [0] * self.capacity
        self.ecns = [0] * self.capacity
        self.sources: list = [None] * self.capacity
        self._want_sources = sources
        self._pending: OSError | None = None

    def recv(self, max_count: int) -> int:
        if self._pending is not None:
            exc, self._pending = self._pending, None
            raise exc
        recv = self._recv
        iovs = self._iovs
        sizes, ecns, sources = self.sizes, self.ecns, self.sources
        want_sources = self._want_sources
        count = min(max_count, self.capacity)
        k = 0
        while k < count:
            try:
                n, anc, flags, src = recv(iovs[k], _CMSG_SPACE, _DONTWAIT)
            except BlockingIOError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries these
                continue
            except OSError as exc:
                if not k:
                    raise
                self._pending = exc
                break
            ecns[k] = parse_cmsgs(anc)[0] if anc else 0
            sizes[k] = -1 if flags & _MSG_TRUNC else n
            if want_sources:
                sources[k] = src if isinstance(src, tuple) and len(src) == 2 else None
            k += 1
        return k


class PySender:
    """The pure-Python :class:`Sender`: one ``sendmsg`` per destination."""

    def __init__(self, sock: socket.socket):
        self._sendmsg = sock.sendmsg

    def send(self, parts: Sequence, destinations: Sequence, tos: int, default_tos: int) -> list | None:
        if not 1 <= len(parts) <= 3:
            raise ValueError("a datagram is one to three buffers")
        if len(destinations) > MAX_MESSAGES:
            raise ValueError(f"at most {MAX_MESSAGES} destinations per send")
        count = len(destinations)
        return self.send_each([parts] * count, destinations, [tos] * count, default_tos)

    def send_each(
        self, messages: Sequence, destinations: Sequence, toses: Sequence[int], default_tos: int
    ) -> list | None:
        if len(messages) > MAX_MESSAGES:
            raise ValueError(f"at most {MAX_MESSAGES} messages per send_each")
        if len(toses) != len(messages) or len(destinations) != len(messages):
            raise ValueError("send_each needs one destination and one TOS per message")
        sendmsg = self._sendmsg
        failed = None
        for k, parts in enumerate(messages):
            if not 1 <= len(parts) <= 3:
                raise ValueError("a datagram is one to three buffers")
        for k, parts in enumerate(messages):
            to = destinations[k]
            tos = toses[k]
            anc = () if tos == default_tos else [tos_cmsg(tos)]
            try:
                if to is None:
                    sendmsg(parts, anc)
                else:
                    sendmsg(parts, anc, 0, to)
            except _SEND_ERRORS as exc:
                if failed is None:
                    failed = []
                failed.append((k, exc))
        return failed


def _compiled():
    """The compiled module, unless switched off, not built, or older than its ``.pyx`` (an
    edited source in an editable install that was not rebuilt: as :mod:`panama._ext`)."""
    if environment.no_extensions():
        return None
    try:
        from panama.runtime.net import _mmsg
    except ImportError:
        return None
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mmsg.pyx")
    try:
        stale = os.path.getmtime(source) > os.path.getmtime(_mmsg.__file__)
    except (OSError, TypeError):  # no source beside it (an installed wheel): use what was built
        stale = False
    if stale:  # one line, once per process (this runs at import): the fallback is slower
        _ext.warn_stale(["_mmsg"], "the pure-Python socket I/O (one system call per datagram)")
        return None
    return _mmsg


_MOD = _compiled()
if _MOD is not None:
    Receiver = _MOD.Receiver
    Sender = _MOD.Sender
    IMPLEMENTATION: str = _MOD.IMPLEMENTATION
else:
    Receiver = PyReceiver
    Sender = PySender
    IMPLEMENTATION = "python"
# One system call per Receiver.recv (compiled) or one per datagram (Python).
BATCHED = _MOD is not None

__all__ = ["BATCHED", "IMPLEMENTATION", "MAX_MESSAGES", "PyReceiver", "PySender", "Receiver", "Sender"]
