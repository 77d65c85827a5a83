"""Loopback multicast of results: one datagram from a leaf daemon to all its local workers.

A driver feature (no protocol rule): the controller service gives each job's leaf daemon
whose tree children are that job's workers a group (an address of
:data:`GROUP_NETWORK`, inside the administratively scoped 239.0.0.0/8, and a UDP port),
unique per job and leaf among the running jobs of the cluster; the daemon sends a result
whose destination set is exactly the group's members as ONE datagram to the group, and
each worker receives it on a second socket bound to ``(group, port)`` and joined on
127.0.0.1. Only on loopback: the daemon sends multicast only from a socket bound to
127.0.0.1 with ``IP_MULTICAST_IF`` 127.0.0.1, ``IP_MULTICAST_TTL`` 0 (never leaves the
host) and ``IP_MULTICAST_LOOP`` 1; the controller allocates groups only when the daemon
and every member are on 127.0.0.1.

Trust (docs/runtime.md): any local process can join a group and read the results sent to
it (a unicast port could be read by its owner only); data-plane keys still authenticate
senders (a worker accepts a result only from its leaf's unicast address and with the
job's key). Hence loopback clusters only, and an opt-in setting (``multicast_results``).

Everything here either works or says why not (a reason string): callers fall back to
unicast per child and report the reason, nothing raises past them.
"""

from __future__ import annotations

import ipaddress
import socket

from panama.core import codec
from panama.core.errors import FieldError
from panama.runtime.net import mmsg
from panama.runtime.net.udp import Address, force_buffers, format_addr, parse_addr

# Groups are allocated from this block of the administratively scoped range 239.0.0.0/8
# (RFC 2365): 65,536 groups, index i -> 239.80.(i >> 8).(i & 255).
GROUP_NETWORK = ipaddress.IPv4Network("239.80.0.0/16")
SCOPED_RANGE = ipaddress.IPv4Network("239.0.0.0/8")
LOOPBACK = "127.0.0.1"
_LOOPBACK_BYTES = socket.inet_aton(LOOPBACK)


def group_address(index: int) -> str:
    """The ``index``-th group address of :data:`GROUP_NETWORK` (``0 <= index < 65536``)."""
    return str(GROUP_NETWORK.network_address + index)


def parse_group(text: object, field: str) -> Address:
    """``"239.x.y.z:PORT"`` -> ``(host, port)``: an IPv4 group of 239.0.0.0/8, port 1-65535
    (:class:`~panama.core.errors.FieldError` naming ``field`` otherwise)."""
    if not isinstance(text, str):
        raise FieldError(field, f"expected GROUP:PORT, got {text!r}")
    host, port = parse_addr(text, field=field)
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        raise FieldError(field, f"{host!r} is not an IPv4 address") from None
    if ip not in SCOPED_RANGE:
        raise FieldError(field, f"{host} is not in the administratively scoped range {SCOPED_RANGE}")
    if not 1 <= port <= 65535:
        raise FieldError(field, f"port must be in [1, 65535], got {text!r}")
    return host, port


def enable_sender(sock: socket.socket) -> str | None:
    """Make ``sock`` able to send to loopback groups (TTL 0, loop on, interface 127.0.0.1).

    Returns None when it can, else why not (the socket is not bound to 127.0.0.1, or the
    kernel refused an option); unicast sends of the socket are unaffected either way.
    """
    try:
        host = sock.getsockname()[0]
    except OSError as exc:
        return f"socket address unknown ({exc})"
    if host != LOOPBACK:
        return f"data-plane socket is bound to {host}, not {LOOPBACK} (multicast is loopback-only)"
    try:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, _LOOPBACK_BYTES)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        ttl = sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL)
    except OSError as exc:
        return f"kernel refused multicast send options: {exc}"
    if ttl != 0:  # never send multicast that could leave the host
        return f"IP_MULTICAST_TTL reads back {ttl}, not 0"
    return None


def join(group: Address, buffer_bytes: int) -> socket.socket:
    """A UDP socket bound to ``group`` (``SO_REUSEADDR``: every local member binds it),
    joined on 127.0.0.1, with ``IP_RECVTOS`` and a receive buffer of ``buffer_bytes``
    (forced where allowed, as the unicast sockets). Raises OSError (closed) when the kernel
    refuses any step."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        force_buffers(sock, buffer_bytes, send=False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        sock.bind(group)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group[0]) + _LOOPBACK_BYTES)
    except OSError:
        sock.close()
        raise
    return sock


def probe_join(bind_host: str) -> str | None:
    """Whether a worker bound to ``bind_host`` can receive loopback multicast: None when a
    throwaway socket could join a group on 127.0.0.1, else why not (told to the controller
    at registration, so that its leaf sends it unicast)."""
    if bind_host != LOOPBACK:
        return f"worker address {bind_host} is not {LOOPBACK} (multicast is loopback-only)"
    try:
        sock = join((group_address(GROUP_NETWORK.num_addresses - 1), 0), 4096)
    except OSError as exc:
        return f"kernel refused to join a group on {LOOPBACK}: {exc}"
    sock.close()
    return None


class GroupReceiver:
    """A worker's group socket (:func:`join`) and its batch receiver: ``batch`` buffers of
    ``buffer_size`` bytes with their views and payload floats, as the unicast plain path.
    ``datagrams`` counts what it received (results and foreign ones alike)."""

    def __init__(self, group: Address, batch: int, buffer_bytes: int, buffer_size: int):
        self.group = group
        self.sock = join(group, buffer_bytes)
        bufs = [bytearray(buffer_size) for _ in range(batch)]
        self.views = [memoryview(b) for b in bufs]
        self.floats = [codec.payload_view(b) for b in bufs]
        self.rx = mmsg.Receiver(self.sock, bufs)
        self.datagrams = 0

    def text(self) -> str:
        return format_addr(self.group)

    def close(self) -> None:
        self.sock.close()
