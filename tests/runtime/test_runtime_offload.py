"""UDP GSO/GRO batching (runtime.net.offload): detection, fallbacks, exact round trips, ECN, malformed segments."""

from __future__ import annotations

import errno
import socket
import threading
import time

import numpy as np
import pytest

from panama.core import codec
from panama.core.packet import CE, ECT0, FLAG_RESULT, Packet
from panama.runtime.net import offload
from panama.runtime.net.udp import PacketSocket, format_addr
from panama.runtime.switch.daemon import SwitchConfig, SwitchDaemon

PE = 8
KEY = 0x1234


def _have_offload() -> offload.Offload:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return offload.probe(s)


HAVE = _have_offload()
needs_gso = pytest.mark.skipif(not HAVE.gso, reason=f"no UDP GSO here: {HAVE.reason}")
needs_gro = pytest.mark.skipif(not (HAVE.gso and HAVE.gro), reason=f"no UDP GSO+GRO here: {HAVE.reason}")


def _pkt(seq, value, job=1, tree=0, flags=0, count=PE):
    return Packet(job, tree, seq, 1, count, flags, payload=np.full(count, value, np.float32))


def _gro_receiver() -> tuple[socket.socket, offload.Offload]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    return rx, offload.probe(rx)


def _receive(rx: socket.socket, datagrams: int) -> tuple[list[tuple[Packet, int]], int]:
    """Receive ``datagrams`` datagrams, splitting coalesced buffers: ([(packet, ecn)], coalesced buffers)."""
    out, coalesced = [], 0
    buf = bytearray(offload.RECV_BUFFER_BYTES)
    while len(out) < datagrams:
        n, anc, _, _ = rx.recvmsg_into([buf], offload.RECV_CMSG_SPACE)
        ecn, seg = offload.parse_cmsgs(anc)
        parts = offload.segments(n, seg)
        coalesced += len(parts) > 1
        for off, size in parts:
            out.append((codec.decode(bytes(buf[off : off + size]), ecn, keys={1: KEY}), ecn))
    return out, coalesced


