"""The simulator's speed beside the floor of its benchmark's loop in C (issue 34).

``panama bench sim`` compares the compiled simulator with its pure-Python twin, and the
reference dumbbell with a bare heapq store-and-forward loop (``minimal_loop``). This
script adds the third point: that same loop in C (``c_floor_loop.pyx``, built here with
Cython's ``pyximport``), checked against the heapq loop (same hops, same final busy-until
time of every link), and prints, alternating in one process, nanoseconds per packet hop
of: the C loop with the heapq loop's 128 packets (one heap entry each) and with as many
entries as the simulator's own event heap holds on average (sampled during its run: one
entry per busy port or timer, so far fewer), the heapq loop, the compiled simulator and
(in a child process) the pure simulator on the reference dumbbell. It shows how far the
simulator's hop is from a bare loop in C over a heap of its size: the part of the hop
that is modelling (ports, pipes, DCTCP, ECN, counters) and Python objects, not the
event queue.

    python bench/sim_c_floor.py [--rounds 3] [--duration-ms 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyximport

from panama._ext import child_env, compiled
from panama.benchmarks.sim import (
    ACK_BYTES,
    DATA_BYTES,
    DELAY_PS,
    RATE_BPS,
    build_reference,
    minimal_loop,
    ps_per_byte,
)
from panama.core.units import ms
from panama.sim.runner import frozen_gc

pyximport.install(language_level=3, build_dir=str(Path.home() / ".cache" / "panama-bench-pyx"))
sys.path.insert(0, str(Path(__file__).parent))
from c_floor_loop import c_loop  # noqa: E402  (built by pyximport)

N_FLOWS, WINDOW = 4, 32  # minimal_loop's defaults


def c_floor_ns(n_hops: int, window: int = WINDOW) -> float:
    """ns per hop of the C loop (``N_FLOWS`` x ``window`` packets, one heap entry each),
    after checking it against the heapq loop."""
    ppb = ps_per_byte(RATE_BPS)
    check = 200_000
    busy: list[int] = []
    minimal_loop(check, N_FLOWS, window, busy_out=busy)
    hops, _, final = c_loop(check, N_FLOWS, window, ppb, DELAY_PS, DATA_BYTES, ACK_BYTES)
    if hops != check or final != busy:
        raise SystemExit(f"the C loop disagrees with the heapq loop after {check} hops: {final} != {busy}")
    hops, seconds, _ = c_loop(n_hops, N_FLOWS, window, ppb, DELAY_PS, DATA_BYTES, ACK_BYTES)
    return seconds / hops * 1e9


def heapq_ns(n_hops: int) -> float:
    hops, seconds = minimal_loop(n_hops, N_FLOWS, WINDOW)
    return seconds / hops * 1e9


def simulator_ns(duration_ms: float, slices: int = 100) -> tuple[float, int, float]:
    """ns per hop of the reference dumbbell on this process's path, its hop count, and the
    mean number of pending engine events (sampled between ``slices`` pieces of the run)."""
    ref = build_reference()
    eng = ref["engine"]
    pending = []
    seconds = 0.0
    with frozen_gc():  # as panama bench sim runs it
        for k in range(1, slices + 1):
            t0 = time.process_time()
            eng.run(ms(duration_ms) * k // slices)
            seconds += time.process_time() - t0
            pending.append(eng.pending())
    hops = ref["network"].hops()
    return seconds / hops * 1e9, hops, statistics.mean(pending)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration-ms", type=float, default=100.0, help="simulated time of the dumbbell")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--pure-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pure_child:  # the pure simulator, in a child with the extensions off
        print(json.dumps(simulator_ns(args.duration_ms)))
        return
    if not compiled():
        raise SystemExit("the compiled fast path is not built: nothing to compare (pip install -e . builds it)")
    rows: dict[str, list[float]] = {}
    window = WINDOW
    for k in range(args.rounds):
        sim_ns, hops, pending = simulator_ns(args.duration_ms)
        window = max(1, round(pending / N_FLOWS))  # the simulator's mean heap size, in C loop packets
        measured = {
            f"C loop, {N_FLOWS * WINDOW} entries": c_floor_ns(max(hops, 5_000_000)),
            f"C loop, {N_FLOWS * window} entries": c_floor_ns(max(hops, 5_000_000), window),
            f"heapq loop, {N_FLOWS * WINDOW} entries": heapq_ns(hops),
            "simulator, compiled": sim_ns,
        }
        env = child_env(True)
        out = subprocess.run(
            [sys.executable, __file__, "--pure-child", "--duration-ms", str(args.duration_ms)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        pure_ns, pure_hops, _ = json.loads(out)
        if pure_hops != hops:
            raise SystemExit(f"pure and compiled runs disagree: {pure_hops} != {hops} hops")
        measured["simulator, pure"] = pure_ns
        for name, v in measured.items():
            rows.setdefault(name, []).append(v)
        done = ", ".join(f"{n} {v:.1f}" for n, v in measured.items())
        print(f"round {k + 1}/{args.rounds}: {done}", file=sys.stderr)
    med = {name: statistics.median(v) for name, v in rows.items()}
    floor = med[f"C loop, {N_FLOWS * window} entries"]
    print(
        f"ns per packet hop, median of {args.rounds} rounds ({hops:,} hops of the reference dumbbell, "
        f"{args.duration_ms:g} ms; the simulator's heap holds {pending:.1f} events on average):"
    )
    print(f"{'':<26}{'ns/hop':>10}{'min-max':>16}{'x the C loop of its size':>26}")
    for name, v in rows.items():
        print(f"{name:<26}{med[name]:>10.1f}{f'{min(v):.1f}-{max(v):.1f}':>16}{med[name] / floor:>26.2f}")
    print(f"compiled / pure speed-up: {med['simulator, pure'] / med['simulator, compiled']:.1f}x")
    if args.json:
        args.json.write_text(
            json.dumps({"rounds": rows, "median_ns_per_hop": med, "hops": hops, "mean_pending": pending}, indent=1)
        )


if __name__ == "__main__":
    main()
