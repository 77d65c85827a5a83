"""What one loopback hop costs with no protocol work, and what that means for an allreduce.

    python bench/bench_udp_floor.py              # 20,000 datagrams of 65,504 bytes
    python bench/bench_udp_floor.py --runs 3     # median of 3

A sender process sends ``--datagrams`` datagrams the way the runtime does (``sendmsg`` of
[28-byte header, payload view] on a socket connected to the receiver, 32 MiB buffers) and a
receiver process takes them with ``recvmsg_into`` into one reused buffer, asking for the
IP TOS byte as the daemons do. Both measure their own CPU time (user + system, from
``os.times``), so the result is CPU per datagram per hop, wherever the kernel charged it
(loopback delivery runs in the sender's system call).

Then: how many loopback hops one allreduce of ``--size-mb`` takes with ``--workers`` ranks
in PANAMA's one-rack and 2-tier local clusters (every rank's vector goes up to its leaf and
down from it; in 2 tiers every leaf's partial goes up to a spine and the result comes back),
and the CPU that many hops cost at this floor. That is a lower bound for PANAMA's CPU per
allreduce with zero Python and zero aggregation work; compare it with gloo's total CPU per
allreduce from ``panama bench allreduce`` (same machine).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics

from panama.benchmarks.allreduce import loopback_datagrams

DATAGRAM_BYTES = 65_504  # 28-byte PANAMA header + 16369 float32 (RUNTIME_PAYLOAD_ELEMS)
BUFFER_BYTES = 32 * 1024 * 1024


def _socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for force, opt in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):  # *BUFFORCE, as PacketSocket
        try:
            s.setsockopt(socket.SOL_SOCKET, force, BUFFER_BYTES)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, opt, BUFFER_BYTES)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("127.0.0.1", 0))
    return s


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _receiver(sock: socket.socket, count: int, ready, queue) -> None:
    buf = memoryview(bytearray(DATAGRAM_BYTES + 1))
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


def measure(datagrams: int = 20_000) -> dict[str, float]:
    """CPU microseconds per datagram: sender, receiver and their sum (one hop)."""
    ctx = mp.get_context("fork")
    rx = _socket()
    tx = _socket()
    tx.connect(rx.getsockname())
    ready, queue = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(rx, datagrams, ready, queue))
    proc.start()
    if not ready.wait(10):
        raise RuntimeError("receiver did not start within 10 s")
    header = bytearray(28)
    payload = memoryview(bytearray(DATAGRAM_BYTES - 28))
    iov = [header, payload]
    c0 = _cpu_s()
    for i in range(datagrams):
        tx.sendmsg(iov)
        if i % 64 == 63:
            os.sched_yield()  # let the receiver drain, as a window-limited sender would
    send_cpu = _cpu_s() - c0
    got, recv_cpu = queue.get(timeout=60)
    proc.join(10)
    tx.close()
    rx.close()
    return {
        "datagrams": datagrams,
        "received": got,
        "send_us": 1e6 * send_cpu / datagrams,
        "recv_us": 1e6 * recv_cpu / max(1, got),
        "hop_us": 1e6 * (send_cpu / datagrams + recv_cpu / max(1, got)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datagrams", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    runs = [measure(args.datagrams) for _ in range(args.runs)]
    for r in runs:
        print(
            f"  {r['received']}/{r['datagrams']} datagrams: send {r['send_us']:.1f} us, "
            f"receive {r['recv_us']:.1f} us, one hop {r['hop_us']:.1f} us of CPU"
        )
    hop_us = statistics.median(r["hop_us"] for r in runs)
    size = int(args.size_mb * 1e6)
    print(f"floor: {hop_us:.1f} us of CPU per 64 KB loopback hop (median of {len(runs)})")
    print(f"{'cluster':<28} {'hops per allreduce':>18} {'floor CPU ms':>13}")
    for name, switches in (("one rack (1 leaf)", 1), ("2 tiers (2 leaves, 2 spines)", 3)):
        hops = loopback_datagrams(size, args.workers, switches, trees=1 if switches == 1 else 2)
        print(f"{name:<28} {hops:>18,} {hops * hop_us / 1e3:>13.0f}")
    print(f"({args.workers} workers, {args.size_mb:g} MB; compare with gloo CPU ms from `panama bench allreduce`)")


if __name__ == "__main__":
    main()
