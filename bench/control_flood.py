"""Floods of unfinished connections at the controller beside running and registering jobs.

    python bench/control_flood.py --mode one  [--connections 2000] [--seconds 35] [--json FILE]
    python bench/control_flood.py --mode many [--addresses 199] [--per-address 128] [--seconds 35]

A local cluster (2 leaves, 1 spine, 3 hosts per leaf; heartbeat_timeout_s 5, the
default). Flooder processes without the token hold ``--connections`` connections from
127.0.0.1 (``one``) or ``--per-address`` from each of 127.0.0.2 ... (``many``) open to the
controller's port, sending nothing; each one the controller closes is opened again at
once. Meanwhile a 3-rank job runs allreduces of 50,000 floats back to back, each checked
exactly, and 5 s into the flood a 2-rank job registers and does the same. Printed: every
rank error, wrong sums, allreduces of each job, the controller's CPU seconds, its
``/v1/health`` ``connections`` counters, how many connections the flooders opened, and
the kernel's listen-queue overflows (``TcpExtListenOverflows``) during the flood.
Issue 35 item 2: before, such floods ended the running job in 6-9 s.
"""

from __future__ import annotations

import argparse
import errno
import json
import multiprocessing as mp
import os
import resource
import selectors
import socket
import threading
import time

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator

ELEMS = 50_000
MAX_FDS_PER_FLOODER = 15_000


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def flooder(target: tuple[str, int], sources: list[tuple[str, int]], seconds: float, out) -> None:
    """Hold ``count`` unfinished connections from each ``(source address, count)``; reopen each closed one."""
    raise_fd_limit()
    sel = selectors.DefaultSelector()
    opened = failed = 0

    def open_one(source: str) -> None:
        nonlocal opened, failed
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((source, 0))
            code = s.connect_ex(target)
        except OSError:
            s.close()
            failed += 1
            return
        if code not in (0, errno.EINPROGRESS):
            s.close()
            failed += 1
            return
        opened += 1
        sel.register(s, selectors.EVENT_READ, source)

    for source, count in sources:
        for _ in range(count):
            open_one(source)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the controller: open another at once
                sel.unregister(s)
                s.close()
                open_one(key.data)
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    out.put({"opened": opened, "failed": failed})


def listen_overflows() -> int:
    lines = open("/proc/net/netstat").read().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            return int(dict(zip(head.split()[1:], values.split()[1:]))["ListenOverflows"])
    return -1


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_job(lc, name: str, ranks: int, stop: threading.Event, report: dict) -> None:
    """``ranks`` threads of one run doing checked allreduces until ``stop``."""
    token = new_token()
    expected = float(sum(range(1, ranks + 1)))
    report.update(calls=[0] * ranks, wrong=0, errors={})

    def rank(r: int) -> None:
        x = np.full(ELEMS + 1, float(r + 1), np.float32)
        x[-1] = 0.0  # the stop flag: rank 0 sets it, every rank sees it in the same sum
        try:
            with Communicator(
                lc.controller, name, r, ranks, timeout_s=60, token=lc.token, job_token=token, connect=True
            ) as comm:
                while True:
                    if r == 0 and stop.is_set():
                        x[-1] = 1.0
                    out = comm.allreduce(x)
                    if not np.all(out[:-1] == expected):
                        report["wrong"] += 1
                    report["calls"][r] += 1
                    if out[-1] > 0:
                        break
        except Exception as exc:  # noqa: BLE001 - reported
            report["errors"][r] = str(exc)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("one", "many"), default="one")
    ap.add_argument("--connections", type=int, default=2000, help="--mode one: connections from 127.0.0.1")
    ap.add_argument("--addresses", type=int, default=199, help="--mode many: 127.0.0.2 and up")
    ap.add_argument("--per-address", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=35.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    raise_fd_limit()
    if args.mode == "one":
        sources = [("127.0.0.1", args.connections)]
    else:
        sources = [(f"127.0.{(k + 2) // 256}.{(k + 2) % 256}", args.per_address) for k in range(args.addresses)]
    groups: list[list[tuple[str, int]]] = [[]]
    for source, count in sources:  # one flooder process per MAX_FDS_PER_FLOODER connections
        if sum(c for _, c in groups[-1]) + count > MAX_FDS_PER_FLOODER:
            groups.append([])
        groups[-1].append((source, count))
    with LocalCluster(leaves=2, spines=1, hosts_per_leaf=3, log_level="WARNING") as lc:
        stop = threading.Event()
        running, joining = {}, {}
        first = threading.Thread(target=run_job, args=(lc, "flood-running", 3, stop, running), daemon=True)
        first.start()
        while lc.controller_call("GET", "/v1/jobs/flood-running")[1].get("state") != "running":
            time.sleep(0.05)
        time.sleep(1.0)
        pid = lc.procs["controller"].pid
        cpu0, overflows0 = cpu_seconds(pid), listen_overflows()
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        flooders = [
            ctx.Process(target=flooder, args=(lc.controller_addr, g, args.seconds, out), daemon=True) for g in groups
        ]
        t0 = time.monotonic()
        for p in flooders:
            p.start()
        time.sleep(5.0)
        second = threading.Thread(target=run_job, args=(lc, "flood-joining", 2, stop, joining), daemon=True)
        second.start()
        floods = [out.get(timeout=args.seconds + 60) for _ in flooders]
        flood_s = time.monotonic() - t0
        for p in flooders:
            p.join(timeout=30)
        cpu1, overflows1 = cpu_seconds(pid), listen_overflows()
        health = lc.controller_call("GET", "/v1/health")[1]
        states = {
            n: lc.controller_call("GET", f"/v1/jobs/{n}")[1].get("state") for n in ("flood-running", "flood-joining")
        }  # noqa: E501
        stop.set()
        first.join(timeout=60)
        second.join(timeout=60)
    result = {
        "mode": args.mode,
        "sources": len(sources),
        "connections_held": sum(c for _, c in sources),
        "flood_s": round(flood_s, 1),
        "flooders": floods,
        "running_job": {"calls": running["calls"], "wrong": running["wrong"], "errors": running["errors"]},
        "joining_job": {"calls": joining.get("calls"), "wrong": joining.get("wrong"), "errors": joining.get("errors")},
        "states_at_end_of_flood": states,
        "controller_cpu_s": round(cpu1 - cpu0, 2),
        "listen_overflows": overflows1 - overflows0,
        "admission": health.get("connections"),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
