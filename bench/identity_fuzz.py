"""The compiled simulator against the pure one on random variations of the built-in scenarios.

``tests/sim/test_compiled.py`` holds the two paths identical on five fixed scenarios. A
change to the fast path (issue 34's steps, or the rewrite of its hot state in C that
docs/performance.md ends on) should also hold on the corners those five do not reach:
lossy fabrics with drop-tail losses and retransmission timeouts, accelerators short of
memory, tail-loss probes, the source's tree reaction, other placements and processing
latencies, 100 Gb/s links. This draws ``--cases`` scenarios from a seeded generator
(``--seed``): a base scenario (the golden ``tiny``, ``examples/quick.toml``,
``examples/lossless.toml``, PANAMA-heavy cut to 0.5 ms) with a random seed and scheme and
random overrides (``--stress`` picks the harsher values: small queues and switch
buffers, 16-64 accelerator slots, more lossy fabrics). Each case runs ``panama simulate``
twice in child processes, compiled and with ``PANAMA_NO_EXTENSIONS=1`` (the two at once on
two cores), and compares their outputs as the identity test does
(``panama.sim.outputs.differences``: ``summary.json`` less wall time and ``compiled``,
``flows.csv`` and ``jobs.csv`` byte for byte).

    python bench/identity_fuzz.py --cases 40 --seed 23 --stress
    python bench/identity_fuzz.py --cases 30 --seed 11 --json fuzz.json

One line per case (the overrides, the packet hops, the drops, "identical" or the keys that
differ); exit status 1 if any case differs or fails on one side only, 2 where the compiled
modules are not built (nothing to compare). A case refused by both paths with the same
message (an override the scenario rejects, e.g. a switch buffer smaller than its PFC
headroom) is reported and counted apart, not as a difference.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from panama import _ext
from panama.sim.outputs import differences

ROOT = Path(__file__).resolve().parents[1]
# Base scenario -> its duration in ms (None: the file's own).
BASES: dict[str, tuple[Path, float | None]] = {
    "tiny": (ROOT / "tests" / "sim" / "golden_sim" / "tiny.toml", None),
    "quick": (ROOT / "examples" / "quick.toml", 2.0),
    "lossless": (ROOT / "examples" / "lossless.toml", 1.0),
    "heavy": (ROOT / "src" / "panama" / "data" / "scenarios" / "panama_heavy.toml", 0.5),
}
SCHEMES = ("panama", "panama-or", "ina-single", "ina-fixed", "ring")
# Override -> (probability, values, values under --stress).
OPTIONS: dict[str, tuple[float, tuple, tuple]] = {
    "network.pfc": (0.4, (False,), (False,)),
    "network.queue_limit_bytes": (0.3, (30_000, 60_000, 100_000), (8_000, 15_000, 30_000)),
    "network.switch_buffer_bytes": (0.2, (600_000, 1_000_000), (400_000, 600_000)),
    "panama.num_trees": (0.3, (1, 2, 4), (1, 2, 4)),
    "panama.cc": (0.3, ("dctcp-path", "dctcp-or"), ("dctcp-path", "dctcp-or")),
    "panama.min_pto_us": (0.3, (20.0, 100.0), (20.0, 100.0)),
    "pswitch.packet_memory_slots": (0.3, (64, 128, 512), (16, 32, 64)),
    "pswitch.processing_latency_ns": (0.2, (0.0, 2000.0), (0.0, 2000.0)),
    "background.load": (0.3, (0.1, 0.5, 0.7), (0.5, 0.7)),
    "burst_bin_us": (0.3, (5.0, 20.0), (5.0, 20.0)),
    "placement": (0.2, ("random", "disjoint", "packed"), ("random", "disjoint", "packed")),
}
FAST_LINKS = ["topology.host_rate_gbps=100", "topology.fabric_rate_gbps=100"]


def _value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def draw_case(rng: random.Random, stress: bool) -> tuple[str, list[str]]:
    """A base scenario's name and its ``--set`` overrides, drawn from ``rng``."""
    base = rng.choice(sorted(BASES))
    ms = BASES[base][1]
    sets = [f"seed={rng.randint(1, 10**6)}", f"scheme={rng.choice(SCHEMES)}"]
    if ms is not None:
        sets += [f"duration_ms={ms}", f"max_time_ms={ms}"]
    for key, (prob, values, harsh) in OPTIONS.items():
        if rng.random() < (min(1.0, 1.5 * prob) if stress else prob):
            sets.append(f"{key}={_value(rng.choice(harsh if stress else values))}")
    if rng.random() < 0.2:
        sets += FAST_LINKS
    return base, sets


