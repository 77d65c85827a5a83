"""The UDP edge of the runtime: addresses, clocks, and a socket that moves PANAMA packets.

Everything that turns packets into datagrams (and back) for the switch daemons and the
worker communicator lives here, on top of :mod:`panama.core.codec`. ECN travels in the
IP header: sockets ask for the received TOS byte (``IP_RECVTOS``) and send ECT(0) by
default (``IP_TOS`` socket option); a packet to be sent with another codepoint (CE)
carries it as an ``IP_TOS`` control message on that one ``sendmsg``.

Batched sends (:meth:`PacketSocket.stage`, :meth:`PacketSocket.flush`): datagrams are
copied at once into their destination's batch (so their payload memory may be reused;
a datagram of another size or ECN codepoint sends the batch before it first, so each
destination receives in emission order), and ``flush`` sends each batch with one UDP GSO
``sendmsg`` where the socket has GSO (:mod:`panama.runtime.net.offload`), else one datagram
per call; counters (``sent_packets``, ``send_errors``...) count datagrams either way.
A socket made with ``offload=True`` also has GRO enabled: its reader must split
coalesced buffers (the switch daemon's batched loop does).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Hashable, Sequence

import numpy as np

from panama.addresses import PORT_ZERO, is_ipv4, unreachable_reason
from panama.core import codec
from panama.core.errors import FieldError
from panama.core.packet import ECT0, Packet
from panama.runtime.net import mmsg
from panama.runtime.net import offload as offload_mod

# Socket buffers: the receive queue plays the role of the switch buffer that PFC keeps
# from overflowing in a real fabric, so it must hold the windows of every sender
# (cwnd_cap bounds them by accelerator memory). The kernel doubles the value asked for
# and caps it at net.core.rmem_max unless the process may use SO_RCVBUFFORCE.
DEFAULT_SOCKET_BUFFER_BYTES = 32 * 1024 * 1024
# Runtime default datagram payload: the largest a UDP datagram holds, 16367 float32
# (65,468 + 28 header + 8 key trailer = 65,504 bytes). Loopback's MTU is 65,536, so such datagrams are
# never fragmented there; per-datagram costs (system calls, Python) dominate, so fewer,
# larger datagrams are faster (docs/runtime-performance.md). Use codec.NIC_PAYLOAD_ELEMS (359) on real
# 1500-byte-MTU NICs.
RUNTIME_PAYLOAD_ELEMS = codec.MAX_PAYLOAD_ELEMS
# Runtime default accelerator memory: 512 slots of RUNTIME_PAYLOAD_ELEMS float32 (32 MiB per
# daemon); with 2 trees per job a leaf advertises cwnd_cap 127 per tree (docs/runtime.md).
RUNTIME_PACKET_MEMORY = 512
# Floor of the workers' tail-loss probe timeout (core.transport: PTO = max(2 SRTT, this));
# 5 ms: no spurious probe in lossless runs on a loaded 2-core host (docs/runtime-performance.md).
RUNTIME_PROBE_FLOOR_S = 0.005
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)  # Linux values; Python does not export them
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_MSG_TRUNC = int(socket.MSG_TRUNC)  # plain int: the enum's '&' is slow
_MAX_DATAGRAM_BYTES = codec.datagram_size(codec.MAX_PAYLOAD_ELEMS)
_NO_KEY = codec.key_trailer(0)
_TOS_CMSG_SPACE = socket.CMSG_SPACE(4)

Address = tuple[str, int]


class AddressError(FieldError):
    """A ``HOST:PORT`` string could not be parsed or used; ``field`` names the option or key."""


def parse_addr(text: str, *, field: str = "address") -> Address:
    """``"127.0.0.1:5000"`` -> ``("127.0.0.1", 5000)``; raises :class:`AddressError` naming ``field``."""
    if not isinstance(text, str) or ":" not in text:
        raise AddressError(field, f"expected HOST:PORT, got {text!r}")
    host, _, port_text = text.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise AddressError(field, f"port of {text!r} is not an integer") from None
    if not host or not 0 <= port <= 65535:
        raise AddressError(field, f"expected HOST:PORT with port in [0, 65535], got {text!r}")
    return host, port


def parse_ipv4_addr(text: object, *, field: str = "address") -> Address:
    """``HOST:PORT`` whose host is an IPv4 literal (``"10.0.0.2:5000"``), never a name: what
    a request body may carry, so no server resolves names (a blocking call) in its event
    loop. :class:`AddressError` naming ``field`` otherwise (a host name, a newline, ...)."""
    if not isinstance(text, str):
        raise AddressError(field, f"expected HOST:PORT strings, got {text!r}")
    host, port = parse_addr(text, field=field)
    if not is_ipv4(host):
        raise AddressError(field, f"host of {text!r} is not an IPv4 address (names are not resolved here)")
    return host, port


def parse_destination(text: object, *, field: str) -> Address:
    """An IPv4 literal ``HOST:PORT`` (:func:`parse_ipv4_addr`) that peers can send to (the one
    rule, :mod:`panama.addresses`: not port 0, unspecified, multicast or broadcast): what a
    request names as somewhere datagrams will be sent. :class:`AddressError` naming ``field``
    otherwise."""
    host, port = parse_ipv4_addr(text, field=field)
    reason = unreachable_reason(host, port)
    if reason == PORT_ZERO:
        raise AddressError(field, f"port must be in [1, 65535], got {text!r}")
    if reason is not None:
        raise AddressError(field, f"{text!r} is not a destination ({reason})")
    return host, port


def format_addr(addr: Address) -> str:
    return f"{addr[0]}:{addr[1]}"


# The origin of now_ps: this process's start, not the boot. The compiled core takes times as
# signed 64-bit picoseconds, 2**63 ps is about 106 days, and a machine's uptime can be longer.
_CLOCK_ORIGIN_NS = time.monotonic_ns()


def now_ps() -> int:
    """Monotonic time in integer picoseconds (the core's time unit) since this process began.

    Only differences are meaningful, and only within one process: every transport reads it from
    its own process. It fits a signed 64-bit integer for about 106 days of the process's life.
    """
    return (time.monotonic_ns() - _CLOCK_ORIGIN_NS) * 1000


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port the OS reports free right now (a race remains; callers retry on EADDRINUSE)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _Stage:
    """Datagrams of equal size staged for one ``(destination, tos)``, back to back in ``buf``."""

    __slots__ = ("to", "tos", "size", "cap", "count", "used", "buf", "view", "floats")

    def __init__(self, to: Hashable, tos: int):
        self.to = to
        self.tos = tos
        self.size = 0
        self.cap = 0
        self.count = 0
        self.used = 0
        self.buf = bytearray(offload_mod.MAX_BATCH_BYTES + 1)
        self.view = memoryview(self.buf)
        self.floats = np.frombuffer(self.buf, dtype="<f4", count=len(self.buf) // 4)


class PacketSocket:
    """A UDP socket that sends and receives :class:`~panama.core.packet.Packet` objects.

    ``send`` encodes into one preallocated buffer and writes it immediately, so emitted
    packets may share memory with their producer (``Accelerator(copy_payloads=False)``).
    ``recv`` fills a caller-owned buffer; the decoded payload is a read-only view into it
    and is valid until that buffer is reused.
    """

    def __init__(
        self,
        bind: Address = ("127.0.0.1", 0),
        *,
        buffer_bytes: int = DEFAULT_SOCKET_BUFFER_BYTES,
        offload: bool = False,
    ):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            force_buffers(sock, buffer_bytes)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
            sock.bind(bind)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.addr: Address = sock.getsockname()
        self._out = bytearray(codec.HEADER_BYTES)  # the header of the datagram being sent
        self._header = memoryview(self._out)
        self._iov: list = [self._header]
        self._peer: Address | None = None  # set by connect()
        # Key trailer of every datagram: one job's (a worker: ``set_key``), or per job id
        # (a daemon: ``trailers``, shared with its control plane).
        self.trailer = _NO_KEY
        self.trailers: dict[int, bytes] | None = None
        self.sent_packets = 0
        self.sent_bytes = 0
        # Send system calls: one per sendmsg (a refused one included) and per GSO send, one
        # per Sender call where it batches (mmsg.BATCHED: one sendmmsg, plus one per refusal).
        self.tx_syscalls = 0
        self.send_errors = 0
        # A send error never propagates: counted per destination and errno name, the
        # last one kept as text (a daemon's /health and /stats report them).
        self.send_errors_by_dest: dict[str, dict[str, int]] = {}
        self.last_send_error: str | None = None
        self._last = 0
        # GSO/GRO (panama.runtime.net.offload): probed only when asked, since GRO changes what
        # a receive returns (the reader must split coalesced buffers).
        self.offload = offload_mod.probe(sock) if offload else offload_mod.Offload()
        self.gso_sends = 0  # sendmsg calls that carried several datagrams
        self.gso_datagrams = 0  # datagrams sent by them
        self.gso_refused: set[tuple] = set()  # (destination, datagram size) the kernel would not segment
        self._stages: dict[tuple, _Stage] = {}
        self._pending: list[_Stage] = []
        self._batch_bytes = offload_mod.MAX_BATCH_BYTES
        self._batch_max = offload_mod.MAX_SEGMENTS
        self._sender = mmsg.Sender(sock)
        # send_each's headers: one slot per datagram of a Sender call.
        self._header_buf = bytearray(codec.HEADER_BYTES * mmsg.MAX_MESSAGES)
        hv = memoryview(self._header_buf)
        self._headers = [hv[k * codec.HEADER_BYTES : (k + 1) * codec.HEADER_BYTES] for k in range(mmsg.MAX_MESSAGES)]

    # ------------------------------------------------------------------ sending
    def send(self, packet: Packet, to: Hashable, ecn: int | None = None) -> int:
        """Encode ``packet`` and send it to ``to`` with IP codepoint ``ecn`` (default: ``packet.ecn``).

        Zero-copy payload: only the header is encoded (:func:`codec.encode_header_into`,
        into a preallocated buffer) and the datagram leaves as a gather of [header,
        payload], so the payload goes from its own memory (user vector, slot row, receive
        buffer) straight to the kernel. Returns the bytes sent (0 when the kernel refused
        the datagram: counted in ``send_errors``; retransmissions recover from it like
        from any loss).
        """
        n = self._encode(packet)
        return self._sendmsg(n, to, packet.ecn if ecn is None else ecn)

    def _encode(self, packet: Packet) -> int:
        """Encode ``packet``'s header into the send buffer and set the gather list [header,
        payload, key trailer] of the datagram :meth:`send`, :meth:`send_all` and
        :meth:`resend` send; returns the datagram's size in bytes."""
        n = codec.encode_header_into(self._out, packet)
        trailer = self.trailer if self.trailers is None else self.trailers.get(packet.job_id, _NO_KEY)
        self._iov = [self._header, packet.payload, trailer] if packet.count else [self._header, trailer]
        self._last = n
        return n

    def send_all(self, packet: Packet, destinations: Sequence[Hashable], tos: int) -> int:
        """Send ``packet`` to every destination in order with IP codepoint ``tos``; returns how many failed.

        Encoded once (header only, as :meth:`send`), then one :class:`~.mmsg.Sender` call
        (one ``sendmmsg`` where compiled: software multicast without a system call per
        copy). Counters as :meth:`send`: ``sent_packets``/``sent_bytes`` per datagram that
        left, each refused destination counted in ``send_errors`` by destination and
        reason. :meth:`resend` afterwards sends the same datagram again.
        """
        n = self._encode(packet)
        iov = self._iov
        peer = self._peer
        if peer is not None and peer in destinations:
            dests = [None if to == peer else to for to in destinations]
        else:
            dests = destinations
        failed = self._sender.send(iov, dests, tos, ECT0)
        sent = len(destinations)
        self.tx_syscalls += 1 if mmsg.BATCHED else sent
        if failed:
            for j, exc in failed:
                self._count_send_error(exc, destinations[j])
            sent -= len(failed)
        self.sent_packets += sent
        self.sent_bytes += n * sent
        return len(failed) if failed else 0

    def send_each(self, packets: Sequence[Packet], to: Hashable) -> int:
        """Send every packet to ``to`` in order, each with its own codepoint (``packet.ecn``);
        returns how many failed.

        As :meth:`send` per packet (header encoded into its own slot of one buffer, payload
        sent from its memory), but up to :data:`~.mmsg.MAX_MESSAGES` datagrams per
        :class:`~.mmsg.Sender` call (one ``sendmmsg`` where compiled). Counters as
        :meth:`send`.
        """
        dest = None if to == self._peer else to
        headers = self._headers
        hbuf = self._header_buf
        trailer = self.trailer
        trailers = self.trailers
        encode = codec.encode_header_into
        failed_total = 0
        for first in range(0, len(packets), mmsg.MAX_MESSAGES):
            chunk = packets[first : first + mmsg.MAX_MESSAGES]
            messages = []
            toses = []
            sizes = []
            for k, packet in enumerate(chunk):
                sizes.append(encode(hbuf, packet, k * codec.HEADER_BYTES))
                if trailers is not None:
                    trailer = trailers.get(packet.job_id, _NO_KEY)
                messages.append([headers[k], packet.payload, trailer] if packet.count else [headers[k], trailer])
                toses.append(packet.ecn)
            failed = self._sender.send_each(messages, [dest] * len(messages), toses, ECT0)
            sent = len(chunk)
            self.tx_syscalls += 1 if mmsg.BATCHED else sent
            sent_bytes = sum(sizes)
            if failed:
                for k, exc in failed:
                    self._count_send_error(exc, to)
                    sent_bytes -= sizes[k]
                sent -= len(failed)
                failed_total += len(failed)
            self.sent_packets += sent
            self.sent_bytes += sent_bytes
        return failed_total

    def enable_offload(self, *, gro: bool = False) -> offload_mod.Offload:
        """Probe (and with ``gro``, enable) UDP offload on this socket now; see :mod:`.offload`."""
        self.offload = offload_mod.probe(self.sock, gro=gro)
        return self.offload

    def set_key(self, key: int) -> None:
        """Carry ``key`` (the job's data-plane key) in every datagram this socket sends."""
        self.trailer = codec.key_trailer(key)

    def resend(self, to: Hashable, ecn: int = ECT0) -> int:
        """Send the datagram of the last :meth:`send` again, to ``to`` (multicast by copies)."""
        return self._sendmsg(self._last, to, ecn)

    def connect(self, peer: Address) -> None:
        """Make ``peer`` this socket's only correspondent (a worker and its first-hop switch).

        The kernel then drops datagrams from any other source, and sends to ``peer`` skip
        the per-datagram address conversion and route lookup. ICMP errors from ``peer``
        surface as ``ConnectionRefusedError`` from receives (the caller reports them).
        """
        self.sock.connect(peer)
        self._peer = (peer[0], peer[1])

    def _sendmsg(self, n: int, to: Hashable, tos: int) -> int:
        self.tx_syscalls += 1
        try:
            if to == self._peer:
                if tos == ECT0:
                    self.sock.sendmsg(self._iov)
                else:
                    self.sock.sendmsg(self._iov, [offload_mod.tos_cmsg(tos)])
            elif tos == ECT0:
                self.sock.sendmsg(self._iov, (), 0, to)
            else:
                self.sock.sendmsg(self._iov, [offload_mod.tos_cmsg(tos)], 0, to)
        except (OSError, TypeError, ValueError, OverflowError) as exc:
            self._count_send_error(exc, to)
            return 0
        self.sent_packets += 1
        self.sent_bytes += n
        return n

    def _count_send_error(self, exc: BaseException, to: Hashable, datagrams: int = 1) -> None:
        """Any destination the kernel (or the address conversion) refuses: counted by
        destination and reason; the caller's retransmissions or the controller's health
        checks deal with the consequences, the sender goes on."""
        self.send_errors += datagrams
        reason = errno.errorcode.get(getattr(exc, "errno", None) or 0) or type(exc).__name__
        dest = format_addr(to) if isinstance(to, tuple) and len(to) == 2 else repr(to)
        per = self.send_errors_by_dest.get(dest)
        if per is None:
            if len(self.send_errors_by_dest) >= 1024:  # bounded: forged destinations cannot grow it
                dest = "other"
            per = self.send_errors_by_dest.setdefault(dest, {})
        per[reason] = per.get(reason, 0) + datagrams
        self.last_send_error = (
            f"send to {dest} failed: {reason}: {os.strerror(exc.errno) if getattr(exc, 'errno', None) else exc}"
        )

    # ------------------------------------------------------------------ batched sending (GSO)
    def stage(self, packet: Packet, to: Hashable, tos: int) -> tuple[_Stage, int, int]:
        """Copy ``packet``'s datagram, codepoint ``tos``, into the batch for ``to``; sent by :meth:`flush`.

        Datagrams of one batch have equal size and codepoint (another size or codepoint
        sends the batch first: order per destination is kept), so one GSO ``sendmsg``
        sends them all; the copy frees the payload's memory
        at once (the caller may reuse it). Returns ``(stage, offset, size_bytes)``, for
        :meth:`stage_copy` to send the same datagram elsewhere (software multicast; the
        destinations of one packet must differ).
        """
        count = packet.count
        size = codec.HEADER_BYTES + codec.FLOAT_BYTES * count + codec.KEY_BYTES
        st = self._stages.get(to)
        if st is None or not st.count or st.size != size or st.tos != tos or st.used + size > st.cap:
            st = self._slot(to, tos, size)
        off = st.used
        codec.encode_header_into(st.buf, packet, off)
        if count:
            start = (off + codec.HEADER_BYTES) >> 2
            st.floats[start : start + count] = packet.payload
        trailer = self.trailer if self.trailers is None else self.trailers.get(packet.job_id, _NO_KEY)
        st.view[off + size - codec.KEY_BYTES : off + size] = trailer
        st.used = off + size
        st.count += 1
        return st, off, size

    def stage_copy(self, src: tuple[_Stage, int, int], to: Hashable, tos: int) -> None:
        """Stage the datagram :meth:`stage` returned again, for ``to``."""
        sst, soff, size = src
        st = self._stages.get(to)
        if st is None or not st.count or st.size != size or st.tos != tos or st.used + size > st.cap:
            st = self._slot(to, tos, size)
        off = st.used
        st.view[off : off + size] = sst.view[soff : soff + size]
        st.used = off + size
        st.count += 1

    def _slot(self, to: Hashable, tos: int, size: int) -> _Stage:
        st = self._stages.get(to)
        if st is None:
            st = self._stages[to] = _Stage(to, tos)
        elif st.count and (size != st.size or tos != st.tos or st.used + size > st.cap):
            self._flush_one(st)  # one batch per destination at a time: its datagrams stay in order
        if not st.count:
            st.size = size
            st.tos = tos
            st.cap = min(self._batch_bytes, self._batch_max * size)  # bytes of a full batch
            self._pending.append(st)
        return st

    def flush(self) -> int:
        """Send every staged datagram (one GSO ``sendmsg`` per batch); returns how many failed."""
        failed = 0
        for st in self._pending:
            if st.count:
                failed += self._flush_one(st, listed=True)
        self._pending.clear()
        return failed

    def _flush_one(self, st: _Stage, listed: bool = False) -> int:
        count, used, to = st.count, st.used, st.to
        st.count = st.used = 0
        if not listed:
            self._pending.remove(st)
        if count > 1 and self.offload.gso and (to, st.size) not in self.gso_refused:
            anc = [offload_mod.segment_cmsg(st.size)]
            if st.tos != ECT0:
                anc.append(offload_mod.tos_cmsg(st.tos))
            try:
                if to == self._peer:
                    self.sock.sendmsg([st.view[:used]], anc)
                else:
                    self.sock.sendmsg([st.view[:used]], anc, 0, to)
            except (OSError, TypeError, ValueError, OverflowError) as exc:
                if not offload_mod.refused(exc):
                    self._count_send_error(exc, to, count)
                    return count
                # The kernel or device cannot segment: one datagram per call from now on, to
                # this destination and size (EINVAL: e.g. segments above its route's MTU) or
                # to all (no GSO in the kernel or no checksum offload in the device).
                name = errno.errorcode.get(exc.errno or 0, str(exc))
                if exc.errno == errno.EINVAL and len(self.gso_refused) < 1024:
                    self.gso_refused.add((to, st.size))
                else:
                    self.offload.gso = False
                self.offload.reason = f"GSO send refused ({name}): one datagram per call"
            else:
                self.tx_syscalls += 1
                self.gso_sends += 1
                self.gso_datagrams += count
                self.sent_packets += count
                self.sent_bytes += used
                return 0
        failed = 0
        size = st.size
        for off in range(0, used, size):
            self._iov = [st.view[off : off + size]]
            if not self._sendmsg(size, to, st.tos):
                failed += 1
        return failed

    # ------------------------------------------------------------------ receiving
    def settimeout(self, timeout_s: float | None) -> None:
        self.sock.settimeout(timeout_s)

    def recv_into(self, buf: bytearray | memoryview) -> tuple[int, int, Address]:
        """Receive one datagram into ``buf``: ``(nbytes, ecn, source)``.

        Follows the socket's timeout (``socket.timeout`` / ``BlockingIOError``).
        A datagram longer than ``buf`` (cut by the kernel) comes back with ``nbytes = -1``.
        """
        n, anc, flags, addr = self.sock.recvmsg_into([buf], _TOS_CMSG_SPACE)
        ecn = offload_mod.parse_cmsgs(anc)[0] if anc else 0
        if flags & _MSG_TRUNC:
            n = -1
        return n, ecn, addr

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


def force_buffers(sock: socket.socket, buffer_bytes: int, *, send: bool = True) -> None:
    """Give ``sock`` a receive (and, with ``send``, a send) buffer of ``buffer_bytes``:
    ``SO_*BUFFORCE`` passes net.core.[rw]mem_max but needs CAP_NET_ADMIN; without it the
    plain option, capped by the kernel."""
    pairs = ((_SO_RCVBUFFORCE, socket.SO_RCVBUF), (_SO_SNDBUFFORCE, socket.SO_SNDBUF))
    for force, opt in pairs if send else pairs[:1]:
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, buffer_bytes)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)


def new_recv_buffer() -> bytearray:
    """A buffer large enough for any PANAMA datagram (plus one byte to detect oversize ones)."""
    return bytearray(_MAX_DATAGRAM_BYTES + 1)
