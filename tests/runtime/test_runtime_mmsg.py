"""panama.runtime.net.mmsg: the compiled (recvmmsg/sendmmsg) and pure-Python batched I/O give the same results."""

from __future__ import annotations

import select
import socket

import numpy as np
import pytest

from panama.core import codec
from panama.core.packet import CE, ECT0, Packet
from panama.runtime.net import mmsg
from panama.runtime.net.udp import PacketSocket, format_addr

IMPLS = [pytest.param((mmsg.PyReceiver, mmsg.PySender), id="python")]
try:
    from panama.runtime.net import _mmsg
except ImportError:  # not built here: the Python classes are what the runtime uses
    _mmsg = None
IMPLS.append(
    pytest.param(
        (_mmsg.Receiver, _mmsg.Sender) if _mmsg else None,
        id="compiled",
        marks=pytest.mark.skipif(_mmsg is None, reason="panama.runtime.net._mmsg not built"),
    )
)


def _udp(tos: int = ECT0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    s.bind(("127.0.0.1", 0))
    return s


def _wait_readable(s: socket.socket, timeout_ms: int = 5000) -> None:
    p = select.poll()
    p.register(s, select.POLLIN)
    assert p.poll(timeout_ms), "nothing arrived"


class _Rx:
    """A receiver under test with its socket and buffers."""

    def __init__(self, impl, sock, buffers, sources=True):
        self.rx = impl[0](sock, buffers, sources)
        self.sock, self.bufs = sock, buffers

    def recv(self, max_count: int) -> int:
        return self.rx.recv(max_count)

    def all(self, want: int) -> list[tuple]:
        """``want`` datagrams as (size, ecn, source, contents), with as many recv calls as it takes."""
        rx, got = self.rx, []
        while len(got) < want:
            _wait_readable(self.sock)
            n = rx.recv(want - len(got))
            got += [
                (rx.sizes[k], rx.ecns[k], rx.sources[k], bytes(self.bufs[k][: max(rx.sizes[k], 0)])) for k in range(n)
            ]
        return got


_receiver = _Rx


def _recv_all(rx: _Rx, want: int) -> list[tuple]:
    return rx.all(want)


@pytest.fixture(params=IMPLS)
def impl(request):
    return request.param


def test_receive_batch_sizes_ecn_sources_and_cut(impl):
    rx_sock, a, b = _udp(), _udp(), _udp()
    try:
        bufs = [bytearray(100) for _ in range(8)]
        rx = _receiver(impl, rx_sock, bufs)
        assert rx.recv(8) == 0  # nothing waiting: no block, no error
        to = rx_sock.getsockname()
        a.sendto(b"x" * 10, to)
        b.sendmsg([b"y" * 99], [(socket.IPPROTO_IP, socket.IP_TOS, bytes((CE,)))], 0, to)
        a.sendto(b"z" * 100, to)  # fills the buffer exactly: kept
        a.sendto(b"w" * 101, to)  # one byte too many: cut
        got = _recv_all(rx, 4)
        assert got == [
            (10, ECT0, a.getsockname(), b"x" * 10),
            (99, CE, b.getsockname(), b"y" * 99),
            (100, ECT0, a.getsockname(), b"z" * 100),
            (-1, ECT0, a.getsockname(), b""),
        ]
        assert rx.recv(8) == 0
    finally:
        for s in (rx_sock, a, b):
            s.close()


def test_receive_without_sources_and_max_count(impl):
    rx_sock, a = _udp(), _udp()
    try:
        bufs = [bytearray(64) for _ in range(2)]
        rx = _receiver(impl, rx_sock, bufs, sources=False)
        for i in range(3):
            a.sendto(bytes([i]) * 5, rx_sock.getsockname())
        _wait_readable(rx_sock)
        first = []
        while len(first) < 2:
            n = rx.recv(5)  # capped by the two buffers
            assert n <= 2
            first += [bytes(bufs[k][: rx.rx.sizes[k]]) for k in range(n)]
        assert first == [b"\x00" * 5, b"\x01" * 5]
        assert rx.rx.sources == [None, None]
        _wait_readable(rx_sock)
        assert rx.recv(1) == 1 and bytes(bufs[0][:5]) == b"\x02" * 5
    finally:
        rx_sock.close()
        a.close()


def test_receive_error_on_connected_socket(impl):
    """ICMP port unreachable surfaces as ConnectionRefusedError, as from recvmsg_into."""
    s, gone = _udp(), _udp()
    dead = gone.getsockname()
    gone.close()
    try:
        s.connect(dead)
        rx = _receiver(impl, s, [bytearray(64)])
        s.send(b"hello")
        with pytest.raises(ConnectionRefusedError):
            for _ in range(1000):
                select.select([s], [], [], 0.05)
                rx.recv(1)
    finally:
        s.close()


def test_send_to_all_children_in_order_with_tos(impl):
    tx = _udp()
    kids = [_udp() for _ in range(3)]
    try:
        sender = impl[1](tx)
        parts = [b"head", memoryview(bytearray(b"payload")), b"key!"]
        dests = [k.getsockname() for k in kids]
        assert sender.send(parts, dests, ECT0, ECT0) is None
        assert sender.send(parts[:2], dests, CE, ECT0) is None
        for k in kids:
            rx = _receiver(impl, k, [bytearray(64) for _ in range(2)])
            got = _recv_all(rx, 2)
            assert [(g[0], g[1], g[3]) for g in got] == [
                (15, ECT0, b"headpayloadkey!"),
                (11, CE, b"headpayload"),
            ]
            assert got[0][2] == tx.getsockname()
    finally:
        tx.close()
        for k in kids:
            k.close()


def test_send_errors_per_destination_and_names(impl):
    """A refused destination (broadcast without SO_BROADCAST) fails alone; the others get the
    datagram; a host name goes through the resolver like sendmsg's."""
    tx, ok1, ok2 = _udp(), _udp(), _udp()
    try:
        sender = impl[1](tx)
        port = ok2.getsockname()[1]
        dests = [ok1.getsockname(), ("255.255.255.255", 9), ("localhost", port)]
        failed = sender.send([b"abc"], dests, ECT0, ECT0)
        assert [j for j, _ in failed] == [1]
        assert isinstance(failed[0][1], PermissionError)
        for k in (ok1, ok2):
            _wait_readable(k)
            assert k.recv(16) == b"abc"
    finally:
        for s in (tx, ok1, ok2):
            s.close()


def test_send_to_connected_peer(impl):
    tx, rx_sock = _udp(), _udp()
    try:
        tx.connect(rx_sock.getsockname())
        sender = impl[1](tx)
        big = bytearray(range(256)) * 255  # 65,280 bytes: one large datagram, no copy
        assert sender.send([b"h" * 28, memoryview(big), b"k" * 8], [None], ECT0, ECT0) is None
        rx = _receiver(impl, rx_sock, [bytearray(70000)])
        (got,) = _recv_all(rx, 1)
        assert got[0] == 28 + len(big) + 8 and got[3] == b"h" * 28 + bytes(big) + b"k" * 8
    finally:
        tx.close()
        rx_sock.close()


def test_runtime_reports_the_implementation():
    assert mmsg.IMPLEMENTATION in ("python", "recvmmsg/sendmmsg")
    assert mmsg.BATCHED == (mmsg.IMPLEMENTATION != "python")


def test_send_each_in_order_with_per_message_tos(impl):
    tx, rx_sock = _udp(), _udp()
    try:
        sender = impl[1](tx)
        payload = bytearray(b"p" * 1000)
        messages = [[b"h%d" % k, memoryview(payload)[: 10 * k], b"kk"] for k in range(1, 6)] + [[b"ack", b"kk"]]
        toses = [ECT0, CE, ECT0, ECT0, CE, ECT0]
        assert sender.send_each(messages, [rx_sock.getsockname()] * 6, toses, ECT0) is None
        rx = _receiver(impl, rx_sock, [bytearray(2000) for _ in range(8)])
        got = _recv_all(rx, 6)
        assert [(g[1], g[3]) for g in got] == [(t, b"".join(bytes(p) for p in m)) for m, t in zip(messages, toses)]
        assert {g[2] for g in got} == {tx.getsockname()}
        tx.connect(rx_sock.getsockname())
        assert sender.send_each([[b"one"], [b"two"]], [None, None], [ECT0, ECT0], ECT0) is None
        assert [g[3] for g in _recv_all(rx, 2)] == [b"one", b"two"]
        with pytest.raises(ValueError):
            sender.send_each(
                [[b"x"]] * (mmsg.MAX_MESSAGES + 1),
                [None] * (mmsg.MAX_MESSAGES + 1),
                [ECT0] * (mmsg.MAX_MESSAGES + 1),
                ECT0,
            )
    finally:
        tx.close()
        rx_sock.close()


def test_send_each_errors_and_names(impl):
    """Every refused message is reported (the ones after it still go); a host name resolves."""
    tx, rx_sock = _udp(), _udp()
    try:
        sender = impl[1](tx)
        failed = sender.send_each([[b"a"], [b"b"]], [("255.255.255.255", 9)] * 2, [ECT0, CE], ECT0)
        assert [k for k, _ in failed] == [0, 1] and all(isinstance(e, PermissionError) for _, e in failed)
        too_big = bytes(70000)  # above the UDP limit: EMSGSIZE for that one only
        port = rx_sock.getsockname()[1]
        for to in (("127.0.0.1", port), ("localhost", port)):
            failed = sender.send_each([[b"x"], [too_big], [b"y"]], [to] * 3, [ECT0] * 3, ECT0)
            assert [k for k, _ in failed] == [1] and isinstance(failed[0][1], OSError)
            rx = _receiver(impl, rx_sock, [bytearray(64) for _ in range(2)])
            assert [g[3] for g in _recv_all(rx, 2)] == [b"x", b"y"]
    finally:
        tx.close()
        rx_sock.close()


def _packet(seq: int, count: int, ecn: int = ECT0):
    return Packet(1, 0, seq, 1, count, 0, ecn=ecn, payload=np.full(count, seq, np.float32) if count else None)


def test_packet_socket_send_all_and_send_each_count_like_send(impl):
    """PacketSocket's multicast (send_all) and many-datagram (send_each) sends: same datagrams,
    same counters and per-destination errors as one send per datagram."""
    tx = PacketSocket()
    tx._sender = impl[1](tx.sock)  # noqa: SLF001 - the implementation under test
    tx.set_key(7)
    kids = [PacketSocket() for _ in range(2)]
    try:
        bad = ("255.255.255.255", 9)
        dests = [kids[0].addr, bad, kids[1].addr]
        assert tx.send_all(_packet(0, 4), dests, CE) == 1
        assert tx.sent_packets == 2 and tx.sent_bytes == 2 * codec.datagram_size(4)
        assert tx.send_errors == 1 and tx.send_errors_by_dest[format_addr(bad)] == {"EACCES": 1}
        tx.connect(kids[0].addr)
        assert tx.send_each([_packet(1, 4), _packet(2, 0), _packet(3, 2, CE)], kids[0].addr) == 0
        assert tx.sent_packets == 5
        rx = _receiver(impl, kids[0].sock, [bytearray(128) for _ in range(4)])
        got = [codec.decode(g[3], g[1], keys={1: 7}) for g in _recv_all(rx, 4)]
        assert [(p.seq, p.count, p.ecn) for p in got] == [(0, 4, CE), (1, 4, ECT0), (2, 0, ECT0), (3, 2, CE)]
        assert [float(p.payload[0]) for p in got if p.count] == [0.0, 1.0, 3.0]
        many = [_packet(s, 1) for s in range(mmsg.MAX_MESSAGES + 5)]  # more than one Sender call
        assert tx.send_each(many, kids[0].addr) == 0
        rx = _receiver(impl, kids[0].sock, [bytearray(128) for _ in range(16)])
        assert [codec.decode(g[3]).seq for g in _recv_all(rx, len(many))] == list(range(len(many)))
    finally:
        tx.close()
        for k in kids:
            k.close()


def test_bad_arguments_raise_alike(impl):
    tx = _udp()
    try:
        sender = impl[1](tx)
        with pytest.raises(ValueError):
            sender.send([], [None], ECT0, ECT0)
        with pytest.raises(ValueError):
            sender.send([b"a"] * 4, [None], ECT0, ECT0)
        with pytest.raises(ValueError):
            sender.send([b"a"], [None] * (mmsg.MAX_MESSAGES + 1), ECT0, ECT0)
        with pytest.raises(ValueError):
            sender.send_each([[b"a"], []], [None, None], [ECT0, ECT0], ECT0)
        with pytest.raises(ValueError):
            sender.send_each([[b"a"]], [None, None], [ECT0], ECT0)
        # A destination that is no address at all is refused like any other, the others served.
        rx = _udp()
        failed = sender.send([b"ok"], [["not", "hashable"], (["x"], 1), rx.getsockname()], ECT0, ECT0)
        assert [j for j, _ in failed] == [0, 1]
        assert _recv_all(_receiver(impl, rx, [bytearray(8)]), 1)[0][3] == b"ok"
        rx.close()
        with pytest.raises(ValueError):
            impl[0](tx, [])
    finally:
        tx.close()


@pytest.mark.skipif(_mmsg is None, reason="panama.runtime.net._mmsg not built")
def test_a_stale_build_falls_back_with_one_warning_line(monkeypatch, capsys):
    """A ``_mmsg`` older than its ``.pyx`` is not used, and stderr says so (once, at import)."""
    from panama import environment

    monkeypatch.delenv(environment.NO_EXTENSIONS, raising=False)
    assert mmsg._compiled() is _mmsg and capsys.readouterr().err == ""
    real = mmsg.os.path.getmtime
    monkeypatch.setattr(mmsg.os.path, "getmtime", lambda p: real(p) + (1e6 if str(p).endswith(".pyx") else 0))
    assert mmsg._compiled() is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "older than their sources (_mmsg)" in err and "build_ext" in err
