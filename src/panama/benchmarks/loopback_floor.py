"""What the kernel alone charges for moving a 64 KB block over loopback, by UDP and by TCP.

The floor under every one-host allreduce number of ``panama bench allreduce``: a
PANAMA allreduce is a number of UDP datagram sends and receives, gloo's ring a number of
bytes through TCP streams, and on one host each of them costs CPU whoever does it.

:func:`measure_udp` sends ``datagrams`` datagrams of ``block_bytes`` the way the runtime
does (``sendmsg`` of [header, payload], socket connected to the receiver, 32 MiB
buffers) to a forked receiver that takes them with ``recvmsg_into`` into one reused
buffer, asking for the IP TOS byte as the daemons do. :func:`measure_tcp` streams the
same number of blocks through one loopback TCP connection (``sendall`` of each block,
``recv_into`` a block buffer), as gloo's pairs do. Both sides measure their own CPU time
(user + system, ``time.process_time``), so each result is CPU per block on each side, wherever the
kernel charged it (loopback delivery runs in the sender's system call).

:func:`floor_ms` turns counts into CPU milliseconds: PANAMA's datagrams sent and received
per allreduce (measured by the benchmark) at the UDP costs, gloo's ring
(``2 (n - 1) / n`` of the vector sent and received by each of ``n`` ranks) at the TCP
costs. Zero Python, zero summing: a lower bound for each, and their quotient is the
ratio the two would reach on this host if both were bound by the kernel alone.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from typing import Any

from panama.core import codec
from panama.runtime.net.udp import DEFAULT_SOCKET_BUFFER_BYTES, RUNTIME_PAYLOAD_ELEMS, force_buffers

BLOCK_BYTES = codec.datagram_size(RUNTIME_PAYLOAD_ELEMS)  # one runtime datagram: 65,504 bytes
BUFFER_BYTES = DEFAULT_SOCKET_BUFFER_BYTES  # the runtime's sockets'
HEADER_BYTES = codec.HEADER_BYTES
WAIT_S = 30.0


def _cpu_s() -> float:
    return time.process_time()  # user + system of this process, ns resolution (os.times: 10 ms ticks)


def _udp_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    force_buffers(s, BUFFER_BYTES)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("127.0.0.1", 0))
    return s


def _udp_receiver(sock: socket.socket, count: int, block_bytes: int, ready, queue) -> None:
    buf = memoryview(bytearray(block_bytes + 1))
    iov = [buf]
    space = socket.CMSG_SPACE(4)
    sock.settimeout(5.0)
    ready.set()
    got = 0
    c0 = None
    try:
        while got < count:
            sock.recvmsg_into(iov, space)
            if c0 is None:
                c0 = _cpu_s()
            got += 1
    except TimeoutError:
        pass  # the sender's socket buffer overflowed: count what arrived
    queue.put((got, 0.0 if c0 is None else _cpu_s() - c0))


def _tcp_receiver(listener: socket.socket, total_bytes: int, block_bytes: int, ready, queue) -> None:
    buf = memoryview(bytearray(block_bytes))
    listener.settimeout(WAIT_S)
    ready.set()
    got = 0
    c0 = None
    try:
        conn, _ = listener.accept()
        conn.settimeout(5.0)
        with conn:
            while got < total_bytes:
                n = conn.recv_into(buf)
                if not n:
                    break
                if c0 is None:
                    c0 = _cpu_s()
                got += n
    except TimeoutError:
        pass
    queue.put((got, 0.0 if c0 is None else _cpu_s() - c0))


def _start(target, args: tuple):
    ctx = mp.get_context("fork")
    ready, queue = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, ready, queue), daemon=True)
    proc.start()
    if not ready.wait(WAIT_S):
        proc.kill()
        raise RuntimeError(f"loopback floor: the receiver process did not start within {WAIT_S:g} s")
    return proc, queue


def _finish(proc, queue, what: str) -> tuple[int, float]:
    try:
        got, cpu = queue.get(timeout=WAIT_S)
    except Exception:
        raise RuntimeError(f"loopback floor: the {what} receiver reported nothing within {WAIT_S:g} s") from None
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    return got, cpu


def measure_udp(datagrams: int = 10_000, block_bytes: int = BLOCK_BYTES) -> dict[str, float]:
    """CPU microseconds per datagram of ``block_bytes``: ``send_us``, ``recv_us`` (and the
    counts sent and received; a receiver that fell behind counts what arrived)."""
    rx, tx = _udp_socket(), _udp_socket()
    try:
        tx.connect(rx.getsockname())
        proc, queue = _start(_udp_receiver, (rx, datagrams, block_bytes))
        iov = [bytearray(HEADER_BYTES), memoryview(bytearray(block_bytes - HEADER_BYTES))]
        c0 = _cpu_s()
        for i in range(datagrams):
            tx.sendmsg(iov)
            if i % 64 == 63:
                os.sched_yield()  # let the receiver drain, as a window-limited sender would
        send_cpu = _cpu_s() - c0
        got, recv_cpu = _finish(proc, queue, "UDP")
    finally:
        tx.close()
        rx.close()
    return {
        "blocks": datagrams,
        "received": got,
        "send_us": 1e6 * send_cpu / datagrams,
        "recv_us": 1e6 * recv_cpu / max(1, got),
    }


def measure_tcp(blocks: int = 10_000, block_bytes: int = BLOCK_BYTES) -> dict[str, float]:
    """CPU microseconds per ``block_bytes`` streamed through one loopback TCP connection:
    ``send_us``, ``recv_us`` (per block sent, per block's worth of bytes received)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        force_buffers(listener, BUFFER_BYTES)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        total = blocks * block_bytes
        proc, queue = _start(_tcp_receiver, (listener, total, block_bytes))
        with socket.create_connection(listener.getsockname(), timeout=WAIT_S) as tx:
            force_buffers(tx, BUFFER_BYTES)
            tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            block = memoryview(bytearray(block_bytes))
            c0 = _cpu_s()
            for _ in range(blocks):
                tx.sendall(block)
            send_cpu = _cpu_s() - c0
        got, recv_cpu = _finish(proc, queue, "TCP")
    finally:
        listener.close()
    received = got / block_bytes
    return {
        "blocks": blocks,
        "received": received,
        "send_us": 1e6 * send_cpu / blocks,
        "recv_us": 1e6 * recv_cpu / max(1.0, received),
    }


def measure(blocks: int = 5_000, block_bytes: int = BLOCK_BYTES, repeats: int = 3) -> dict[str, Any]:
    """Both floors: ``{"block_bytes": ..., "udp": {...}, "tcp": {...}}``.

    Each protocol runs once with a fifth of ``blocks`` to warm up (discarded: the first
    run after a quiet spell measured 2-3x the next ones on the project's VMs), then
    ``repeats`` times; the run with the least CPU per block is kept (a floor is the least
    the kernel charged; other tenants only ever add), with every run's total per block in
    ``totals_us``.
    """
    out: dict[str, Any] = {"block_bytes": block_bytes}
    for proto, fn in (("udp", measure_udp), ("tcp", measure_tcp)):
        fn(max(1, blocks // 5), block_bytes)
        runs = [fn(blocks, block_bytes) for _ in range(max(1, repeats))]
        out[proto] = dict(min(runs, key=_total_us), totals_us=[_total_us(r) for r in runs])
    return out


def ring_blocks(size_bytes: int, workers: int, block_bytes: int = BLOCK_BYTES) -> float:
    """Blocks of ``block_bytes`` a ring allreduce of ``size_bytes`` on ``workers`` ranks sends
    (each also received once): every rank sends ``2 (n - 1) / n`` of the vector."""
    return 2 * (workers - 1) * size_bytes / block_bytes


def floor_ms(sends: float, receives: float, costs: dict[str, float]) -> float:
    """CPU milliseconds of ``sends`` and ``receives`` blocks at ``costs``' ``send_us``/``recv_us``."""
    return (sends * costs["send_us"] + receives * costs["recv_us"]) / 1e3


def least_costs(runs: list[dict[str, Any]], proto: str) -> dict[str, float]:
    """``send_us``/``recv_us`` of ``proto`` ("udp" or "tcp") in the :func:`measure` run
    whose sum is least (a floor: other tenants of the machine only ever add)."""
    best = min((r[proto] for r in runs), key=_total_us)
    return {k: best[k] for k in ("send_us", "recv_us")}


def _total_us(costs: dict[str, float]) -> float:
    """CPU of one block sent and received."""
    return costs["send_us"] + costs["recv_us"]
