"""Accelerator speed, beside the tests (same code as ``panama bench core``).

    python bench/bench_core.py --runs 3      # median ratio of 3 runs (8 x 16 MB)
    python bench/bench_core.py --opcodes     # bytecodes per contribution, by function

The opcode profile does not depend on machine load, so it is what to optimise against on
a shared machine; wall-clock ratios come from ``panama bench core``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from panama.benchmarks.core import run_core_bench
from panama.benchmarks.opcodes import count_opcodes
from panama.core.accelerator import Accelerator
from panama.core.packet import ECT0, MAX_CWND_CAP, Packet


def opcode_profile(workers: int = 8, packets: int = 400, payload_elems: int = 361, window: int = 64):
    """Bytecodes the accelerator executes per contribution, by function."""
    grad = np.ones(packets * payload_elems, dtype=np.float32)
    order = [
        (
            Packet(
                1,
                0,
                i,
                1,
                payload_elems,
                0,
                MAX_CWND_CAP,
                max(0, i - window),
                ECT0,
                grad[i * payload_elems : (i + 1) * payload_elems],
            ),
            w,
        )
        for i in range(packets)
        for w in range(workers)
    ]
    acc = Accelerator(4 * window + 8, payload_elems)
    acc.install_tree(1, 0, list(range(workers)), None)
    receive = acc.receive

    def feed() -> None:
        for pkt, src in order:
            receive(pkt, src)

    counts = count_opcodes(feed)
    n = len(order)
    return sum(counts.values()) / n, [(name, c / n) for name, c in counts.most_common(8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mb", type=float, default=16.0)
    parser.add_argument("--opcodes", action="store_true")
    args = parser.parse_args()
    if args.opcodes:
        total, rows = opcode_profile()
        print(f"{total:.1f} bytecodes per contribution")
        for name, per in rows:
            print(f"  {per:7.1f}  {name}")
        return
    ratios = [run_core_bench(size_mb=args.size_mb).ratio for _ in range(args.runs)]
    print("ratios", " ".join(f"{r:.3f}" for r in ratios), f"median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