# ---------------------------------------------------------------------- detection
def test_probe_reports_the_kernel_and_the_environment_forces_the_fallback(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        found = offload.probe(s)
    assert isinstance(found.gso, bool) and isinstance(found.gro, bool) and found.reason
    monkeypatch.setenv(offload.ENV_VAR, "0")
    assert not offload.env_allows()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        off = offload.probe(s)
        assert (off.gso, off.gro) == (False, False) and offload.ENV_VAR in off.reason
        assert s.getsockopt(offload.SOL_UDP, offload.UDP_GRO) == 0 if found.gro else True  # GRO left off
    sock = PacketSocket(offload=True)
    assert not sock.offload.gso
    sock.close()
    d = SwitchDaemon(SwitchConfig(switch_id="sw", payload_elems=PE, offload=True))
    assert not d.batched and d.stats()["offload"]["batched_loop"] is False
    d.close()


class _Refusing:
    """A socket stand-in whose UDP options do not exist (a kernel before 4.18, or not Linux)."""

    def getsockopt(self, *args):
        raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    setsockopt = getsockopt


def test_probe_falls_back_when_the_kernel_lacks_the_options(monkeypatch):
    monkeypatch.delenv(offload.ENV_VAR, raising=False)
    off = offload.probe(_Refusing())
    assert (off.gso, off.gro) == (False, False)
    assert "4.18" in off.reason and "5.0" in off.reason and "ENOPROTOOPT" in off.reason


def test_only_sizes_that_fit_twice_in_one_send_are_batched():
    assert offload.segments_per_send(codec.datagram_size(codec.MAX_PAYLOAD_ELEMS)) == 1
    assert offload.segments_per_send(codec.datagram_size(2300)) == 7  # 9,236-byte datagrams
    assert offload.segments_per_send(codec.datagram_size(361)) == 44  # 1,480-byte datagrams
    assert offload.segments_per_send(100) == offload.MAX_SEGMENTS
    d = SwitchDaemon(SwitchConfig(switch_id="sw", payload_elems=codec.MAX_PAYLOAD_ELEMS, offload=True))
    assert not d.batched and d.sock.offload.reason == "not requested"  # 64 KB datagrams: the plain loop
    d.close()


def test_segments_cut_a_buffer_and_keep_a_short_last_one():
    assert offload.segments(10, 0) == [(0, 10)]
    assert offload.segments(10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert offload.segments(4, 4) == [(0, 4)]


# ---------------------------------------------------------------------- round trips
@needs_gro
def test_gso_send_and_gro_receive_round_trip_exactly():
    tx = PacketSocket(offload=True)
    tx.set_key(KEY)
    rx, off = _gro_receiver()
    assert off.gro
    to = rx.getsockname()
    for seq in range(10):
        tx.stage(_pkt(seq, seq + 0.25), to, ECT0)
    tx.stage(_pkt(10, -1.5, count=3), to, ECT0)  # another size: a batch of its own
    assert tx.flush() == 0
    got, coalesced = _receive(rx, 11)
    assert [p.seq for p, _ in got] == list(range(11))
    for p, ecn in got[:10]:
        assert ecn == ECT0 and p.count == PE and np.array_equal(p.payload, np.full(PE, p.seq + 0.25, np.float32))
    assert got[10][0].count == 3 and np.all(got[10][0].payload == -1.5)
    assert coalesced >= 1  # the kernel handed the batch over as one buffer
    assert tx.gso_sends == 1 and tx.gso_datagrams == 10 and tx.sent_packets == 11
    tx.close()
    rx.close()


@needs_gro
def test_ecn_stays_per_datagram_through_gso_and_gro():
    tx = PacketSocket(offload=True)
    tx.set_key(KEY)
    rx, _ = _gro_receiver()
    to = rx.getsockname()
    marked = {4, 5, 6, 7, 13, 15}  # runs of CE between runs of ECT(0), and single ones

    for seq in range(16):
        tx.stage(_pkt(seq, float(seq)), to, CE if seq in marked else ECT0)
    tx.flush()
    got, coalesced = _receive(rx, 16)
    # In emission order (a batch per destination: another codepoint sends it first;
    # reordered results would look like loss to the workers' fast retransmit).
    assert [p.seq for p, _ in got] == list(range(16))
    for p, ecn in got:
        assert ecn == (CE if p.seq in marked else ECT0), p.seq
        assert np.all(p.payload == p.seq)
    assert sum(ecn == CE for _, ecn in got) == 6
    assert tx.gso_sends == 3 and coalesced >= 1  # 0-3, 4-7 and 8-12 as GSO sends
    tx.close()
    rx.close()


@needs_gso
def test_a_gso_send_the_kernel_refuses_falls_back_to_one_datagram_per_call():
    tx = PacketSocket(offload=True)
    tx.set_key(KEY)
    tx._batch_max = 1000  # noqa: SLF001 - more segments than any kernel accepts: EINVAL
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    count = 200
    for seq in range(count):
        tx.stage(_pkt(seq, float(seq), count=2), rx.getsockname(), ECT0)  # 44-byte datagrams
    assert tx.flush() == 0
    assert "refused" in tx.offload.reason and (rx.getsockname(), 44) in tx.gso_refused  # that destination and size
    buf = bytearray(100)
    for round_ in range(2):  # the second batch goes one per call at once
        if round_:
            for seq in range(count):
                tx.stage(_pkt(seq, float(seq), count=2), rx.getsockname(), ECT0)
            assert tx.flush() == 0
        for seq in range(count):
            n = rx.recv_into(buf)
            p = codec.decode(bytes(buf[:n]), keys={1: KEY})
            assert p.seq == seq and np.all(p.payload == seq)
    assert tx.gso_sends == 0 and tx.sent_packets == 2 * count and tx.send_errors == 0
    tx.close()
    rx.close()


@needs_gso
def test_a_device_refusing_gso_falls_back_and_other_errors_are_counted():
    class Proxy:
        def __init__(self, sock, errno_):
            self.sock, self.errno = sock, errno_

        def sendmsg(self, buffers, anc=(), flags=0, addr=None):
            if any(level == offload.SOL_UDP for level, _, _ in anc):
                raise OSError(self.errno, "refused")
            return self.sock.sendmsg(buffers, anc, flags, addr) if addr else self.sock.sendmsg(buffers, anc)

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    tx = PacketSocket(offload=True)
    real = tx.sock
    tx.sock = Proxy(real, errno.EIO)  # a device without checksum offload
    for seq in range(3):
        tx.stage(_pkt(seq, 1.0), rx.getsockname(), ECT0)
    assert tx.flush() == 0 and not tx.offload.gso and tx.sent_packets == 3
    assert [codec.decode(rx.recv(100)).seq for _ in range(3)] == [0, 1, 2]
    tx.offload.gso = True
    tx.sock = Proxy(real, errno.ENOBUFS)  # not a refusal of GSO: the batch is a counted loss
    for seq in range(3):
        tx.stage(_pkt(seq, 1.0), rx.getsockname(), ECT0)
    assert tx.flush() == 3 and tx.send_errors == 3 and tx.offload.gso
    assert tx.send_errors_by_dest[format_addr(rx.getsockname())] == {"ENOBUFS": 3}
    tx.sock = real
    tx.close()
    rx.close()


# ---------------------------------------------------------------------- the batched daemon
@pytest.fixture
def batched_daemon():
    d = SwitchDaemon(
        SwitchConfig(switch_id="sw", packet_memory=64, payload_elems=PE, ecn_threshold_pkts=0, offload=True)
    )
    if not d.batched:
        d.close()
        pytest.skip(f"no UDP offload here: {d.sock.offload.reason}")
    yield d
    d.close()


def _gso_send(sock: socket.socket, datagrams: list[bytes], to, tos: int = ECT0) -> None:
    anc = [offload.segment_cmsg(len(datagrams[0]))]
    if tos != ECT0:
        anc.append(offload.tos_cmsg(tos))
    sock.sendmsg([b"".join(datagrams)], anc, 0, to)


@needs_gro
def test_the_batched_daemon_sums_gso_batches_exactly_and_counts_a_malformed_segment(batched_daemon):
    d = batched_daemon
    a, b = PacketSocket(), PacketSocket()
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)]}], key=KEY)
    d.start_data_plane()
    good = [codec.encode(_pkt(s, s + 1.0), KEY) for s in range(4)]
    bad = bytearray(good[0])
    bad[0] = 0  # bad magic, same size: cut out of the same GSO send
    wrong_key = codec.encode(_pkt(9, 1.0), KEY + 1)
    _gso_send(a.sock, [good[0], bytes(bad), good[1], wrong_key, good[2], good[3]], d.udp_addr, CE)
    _gso_send(b.sock, [codec.encode(_pkt(s, 10.0 * (s + 1)), KEY) for s in range(4)], d.udp_addr)
    for s in (a, b):
        rx = s.sock
        rx.settimeout(5.0)
        seqs = []
        while len(seqs) < 4:
            data = rx.recv(1000)
            p = codec.decode(data, keys={1: KEY})
            assert p.flags & FLAG_RESULT and np.all(p.payload == 11.0 * (p.seq + 1))
            seqs.append(p.seq)
        assert seqs == [0, 1, 2, 3]
    st = d.stats()
    assert st["malformed"] == {"bad_magic": 1, "bad_key": 1}
    assert st["rx_packets"] == 10 and st["ce_received"] == 4  # CE of a's buffer on each valid datagram
    assert st["rx_syscalls"] < st["rx_packets"]  # GRO handed over whole batches
    assert st["tx_packets"] == 8 and st["offload"]["batched_loop"]
    a.close()
    b.close()


