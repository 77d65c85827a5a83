"""Daemon-only throughput: one switch daemon summing pre-built datagrams (``panama bench switch``).

What is measured
----------------
A :class:`~panama.runtime.switch.daemon.SwitchDaemon` runs its real data-plane thread on a
real UDP socket on 127.0.0.1 (the same receive, decode, key check, accelerator and
multicast send as in a cluster). A feeder *process* plays ``workers`` workers of
``jobs`` jobs with ``trees`` trees each: every datagram's payload and key trailer are
built once before the clock starts, only the 28-byte header (sequence number, ack) is
written per datagram, and each tree keeps ``window`` sequence numbers in flight
(closed loop on the results the first worker of each job reads back, so nothing is
lost to a full socket buffer and every slot completes). The other workers' copies of
the results are sent by the daemon like in a cluster and dropped by their small
receive buffers.

``payload_gbps``: payload bits of the contributions the daemon summed, per second of
the data-plane thread's CPU time (read from ``/proc/self/task/<tid>/stat``): the rate
one core sustains. ``payload_gbps_wall`` divides by wall time instead (lower when the
daemon waited for the feeder; ``daemon_cpu_share`` says how busy it was).

Batched path (``offload``, default): the daemon runs with ``SwitchConfig.offload``
(its GSO/GRO loop where the kernel has it and 2+ datagrams fit one 64 KB send,
:mod:`panama.runtime.switch.loop_batch`) and the feeder sends each worker's new sequence
numbers of a tree with one GSO ``sendmsg`` and reads results with GRO, as batching
workers would. ``baseline_payload_gbps``: the same daemon with ``offload=False`` (one
datagram per system call) fed one datagram per call, in the same run;
``ratio_to_baseline`` = payload_gbps / baseline_payload_gbps. ``datagrams_per_batch``:
datagrams the daemon received and sent per system call in the measured interval
(``rx_datagrams_per_syscall``, ``tx_datagrams_per_syscall`` apart); ``gso_share``: the
share of its sent datagrams that left in multi-datagram GSO sends. ``batched_loop`` says
whether the daemon ran the batched loop (false with 64 KB datagrams, without kernel
support, with ``PANAMA_UDP_OFFLOAD=0`` or ``--no-offload``: the run is then a second
baseline). ``payload_gbps`` is the batched path's (the baseline's with ``--no-offload``).

Floor in the same run: ``floor_*``, the same feeder against a forwarder thread that
receives every datagram with the same system call and sends it on, unread: the
per-datagram cost of the kernel and the interpreter without decoding or summing.
``ratio_to_floor`` = payload_gbps / floor_payload_gbps.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from panama.benchmarks.settings import SwitchBenchConfig
from panama.core import codec
from panama.core.packet import ECT0, MAX_CWND_CAP, Packet
from panama.runtime.net import offload as offload_mod
from panama.runtime.net.udp import format_addr
from panama.runtime.switch.daemon import SwitchConfig, SwitchDaemon
from panama.tables import format_pairs

__all__ = ["SwitchBenchConfig", "format_table", "run_bench_switch", "thread_cpu_s"]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_RESULT_BUFFER_BYTES = 32 << 20  # the worker that reads results back
_DROP_BUFFER_BYTES = 4096  # the others: results are dropped by the kernel, unread


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process (Linux ``/proc``)."""
    with open(f"/proc/self/task/{native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _worker_sockets(cfg: SwitchBenchConfig) -> list[list[socket.socket]]:
    socks = []
    for _ in range(cfg.jobs):
        row = []
        for w in range(cfg.workers):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            size = _RESULT_BUFFER_BYTES if w == 0 else _DROP_BUFFER_BYTES
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            s.bind(("127.0.0.1", 0))
            row.append(s)
        socks.append(row)
    return socks


def _feed(
    cfg: SwitchBenchConfig,
    socks: list[list[socket.socket]],
    target: tuple,
    keys: list[int],
    stop_at: float,
    results_out,
    batched: bool = False,
) -> None:
    """The feeder process: closed loop of ``window`` sequence numbers per tree until ``stop_at``.

    ``batched``: new sequence numbers of one tree leave as one GSO send per worker and
    results are read with GRO, where the kernel has them.
    """
    size = codec.datagram_size(cfg.payload_elems)
    per_send, gro = _feeder_offload(socks, size, batched)
    done = [[0] * cfg.trees for _ in range(cfg.jobs)]  # results received (in order: one parent, one path)
    send_seqs = _sender(cfg, socks, target, _staged(cfg, keys, per_send), per_send, done)
    for j in range(cfg.jobs):
        for t in range(cfg.trees):
            send_seqs(j, t, cfg.window)
    readers = [row[0] for row in socks]
    for r in readers:
        r.setblocking(False)
    rbuf = bytearray(offload_mod.RECV_BUFFER_BYTES if gro else codec.HEADER_BYTES)
    fresh = [[0] * cfg.trees for _ in range(cfg.jobs)]
    results = 0
    while time.monotonic() < stop_at:
        got = sum(_drain(r, rbuf, gro, cfg.trees, fresh[j]) for j, r in enumerate(readers))
        if not got:
            if not select.select(readers, [], [], 2.0)[0]:
                break  # 2 s without a result: the daemon stalled; the parent reports it
            continue
        results += got
        for j in range(cfg.jobs):
            for t in range(cfg.trees):
                k = fresh[j][t]
                if k:
                    fresh[j][t] = 0
                    done[j][t] += k
                    send_seqs(j, t, k)
    results_out.put(results)


def _feeder_offload(socks: list[list[socket.socket]], size: int, batched: bool) -> tuple[int, bool]:
    """Datagrams per send (1 without GSO) and whether results are read with GRO."""
    per_send = offload_mod.segments_per_send(size) if batched else 1
    gso = gro = False
    if batched and per_send > 1:
        found = [offload_mod.probe(row[0]) for row in socks]  # enables GRO on the reading workers
        gso = all(f.gso for f in found)
        gro = all(f.gro for f in found)
    return (per_send if gso else 1), gro


def _staged(cfg: SwitchBenchConfig, keys: list[int], per_send: int) -> list[list[bytearray]]:
    """Pre-built datagrams: per job and worker, ``per_send`` copies of payload and key trailer back to back."""
    rng = np.random.default_rng(cfg.seed)
    staged = []
    for j in range(cfg.jobs):
        row = []
        for _ in range(cfg.workers):
            payload = rng.standard_normal(cfg.payload_elems).astype(np.float32)
            one = bytearray(
                codec.encode(Packet(j + 1, 0, 0, 0, cfg.payload_elems, 0, MAX_CWND_CAP, 0, ECT0, payload), keys[j])
            )
            row.append(bytearray(one * per_send))
        staged.append(row)
    return staged


def _sender(
    cfg: SwitchBenchConfig,
    socks: list[list[socket.socket]],
    target: tuple,
    staged: list[list[bytearray]],
    per_send: int,
    done: list[list[int]],
) -> Callable[[int, int, int], None]:
    """``send_seqs(j, t, k)``: every worker of job ``j`` sends tree ``t``'s next ``k`` sequence
    numbers (acking ``done[j][t]``), ``per_send`` datagrams per system call; only headers are written."""
    size = codec.datagram_size(cfg.payload_elems)
    views = [[memoryview(b) for b in row] for row in staged]
    cmsg = [offload_mod.segment_cmsg(size)]
    next_seq = [[0] * cfg.trees for _ in range(cfg.jobs)]

    def send_seqs(j: int, t: int, k: int) -> None:
        while k > 0:
            m = min(k, per_send)
            seq = next_seq[j][t]
            ack = done[j][t]
            for w, s in enumerate(socks[j]):
                buf = staged[j][w]
                for i in range(m):
                    codec.HEADER.pack_into(
                        buf,
                        i * size,
                        codec.MAGIC,
                        codec.VERSION,
                        0,
                        j + 1,
                        t,
                        MAX_CWND_CAP,
                        0,
                        seq + i,
                        ack,
                        cfg.payload_elems,
                        0,
                    )
                if m > 1:
                    s.sendmsg([views[j][w][: m * size]], cmsg, 0, target)
                else:
                    s.sendmsg([views[j][w][:size]], [], 0, target)
            next_seq[j][t] = seq + m
            k -= m

    return send_seqs


def _drain(r: socket.socket, rbuf: bytearray, gro: bool, trees: int, fresh: list[int]) -> int:
    """Read every result waiting on the non-blocking socket ``r`` (GRO: several per read),
    counting them per tree in ``fresh``; returns how many."""
    got = 0
    while True:  # drain what is there, then answer each tree with one batch
        try:
            if gro:
                n, anc, _, _ = r.recvmsg_into([rbuf], offload_mod.RECV_CMSG_SPACE)
                seg = offload_mod.parse_cmsgs(anc)[1]
                offsets = range(0, n, seg) if seg and seg < n else (0,)
            else:
                n = r.recv_into(rbuf, codec.HEADER_BYTES, socket.MSG_TRUNC)
                offsets = (0,)
        except BlockingIOError:
            return got
        for off in offsets:
            if n - off < codec.HEADER_BYTES:
                continue
            tree_id = int.from_bytes(rbuf[off + 8 : off + 10], "big")
            if tree_id < trees:
                fresh[tree_id] += 1
                got += 1


@dataclass
class _Side:
    """What receives the feeder's datagrams in one run: the daemon, or the socket floor's forwarder."""

    target: tuple  # where the feeder sends
    tid: int  # native id of the thread whose CPU time is measured
    rx: Callable[[], int]  # datagrams received so far
    close: Callable[[], dict]  # stop it; the daemon's accelerator stats ({} for the forwarder)
    calls: Callable[[], tuple[int, ...]] | None = None  # the daemon's datagram and system-call counters
    daemon: SwitchDaemon | None = None


def _run(cfg: SwitchBenchConfig, *, floor: bool, batched: bool = False) -> dict:
    """One measured run against the forwarder (``floor``) or a daemon (``batched``: its GSO/GRO loop)."""
    socks = _worker_sockets(cfg)
    keys = [0x5EED0000 + j for j in range(cfg.jobs)]
    side = _forwarder(cfg, socks) if floor else _daemon(cfg, socks, keys, batched)
    try:
        measured = _measure(cfg, side, socks, keys, batched)
    finally:
        stats = side.close()
        for row in socks:
            for s in row:
                s.close()
    return _result(cfg, side, stats, *measured)


def _forwarder(cfg: SwitchBenchConfig, socks: list[list[socket.socket]]) -> _Side:
    """The socket floor: a thread that receives every datagram with the daemon's system call
    and sends it on unread; one "result" per ``workers`` datagrams goes back to the reading worker."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
    server.bind(("127.0.0.1", 0))
    target = server.getsockname()
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _DROP_BUFFER_BYTES)
    sink.bind(("127.0.0.1", 0))
    counters = {"rx": 0, "tid": 0}
    stop = threading.Event()
    # the forwarder answers each datagram's header to the reading worker: the loop stays closed
    answer = {j: socks[j][0].getsockname() for j in range(cfg.jobs)}

    def forward() -> None:
        counters["tid"] = threading.get_native_id()
        buf = bytearray(codec.datagram_size(cfg.payload_elems) + 1)
        view = memoryview(buf)
        server.settimeout(0.2)
        workers = cfg.workers
        while not stop.is_set():
            try:
                n, _, _, _ = server.recvmsg_into([view], socket.CMSG_SPACE(4))
            except TimeoutError:
                continue
            counters["rx"] += 1
            job = int.from_bytes(buf[4:8], "big") - 1
            server.sendto(view[:n], sink.getsockname())
            if counters["rx"] % workers == 0:  # one "result" per sequence number
                server.sendto(view[:n], answer.get(job, sink.getsockname()))

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    while not counters["tid"]:
        time.sleep(0.001)

    def close() -> dict:
        stop.set()
        thread.join(timeout=2.0)
        server.close()
        sink.close()
        return {}

    return _Side(target, counters["tid"], lambda: counters["rx"], close)


def _daemon(cfg: SwitchBenchConfig, socks: list[list[socket.socket]], keys: list[int], batched: bool) -> _Side:
    """A real switch daemon (``offload=batched``) with every job installed, its data plane running."""
    daemon = SwitchDaemon(
        SwitchConfig(
            switch_id="bench",
            packet_memory=cfg.packet_memory,
            payload_elems=cfg.payload_elems,
            status_interval_s=0.0,
            ecn_threshold_pkts=0,
            seed=cfg.seed,
            offload=batched,
        )
    )
    for j in range(cfg.jobs):
        children = [format_addr(s.getsockname()) for s in socks[j]]
        daemon.install_job(j + 1, [{"tree_id": t, "children": children} for t in range(cfg.trees)], key=keys[j])
    daemon.start_data_plane()
    deadline = time.monotonic() + 5.0
    while daemon._thread.native_id is None:  # noqa: SLF001 - set once the thread runs
        if time.monotonic() > deadline:
            raise RuntimeError("bench switch: the daemon's data-plane thread did not start within 5 s")
        time.sleep(0.001)

    def rx_of() -> int:
        with daemon.lock:
            return daemon.dp.rx_packets

    def calls_of() -> tuple[int, int, int, int, int]:
        with daemon.lock:
            sk = daemon.sock
            return daemon.dp.rx_packets, daemon.dp.rx_syscalls, sk.sent_packets, sk.tx_syscalls, sk.gso_datagrams

    def close() -> dict:
        stats = daemon.acc.stats()
        daemon.close()
        return stats

    tid = daemon._thread.native_id  # noqa: SLF001
    return _Side(daemon.udp_addr, tid, rx_of, close, calls_of, daemon)


def _measure(cfg: SwitchBenchConfig, side: _Side, socks, keys: list[int], batched: bool) -> tuple:
    """Start the feeder, let it warm up, then read the counters and the thread's CPU time
    ``cfg.seconds`` apart; returns ((rx0, cpu0, t0), (rx1, cpu1, t1), calls before, calls after)."""
    ctx = multiprocessing.get_context("fork")
    results_q = ctx.Queue()
    stop_at = time.monotonic() + cfg.warmup_s + cfg.seconds + 0.5
    feeder = ctx.Process(target=_feed, args=(cfg, socks, side.target, keys, stop_at, results_q, batched), daemon=True)
    feeder.start()
    rx_of, tid, calls_of = side.rx, side.tid, side.calls
    time.sleep(cfg.warmup_s)
    c0 = calls_of() if calls_of else None
    rx0, cpu0, t0 = rx_of(), thread_cpu_s(tid), time.perf_counter()
    time.sleep(cfg.seconds)
    rx1, cpu1, t1 = rx_of(), thread_cpu_s(tid), time.perf_counter()
    c1 = calls_of() if calls_of else None
    feeder.join(timeout=cfg.seconds + 10.0)
    if feeder.is_alive():
        feeder.kill()
        raise RuntimeError("bench switch: the feeder process did not finish (waited for it 10 s past its end)")
    return (rx0, cpu0, t0), (rx1, cpu1, t1), c0, c1


def _result(cfg: SwitchBenchConfig, side: _Side, stats: dict, start: tuple, end: tuple, c0, c1) -> dict:
    """The rates of one run from its counters (module docstring)."""
    (rx0, cpu0, t0), (rx1, cpu1, t1) = start, end
    datagrams = rx1 - rx0
    if datagrams <= 0:
        raise RuntimeError(
            "bench switch: no datagram reached the "
            + ("daemon" if side.daemon else "forwarder")
            + " in the measured interval"
        )
    wall, cpu = t1 - t0, max(cpu1 - cpu0, 1e-9)
    bits = datagrams * cfg.payload_elems * 32
    out = {
        "datagrams": datagrams,
        "datagrams_per_s": datagrams / cpu,
        "payload_gbps": bits / cpu / 1e9,
        "payload_gbps_wall": bits / wall / 1e9,
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_share": cpu / wall,
        "us_per_datagram": cpu / datagrams * 1e6,
    }
    daemon = side.daemon
    if daemon is not None:
        out["accelerator_drops"] = stats.get("drops_total", 0)
        rx, rx_calls, tx, tx_calls, gso_dgrams = (b - a for a, b in zip(c0, c1, strict=True))
        out["rx_datagrams_per_syscall"] = rx / max(rx_calls, 1)
        out["tx_datagrams_per_syscall"] = tx / max(tx_calls, 1)
        out["datagrams_per_batch"] = (rx + tx) / max(rx_calls + tx_calls, 1)
        out["gso_share"] = gso_dgrams / max(tx, 1)
        out["batched_loop"] = daemon.batched
        out["offload"] = daemon.sock.offload.as_dict()
    return out


def run_bench_switch(cfg: SwitchBenchConfig = SwitchBenchConfig()) -> dict:
    """Daemon and socket floor in the same run (module docstring); returns the report dict."""
    floor = _run(cfg, floor=True)
    base = _run(cfg, floor=False)
    switch = _run(cfg, floor=False, batched=True) if cfg.offload else base
    return {
        "config": cfg.dump(),
        "datagram_bytes": codec.datagram_size(cfg.payload_elems),
        "payload_gbps": switch["payload_gbps"],
        "payload_gbps_wall": switch["payload_gbps_wall"],
        "datagrams_per_s": switch["datagrams_per_s"],
        "us_per_datagram": switch["us_per_datagram"],
        "daemon_cpu_share": switch["cpu_share"],
        "accelerator_drops": switch["accelerator_drops"],
        "floor_payload_gbps": floor["payload_gbps"],
        "floor_us_per_datagram": floor["us_per_datagram"],
        "ratio_to_floor": switch["payload_gbps"] / floor["payload_gbps"],
        "baseline_payload_gbps": base["payload_gbps"],
        "baseline_us_per_datagram": base["us_per_datagram"],
        "ratio_to_baseline": switch["payload_gbps"] / base["payload_gbps"],
        "datagrams_per_batch": switch["datagrams_per_batch"],
        "rx_datagrams_per_syscall": switch["rx_datagrams_per_syscall"],
        "tx_datagrams_per_syscall": switch["tx_datagrams_per_syscall"],
        "gso_share": switch["gso_share"],
        "batched_loop": switch["batched_loop"],
        "offload": switch["offload"],
    }


def format_table(report: dict) -> str:
    """The terminal table of one report."""
    c = report["config"]
    rows = [
        (
            "offered load",
            f"{c['jobs']} job(s) x {c['trees']} tree(s) x {c['workers']} workers, window {c['window']} per tree",
        ),
        ("datagram", f"{report['datagram_bytes']:,} bytes ({c['payload_elems']:,} float32)"),
        ("payload summed", f"{report['payload_gbps']:.2f} Gb/s per core (CPU time of the data-plane thread)"),
        ("  wall clock", f"{report['payload_gbps_wall']:.2f} Gb/s, daemon busy {report['daemon_cpu_share']:.0%}"),
        ("datagrams", f"{report['datagrams_per_s']:,.0f} /s per core, {report['us_per_datagram']:.1f} µs each"),
        (
            "socket floor",
            f"{report['floor_payload_gbps']:.2f} Gb/s ({report['floor_us_per_datagram']:.1f} µs "
            "per datagram: receive and forward only)",
        ),
        ("ratio to floor", f"{report['ratio_to_floor']:.2f}"),
        (
            "baseline",
            f"{report['baseline_payload_gbps']:.2f} Gb/s (one datagram per system call), "
            f"ratio {report['ratio_to_baseline']:.2f}",
        ),
        (
            "batching",
            f"{'batched loop' if report['batched_loop'] else 'plain loop'}: "
            f"{report['datagrams_per_batch']:.1f} datagrams per system call, GSO share {report['gso_share']:.0%}",
        ),
        ("accelerator drops", f"{report['accelerator_drops']}"),
    ]
    return format_pairs(rows)
