"""Soak test: jobs that come and go for minutes under datagram loss, with every daemon's RSS over time.

    python bench/bench_soak.py [--minutes 10] [--drop 0.01] [--calls 20] [--sample-s 15] [--json FILE]

A local cluster (2 leaves, 2 spines, 6 hosts per leaf) drops ``--drop`` of the datagrams
every daemon receives. Four jobs of 3 ranks each (one process per rank) with gradients of
1,000, 60,000, 250,000 and 1,000,000 floats run sessions back to back until the time is
up: register (a fresh job name per session), ``--calls`` allreduces each checked exactly
(integer-valued data, so any order of the sum is exact), leave. Every ``--sample-s`` the
RSS of the controller and of every daemon is read from /proc; the table and a verdict
(the largest RSS in the second half against the RSS at half time) are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator

JOBS = (1_000, 60_000, 250_000, 1_000_000)  # floats per allreduce, one job each
RANKS = 3


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rank_main(controller: str, token: str, job: int, rank: int, end: float, calls: int, out, started) -> None:
    n = JOBS[job]
    rng = np.random.default_rng(job)  # the same base on every rank of the job
    sessions = done = wrong = 0
    error = None
    try:
        while True:
            # The job's ranks agree whether to start another session: one starts it while
            # time is left, or because another already did (decided and marked under one lock).
            with started.get_lock():
                if not (time.time() < end or max(started[:]) > sessions):
                    break
                started[rank] = sessions + 1
            name = f"soak-{job}-{sessions}"
            with Communicator(controller, name, rank, RANKS, timeout_s=120, token=token) as comm:
                for _ in range(calls):
                    # small integers: every partial sum is exact in float32, in any order
                    base = rng.integers(-50, 50, n).astype(np.float32)
                    x = base + rank
                    got = comm.allreduce(x)
                    want = base * RANKS + sum(range(RANKS))  # every rank draws the same base
                    if not np.array_equal(got, want):
                        wrong += 1
                    done += 1
            sessions += 1
    except Exception as exc:  # noqa: BLE001 - reported
        error = f"{type(exc).__name__}: {exc}"[:500]
    out.put({"job": job, "rank": rank, "sessions": sessions, "calls": done, "wrong": wrong, "error": error})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--drop", type=float, default=0.01)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--sample-s", type=float, default=15.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    ctx = mp.get_context("fork")
    os.environ["PANAMA_JOB_TOKEN"] = new_token()  # the ranks (processes) of this run share it
    with LocalCluster(leaves=2, spines=2, hosts_per_leaf=6, drop_prob=args.drop, seed=1, log_level="WARNING") as lc:
        pids = {p.name: p.pid for p in lc.procs.values()}
        start = time.time()
        end = start + args.minutes * 60
        out = ctx.Queue()
        procs = []
        for job in range(len(JOBS)):
            started = ctx.Array("i", RANKS)  # sessions each rank of the job has started
            for rank in range(RANKS):
                p = ctx.Process(
                    target=rank_main,
                    args=(lc.controller, lc.token, job, rank, end, args.calls, out, started),
                )
                p.start()
                procs.append(p)
        samples: list[dict] = []
        while any(p.is_alive() for p in procs):
            samples.append({"t_s": round(time.time() - start, 1), **{n: rss_kb(pid) for n, pid in pids.items()}})
            line = "  ".join(f"{n} {v / 1024:.1f}" for n, v in samples[-1].items() if n != "t_s" and v)
            print(f"t={samples[-1]['t_s']:7.1f} s  RSS MB: {line}", flush=True)
            deadline = time.time() + args.sample_s
            while time.time() < deadline and any(p.is_alive() for p in procs):
                time.sleep(0.5)
        samples.append({"t_s": round(time.time() - start, 1), **{n: rss_kb(pid) for n, pid in pids.items()}})
        results = [out.get(timeout=10) for _ in procs]
        for p in procs:
            p.join(10)
    half = samples[len(samples) // 2]
    second = samples[len(samples) // 2 :]
    verdict = {}
    for name in pids:
        values = [s[name] for s in second if s[name]]
        verdict[name] = {
            "start_mb": round(samples[0][name] / 1024, 1),
            "half_mb": round(half[name] / 1024, 1),
            "end_mb": round(samples[-1][name] / 1024, 1),
            "second_half_max_mb": round(max(values) / 1024, 1),
            "second_half_growth_mb": round((max(values) - half[name]) / 1024, 1),
        }
    calls = sum(r["calls"] for r in results) // RANKS
    wrong = sum(r["wrong"] for r in results)
    errors = [r for r in results if r["error"]]
    summary = {
        "minutes": args.minutes,
        "drop": args.drop,
        "allreduces": calls,
        "sessions": sum(r["sessions"] for r in results) // RANKS,
        "wrong_results": wrong,
        "errors": errors,
        "rss": verdict,
        "samples": samples,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0 if not wrong and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
