"""Simulator speed, beside the tests (same code as ``panama bench sim``).

    python bench/bench_sim.py              # 3 runs of the reference bench, median ratio
    python bench/bench_sim.py --opcodes    # bytecodes per packet hop, per function

The opcode profile is deterministic (it does not depend on machine load), so it is the
measure to optimise against on a shared machine; wall-clock ratios come from
``panama bench sim``.
"""

from __future__ import annotations

import argparse
import statistics

from panama.benchmarks.opcodes import count_opcodes
from panama.benchmarks.sim import build_reference, run_bench
from panama.core.units import ms


def opcode_profile(warm_ms: float = 2.0, measure_ms: float = 3.0) -> tuple[float, list[tuple[str, float]]]:
    """Bytecodes executed per packet hop in the reference scenario, by function."""
    ref = build_reference()
    eng, net = ref["engine"], ref["network"]
    eng.run(ms(warm_ms))
    h0 = net.hops()
    counts = count_opcodes(lambda: eng.run(ms(warm_ms + measure_ms)))
    hops = net.hops() - h0
    total = sum(counts.values()) / hops
    return total, [(name, c / hops) for name, c in counts.most_common(12)]


def loop_opcodes(n_hops: int = 20_000) -> float:
    """Bytecodes per hop of the minimal heapq loop (the baseline of ``panama bench sim``)."""
    from panama.benchmarks.sim import minimal_loop

    counts = count_opcodes(lambda: minimal_loop(n_hops))
    return sum(counts.values()) / n_hops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--opcodes", action="store_true", help="bytecodes per hop instead of wall-clock rates")
    args = ap.parse_args()
    if args.opcodes:
        total, rows = opcode_profile()
        print(f"bytecodes per packet hop: {total:.1f}")
        for name, per_hop in rows:
            print(f"{per_hop:8.1f}  {name}")
        print(f"minimal heapq loop: {loop_opcodes():.1f} bytecodes per hop")
        return
    results = [run_bench() for _ in range(args.runs)]
    for r in results:
        print(
            f"sim {r['sim_hops_per_s']:>10,.0f} hops/s   loop {r['loop_hops_per_s']:>10,.0f} hops/s   ratio "
            f"{r['ratio']:.3f}"
        )
    print(f"median ratio {statistics.median(r['ratio'] for r in results):.3f}")


if __name__ == "__main__":
    main()
