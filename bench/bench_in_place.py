"""In-place allreduce (``allreduce(x, out=x)``, as the DDP hook and the ``panama`` backend
call it) against a separate reused ``out``, in one run on one local cluster.

``--workers`` rank processes in one rack each run ``--rounds`` rounds of [``--calls``
in-place calls, ``--calls`` calls into a separate buffer]; each phase starts and ends at a
barrier. Prints per mode the median over rounds of the time per call (slowest rank) and
of the workers' CPU per call (summed over ranks), and their ratio in place / separate.
In place writes each packet's result over its own contribution (no staging copy), so the
ratio should sit near 1.

    python bench/bench_in_place.py [--size-mb 25 --calls 10 --rounds 3 --workers 4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.tokens import new_token
from panama.runtime.worker.communicator import Communicator

MODES = ("in place", "separate out")


def _rank(controller: str, token: str, rank: int, args, queue, barrier) -> None:
    n = int(args.size_mb * 1_000_000) // 4
    x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    with Communicator(controller, "inplace", rank, args.workers, timeout_s=60, token=token) as comm:
        comm.allreduce(x.copy(), out=y)  # warm-up: registration, trees, pages of y
        for rnd in range(args.rounds):
            for mode in MODES:
                buf = x.copy()
                out = buf if mode == "in place" else y
                barrier.wait()
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.calls):
                    comm.allreduce(buf, out=out)
                cpu = time.process_time() - c0
                barrier.wait()
                queue.put((rnd, mode, rank, time.perf_counter() - t0, cpu))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=25.0)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    ctx = mp.get_context("fork")
    os.environ["PANAMA_JOB_TOKEN"] = new_token()  # the ranks (processes) of this run share it
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=args.workers, log_level="WARNING") as lc:
        queue, barrier = ctx.Queue(), ctx.Barrier(args.workers, timeout=120)
        procs = [
            ctx.Process(target=_rank, args=(lc.controller, lc.token, r, args, queue, barrier), daemon=True)
            for r in range(args.workers)
        ]
        for p in procs:
            p.start()
        rows = [queue.get(timeout=600) for _ in range(args.rounds * len(MODES) * args.workers)]
        for p in procs:
            p.join(timeout=30)
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for rnd in range(args.rounds):
        for mode in MODES:
            phase = [r for r in rows if r[0] == rnd and r[1] == mode]
            wall[mode].append(max(r[3] for r in phase) / args.calls * 1e3)
            cpu[mode].append(sum(r[4] for r in phase) / args.calls * 1e3)
    print(f"{args.size_mb:g} MB, {args.workers} ranks in one rack, {args.rounds} rounds of {args.calls} calls per mode")
    for mode in MODES:
        print(
            f"  {mode:>12}: {statistics.median(wall[mode]):7.1f} ms per call, "
            f"workers' CPU {statistics.median(cpu[mode]):7.1f} ms per call "
            f"(rounds: {', '.join(f'{c:.1f}' for c in cpu[mode])})"
        )
    time_ratio = statistics.median(wall["in place"]) / statistics.median(wall["separate out"])
    cpu_ratio = statistics.median(cpu["in place"]) / statistics.median(cpu["separate out"])
    print(f"  in place / separate out: time {time_ratio:.2f}, CPU {cpu_ratio:.2f}")


if __name__ == "__main__":
    main()