@needs_gro
def test_the_batched_daemon_counts_a_short_last_segment_and_serves_on(batched_daemon):
    d = batched_daemon
    a, b = PacketSocket(), PacketSocket()
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)]}])
    d.start_data_plane()
    full = codec.encode(_pkt(0, 1.0))
    _gso_send(a.sock, [full, full[:-5]], d.udp_addr)  # the last segment is cut short
    b.send(_pkt(0, 2.0), d.udp_addr)
    a.settimeout(5.0)
    buf = bytearray(1000)
    n, _, _ = a.recv_into(buf)
    assert np.all(codec.decode(bytes(buf[:n])).payload == 3.0)
    deadline = time.monotonic() + 10
    while d.stats()["malformed"] != {"count_mismatch": 1}:
        assert time.monotonic() < deadline, d.stats()["malformed"]
        time.sleep(0.01)
    assert d.stats()["data_plane"]["errors"] == 0
    a.close()
    b.close()


# ---------------------------------------------------------------------- a cluster end to end
@needs_gro
def test_a_cluster_allreduce_batches_in_daemons_and_workers_and_stays_exact(cluster):
    from rt_helpers import assert_close_to_reference, random_arrays, run_ranks

    world = 4
    inputs = random_arrays(np.random.default_rng(16), world, (60_001,))  # 61 datagrams of 1000 floats

    def body(comm, rank):
        out = [comm.allreduce(inputs[rank]) for _ in range(3)]
        return out, comm._gso and comm._gro, comm.sock.gso_datagrams, comm.stats()["offload"]["gro_buffers"]  # noqa: SLF001

    before = {k: (s["gso_datagrams"], s["rx_syscalls"], s["rx_packets"]) for k, s in cluster.switch_stats().items()}
    results, errors = run_ranks(cluster.controller, "offload", world, body, timeout_s=60)
    assert errors == [None] * world
    for out in results[0][0]:
        assert out.tobytes() == results[1][0][0].tobytes()
        assert_close_to_reference(out, inputs)
    assert all(gso and sent > 0 for _, gso, sent, _ in results)  # workers sent GSO batches
    assert sum(gro for *_, gro in results) > 0  # and received results coalesced by GRO
    after = cluster.switch_stats()
    assert all(s["offload"]["batched_loop"] for s in after.values())
    gso = sum(s["gso_datagrams"] - before[k][0] for k, s in after.items())
    rx = sum(s["rx_packets"] - before[k][2] for k, s in after.items())
    calls = sum(s["rx_syscalls"] - before[k][1] for k, s in after.items())
    assert gso > 0 and calls < rx  # daemons sent GSO batches and received GRO-coalesced buffers