def simulate(base: str, sets: list[str], out: Path, pure: bool, timeout_s: float) -> dict[str, Any]:
    """One ``panama simulate`` in a child process: ``{"summary": ...}`` or ``{"error": ...}``."""
    args = [sys.executable, "-m", "panama", "simulate", str(BASES[base][0]), "--out", str(out), "--no-plots", "-q"]
    for s in sets:
        args += ["--set", s]
    try:
        done = subprocess.run(args, env=_ext.child_env(pure), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:.0f} s ({'pure' if pure else 'compiled'})"}
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
    return {"summary": json.loads((out / "summary.json").read_text())}


def run_case(base: str, sets: list[str], work: Path, timeout_s: float, pool: ThreadPoolExecutor) -> dict[str, Any]:
    """Both paths on one case, at once; the verdict ``identical``, ``differs``, ``refused``
    (both refused it alike) or ``failed`` (one side only, or differently)."""
    fast_dir, pure_dir = work / "compiled", work / "pure"
    fast_f = pool.submit(simulate, base, sets, fast_dir, False, timeout_s)
    pure_f = pool.submit(simulate, base, sets, pure_dir, True, timeout_s)
    fast, pure = fast_f.result(), pure_f.result()
    row: dict[str, Any] = {"base": base, "sets": sets}
    if "error" in fast or "error" in pure:
        same = fast.get("error") == pure.get("error")
        row.update(verdict="refused" if same else "failed", error=fast.get("error") or pure.get("error"))
        return row
    a, b = fast["summary"], pure["summary"]
    if a.get("compiled") is not True or b.get("compiled") is not False:
        row.update(verdict="failed", error=f"compiled: {a.get('compiled')} and {b.get('compiled')}, not true and false")
        return row
    diff = differences(fast_dir, pure_dir)
    row.update(verdict="differs" if diff else "identical", differ=diff, hops=a.get("packet_hops"), drops=a.get("drops"))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20, help="scenarios to draw (default 20)")
    ap.add_argument("--seed", type=int, default=1, help="the generator's seed (default 1)")
    ap.add_argument("--stress", action="store_true", help="harsher overrides (losses, small memories)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    ap.add_argument("--json", type=Path, help="write every case and its verdict here")
    args = ap.parse_args(argv)
    if args.cases < 1:
        ap.error("--cases must be at least 1")
    if args.timeout <= 0:
        ap.error("--timeout must be positive")
    if not _ext.extensions_built():
        print("identity_fuzz: the compiled extensions are not built here: nothing to compare", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="identity-fuzz-") as tmp, ThreadPoolExecutor(2) as pool:
        for i in range(args.cases):
            base, sets = draw_case(rng, args.stress)
            row = run_case(base, sets, Path(tmp) / str(i), args.timeout, pool)
            rows.append(row)
            if row["verdict"] == "identical":
                detail = f"{row['hops']:,} hops, {row['drops']:,} drops"
            elif row["verdict"] == "differs":
                detail = "differ: " + ", ".join(row["differ"][:8])
            else:
                detail = row["error"]
            print(f"{i + 1:3d}/{args.cases} {row['verdict']:9s} {base:8s} {' '.join(sets)}  ({detail})", flush=True)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("identical", "differs", "failed", "refused")}
    print(", ".join(f"{n} {v}" for v, n in counts.items()))
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "stress": args.stress, "cases": rows}, indent=1) + "\n")
    return 1 if counts["differs"] or counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
