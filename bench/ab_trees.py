"""Two builds of the simulator, alternated on one benchmark scenario: is B faster than A?

Issue 34's steps are judged so (docs/performance.md, "alternated pairs"): two source trees,
each with its compiled modules built in place (``python setup.py build_ext --inplace``),
run the same scenario in turn in fresh processes (``PYTHONPATH=TREE/src``), A first in
even pairs and B first in odd ones, so that a drift of the machine over the minutes falls
on both. Each run is timed in CPU seconds of the simulation alone (setup excluded) and
reports its packet hops, engine events and a digest of every flow's and job iteration's
completion; the trees must agree on all three (a step that changes results is not a
speed-up), else the script says so and exits 1.

It prints each tree's median and minimum nanoseconds per hop and the mean of the paired
differences, (B - A) / A, with its 95 % confidence interval (Student's t over the pairs):
an interval that contains 0 means "not measurable" on this machine with this many pairs.

    python bench/ab_trees.py /tmp/before /tmp/after --scenario paper-100g --ms 3 --pairs 16
    python bench/ab_trees.py A B --scenario panama --ms 3 --pairs 20 --json ab.json

Scenarios are ``panama bench sim``'s (``reference``, ``panama``, ``paper-100g``), each with
its benchmark seed; ``--pure`` runs both trees with ``PANAMA_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from scipy import stats

from panama import _ext

# One run in a child process: the scenario of `panama bench sim`, one slice, CPU seconds.
_CHILD = r"""
import json, sys, time
from panama.benchmarks.sim import _SlicedRun
from panama.benchmarks.settings import SIM_DEFAULTS
from panama import _ext
scenario, ms = sys.argv[1], float(sys.argv[2])
seed = SIM_DEFAULTS[scenario][1]
run = _SlicedRun(scenario, int(round(ms * 1e9)), seed, 1)
t0 = time.process_time()
hops, _ = run.step(1)
cpu = time.process_time() - t0
fig = run.figures()
print(json.dumps({"cpu_s": cpu, "hops": hops, "events": run.engine.events,
                  "digest": str(fig.get("completions_sha256", fig.get("goodput_gbps"))),
                  "compiled": _ext.compiled()}))
"""


def run_once(tree: Path, scenario: str, ms: float, pure: bool, timeout_s: float) -> dict:
    """One run of ``scenario`` with ``tree``'s sources (and its in-place build)."""
    env = _ext.child_env(pure, PYTHONPATH=str(tree / "src"))
    try:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, scenario, repr(ms)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"ab_trees: a run with {tree} took more than {timeout_s:.0f} s (--timeout)") from None
    if out.returncode != 0:
        raise SystemExit(f"ab_trees: the run with {tree} failed:\n{out.stderr.strip()[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["compiled"] == pure:
        said = out.stderr.strip().splitlines()[-1:] or ["no extension found"]
        raise SystemExit(
            f"ab_trees: {tree} ran {'compiled' if pure else 'interpreted'} ({said[0]}):"
            f" {'--pure sets PANAMA_NO_EXTENSIONS=1' if pure else 'build it in place first'}"
        )
    return result


def paired_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of (b - a) / a in percent and its 95 % confidence interval (Student's t)."""
    d = [(y - x) / x * 100.0 for x, y in zip(a, b)]
    mean = statistics.fmean(d)
    if len(d) < 2:
        return mean, -math.inf, math.inf
    half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a", type=Path, help="source tree A (the baseline), built in place")
    ap.add_argument("tree_b", type=Path, help="source tree B (the step), built in place")
    ap.add_argument("--scenario", choices=("reference", "panama", "paper-100g"), default="paper-100g")
    ap.add_argument("--ms", type=float, default=3.0, help="simulated milliseconds per run (default 3)")
    ap.add_argument("--pairs", type=int, default=16, help="alternated pairs (default 16)")
    ap.add_argument("--pure", action="store_true", help="both trees interpreted (PANAMA_NO_EXTENSIONS=1)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take (default 600)")
    ap.add_argument("--json", type=Path, help="also write the runs and the summary here")
    args = ap.parse_args(argv)
    for tree in (args.tree_a, args.tree_b):
        if not (tree / "src" / "panama").is_dir():
            ap.error(f"{tree} is not a source tree (no src/panama)")
    if args.pairs < 2:
        ap.error("--pairs must be 2 or more (the interval needs two differences)")
    if not args.ms > 0 or not args.timeout > 0:
        ap.error(f"--ms and --timeout must be > 0, got {args.ms!r} and {args.timeout!r}")
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    trees = {"A": args.tree_a, "B": args.tree_b}
    for i in range(args.pairs):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            r = run_once(trees[side], args.scenario, args.ms, args.pure, args.timeout)
            r["ns_per_hop"] = r["cpu_s"] / r["hops"] * 1e9
            runs[side].append(r)
        a, b = runs["A"][-1], runs["B"][-1]
        print(f"pair {i + 1:2d}/{args.pairs}: A {a['ns_per_hop']:8.1f}  B {b['ns_per_hop']:8.1f} ns/hop", flush=True)
        if (a["hops"], a["events"], a["digest"]) != (b["hops"], b["events"], b["digest"]):
            print(
                f"ab_trees: the trees' results differ: A {a['hops']} hops, {a['events']} events, {a['digest']};"
                f" B {b['hops']} hops, {b['events']} events, {b['digest']}"
            )
            return 1
    ns = {side: [r["ns_per_hop"] for r in runs[side]] for side in runs}
    mean, lo, hi = paired_interval(ns["A"], ns["B"])
    faster = sum(y < x for x, y in zip(ns["A"], ns["B"]))
    summary = {
        "scenario": args.scenario,
        "ms": args.ms,
        "pure": args.pure,
        "pairs": args.pairs,
        "hops": runs["A"][0]["hops"],
        "a_median_ns_per_hop": statistics.median(ns["A"]),
        "a_min_ns_per_hop": min(ns["A"]),
        "b_median_ns_per_hop": statistics.median(ns["B"]),
        "b_min_ns_per_hop": min(ns["B"]),
        "b_minus_a_pct": mean,
        "b_minus_a_ci95_pct": [lo, hi],
        "b_faster_pairs": faster,
    }
    print(
        f"{args.scenario}, {args.ms:g} ms, {runs['A'][0]['hops']} hops, results identical in every run\n"
        f"A: median {summary['a_median_ns_per_hop']:.1f}, min {summary['a_min_ns_per_hop']:.1f} ns/hop\n"
        f"B: median {summary['b_median_ns_per_hop']:.1f}, min {summary['b_min_ns_per_hop']:.1f} ns/hop\n"
        f"B - A: {mean:+.2f} % (95 % interval {lo:+.2f} to {hi:+.2f} %), B faster in {faster} of {args.pairs} pairs"
        + ("" if lo <= 0 <= hi else (": B is faster" if hi < 0 else ": B is slower"))
    )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
