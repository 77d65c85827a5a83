"""Allreduce time under datagram loss at every switch daemon, against the lossless time in the same run.

    python bench/bench_runtime_loss.py [--workers 4] [--floats 50000] [--calls 15]
        [--drops 0,0.01,0.05] [--min-rto-ms 100]

For each loss probability a fresh local cluster (2 leaves, 2 spines, 1000-float datagrams)
drops that share of the datagrams every daemon receives; the ranks run ``--calls``
allreduces each, every result is checked exactly, and the median call time is reported
with its ratio to the lossless median, the retransmissions and the fast retransmissions.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.net.udp import RUNTIME_PROBE_FLOOR_S
from panama.runtime.worker.communicator import Communicator


def run(drop: float, args: argparse.Namespace) -> tuple[float, int, int]:
    with LocalCluster(
        leaves=2, spines=2, hosts_per_leaf=2, drop_prob=drop, seed=1, payload_elems=1000, log_level="WARNING"
    ) as lc:
        results: list = [None] * args.workers
        errors: list = [None] * args.workers
        want = float(sum(range(1, args.workers + 1)))

        def rank(r: int) -> None:
            try:
                with Communicator(
                    lc.controller,
                    f"loss-{drop:g}",
                    r,
                    args.workers,
                    timeout_s=120,
                    min_rto_s=args.min_rto_ms / 1000,
                    min_pto_s=args.min_pto_ms / 1000 if args.min_pto_ms > 0 else None,
                    token=lc.token,
                ) as comm:
                    x = np.full(args.floats, r + 1, np.float32)
                    times = []
                    for _ in range(args.calls):
                        t0 = time.perf_counter()
                        out = comm.allreduce(x)
                        times.append(time.perf_counter() - t0)
                        if not np.all(out == want):
                            raise AssertionError(f"rank {r}: wrong sum")
                    results[r] = (times, comm.stats())
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[r] = exc

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        if any(errors) or any(t.is_alive() for t in threads):
            raise SystemExit(f"drop {drop}: {errors}")
        median = statistics.median(t for times, _ in results for t in times)
        retx = sum(st["retransmissions"] for _, st in results)
        fast = sum(st.get("fast_retransmits", 0) for _, st in results)
        probes = sum(st.get("probes", 0) for _, st in results)
        return median, retx, fast, probes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--floats", type=int, default=50_000)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--drops", default="0,0.01,0.05")
    ap.add_argument("--min-rto-ms", type=float, default=100.0)
    ap.add_argument(
        "--min-pto-ms",
        type=float,
        default=1000 * RUNTIME_PROBE_FLOOR_S,
        help="floor of the tail-loss probe timeout (0: no probes) [default: the runtime's]",
    )
    args = ap.parse_args()
    drops = [float(d) for d in args.drops.split(",")]
    probes = f"min PTO {args.min_pto_ms:g} ms" if args.min_pto_ms > 0 else "no tail-loss probes"
    print(f"{args.workers} ranks, {args.floats} floats, {args.calls} calls, min RTO {args.min_rto_ms:g} ms, {probes}")
    print(f"{'loss':>6} {'median ms':>10} {'x lossless':>11} {'retransmissions':>16} {'fast':>6} {'probes':>7}")
    base = None
    for drop in drops:
        median, retx, fast, n_probes = run(drop, args)
        base = base if base is not None else median
        print(f"{drop:>6g} {median * 1e3:>10.1f} {median / base:>11.1f} {retx:>16} {fast:>6} {n_probes:>7}", flush=True)


if __name__ == "__main__":
    main()