def test_panama_switch_has_the_offload_switch():
    from click.testing import CliRunner

    from panama.cli import cli

    res = CliRunner().invoke(cli, ["switch", "--help"])
    assert res.exit_code == 0 and "--offload / --no-offload" in res.output


@needs_gro
def test_a_communicator_config_turns_offload_off_and_stays_exact(cluster):
    """``CommunicatorConfig.offload=False`` (``Communicator(offload=False)``): one datagram
    per buffer although batching would pay, same results."""
    from rt_helpers import assert_close_to_reference, random_arrays

    from panama.runtime.settings import CommunicatorConfig
    from panama.runtime.worker.communicator import Communicator

    world = 2
    inputs = random_arrays(np.random.default_rng(17), world, (20_001,))
    config = CommunicatorConfig(timeout_s=60, offload=False)
    results: list = [None] * world

    def run(rank: int) -> None:
        with Communicator.from_config(cluster.controller, "no-offload", rank, world, config) as comm:
            assert comm.config == config
            results[rank] = (comm.allreduce(inputs[rank]), comm.stats())

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert all(r is not None for r in results), "a rank failed"
    for out, stats in results:
        assert_close_to_reference(out, inputs)
        assert stats["io"] != "gso/gro" and stats["offload"]["reason"] == "not requested"
