"""Where an allreduce's wall time goes: on a CPU, or runnable and waiting for one.

    python bench/bench_runtime_sched.py [--leaves 1] [--spines 1] [--size-mb 16] [--calls 60]

A local cluster and 4 forked ranks run two warm-up allreduces, then ``--calls`` timed
ones; around them the script reads ``/proc/PID/task/*/schedstat`` (nanoseconds on a CPU,
nanoseconds runnable but waiting for one, times put on a CPU) of every switch daemon and
every rank and prints them per call. On a loaded host the waiting column is the scheduler's, not the
protocol's (docs/runtime-performance.md, "Benchmark: panama bench allreduce"). Linux only. For a
profile of the same run: ``perf record -a -g -- sleep 5`` while it runs.
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing as mp
import os
import time

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator

WORKERS = 4


def sched(pid: int) -> tuple[int, int, int]:
    """(ns on a CPU, ns runnable but waiting, times put on a CPU) summed over the threads of ``pid``."""
    run = wait = slices = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                a, b, c = f.read().split()
        except (OSError, ValueError):
            continue
        run += int(a)
        wait += int(b)
        slices += int(c)
    return run, wait, slices


def rank_main(ctl: str, token: str, rank: int, n: int, calls: int, barrier, queue) -> None:
    comm = Communicator(ctl, "sched", rank, WORKERS, timeout_s=60, token=token)
    x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    for _ in range(2):
        comm.allreduce(x, out=out)
    barrier.wait()
    s0, t0 = sched(os.getpid()), time.perf_counter()
    for _ in range(calls):
        comm.allreduce(x, out=out)
    elapsed, s1 = time.perf_counter() - t0, sched(os.getpid())
    barrier.wait()
    queue.put(
        (
            f"rank{rank}",
            elapsed / calls * 1e3,
            (s1[0] - s0[0]) / calls / 1e6,
            (s1[1] - s0[1]) / calls / 1e6,
            (s1[2] - s0[2]) / calls,
        )
    )
    comm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", type=int, default=1)
    ap.add_argument("--spines", type=int, default=1)
    ap.add_argument("--size-mb", type=float, default=16.0)
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args()
    n = int(args.size_mb * 1e6 / 4)
    os.environ["PANAMA_JOB_TOKEN"] = new_token()  # the ranks (processes) of this run share it
    with LocalCluster(leaves=args.leaves, spines=args.spines, hosts_per_leaf=WORKERS // args.leaves) as lc:
        ctx = mp.get_context("fork")
        barrier, queue = ctx.Barrier(WORKERS + 1), ctx.Queue()
        procs = [
            ctx.Process(target=rank_main, args=(lc.controller, lc.token, r, n, args.calls, barrier, queue))
            for r in range(WORKERS)
        ]
        for p in procs:
            p.start()
        pids = {name: lc.procs[name].pid for name in lc.switch_names}
        barrier.wait()
        d0, t0 = {k: sched(p) for k, p in pids.items()}, time.perf_counter()
        barrier.wait()
        elapsed, d1 = time.perf_counter() - t0, {k: sched(p) for k, p in pids.items()}
        ranks = sorted(queue.get() for _ in procs)
        for p in procs:
            p.join()
    print(
        f"{args.leaves} leaves, {args.spines} spines, {args.size_mb:g} MB: {elapsed / args.calls * 1e3:.1f} ms per call"
    )
    for k in pids:
        on, wait = ((d1[k][i] - d0[k][i]) / args.calls / 1e6 for i in (0, 1))
        runs = (d1[k][2] - d0[k][2]) / args.calls
        print(
            f"  {k}: on a CPU {on:.1f} ms, runnable but waiting {wait:.1f} ms, put on a CPU {runs:.0f} times per call"
        )
    for name, ms, on, wait, runs in ranks:
        print(
            f"  {name}: {ms:.1f} ms per call, on a CPU {on:.1f} ms, runnable but waiting {wait:.1f} ms, "
            f"put on a CPU {runs:.0f} times"
        )


if __name__ == "__main__":
    main()
