"""Per-tree windows and ECN counters of the large in-network jobs of a shared-cluster preset.

    python bench/tree_windows.py [--rate-gbps 10] [--seed 1] [--period-us 20] [SCHEME ...]

For each scheme (default: panama), runs the preset's scenario (``paper`` by default) at
the given host and fabric rate and prints, per job of at least ``--min-workers`` workers:
its training time, the results its workers received, the fraction of them carrying CE
(a mark on the worker's own path) and ECE (the tree-wide OR of marks), timeouts, and the
mean window of its trees (``min(cwnd, cwnd_cap)``, packets) sampled every ``--period-us``
while the worker's transport is active. The sampling is an engine callback: it reads
state only, so the run's results are those of ``panama simulate`` on the same scenario.
Used for issue 18 (docs/experiments.md, "100 Gb/s hosts and fabric"); compiled or pure.
"""

from __future__ import annotations

import argparse

from panama.experiments.cluster_scenario import PRESETS, experiment_scenario
from panama.sim.runner import Simulation


def run(preset: str, scheme: str, rate_gbps: float, seed: int, period_us: float, min_workers: int) -> list[dict]:
    sc = experiment_scenario(preset).model_copy(update={"scheme": scheme, "seed": seed})
    if rate_gbps != 10:
        sc = sc.with_overrides([f"topology.host_rate_gbps={rate_gbps:g}", f"topology.fabric_rate_gbps={rate_gbps:g}"])
    sim = Simulation(sc)
    period_ps = round(period_us * 1e6)
    windows: dict[str, list[float]] = {}  # job -> [samples, sum of windows, sum of caps]

    def sample() -> None:
        for job in sim.jobs:
            if len(job.hosts) < min_workers:
                continue
            acc = windows.setdefault(job.name, [0, 0.0, 0.0])
            for w in job.workers:
                if w.transport.active:
                    for ctl in w.transport.cc:
                        acc[0] += 1
                        acc[1] += min(ctl.cwnd, ctl.cwnd_cap)
                        acc[2] += ctl.cwnd_cap
        sim.engine.after(period_ps, sample)

    sim.engine.after(period_ps, sample)
    sim.run()
    rows = []
    for job in sim.jobs:
        if len(job.hosts) < min_workers:
            continue
        stats = [w.transport.stats for w in job.workers]
        results = sum(st["results"] for st in stats)
        n, wsum, csum = windows.get(job.name, [0, 0.0, 0.0])
        t = job.training_time_ps()
        rows.append(
            {
                "job": job.name,
                "training_ms": t / 1e9 if t is not None else None,
                "results": results,
                "ce_share": sum(st["ce_results"] for st in stats) / results if results else None,
                "ece_share": sum(st["ece_results"] for st in stats) / results if results else None,
                "timeouts": sum(st["timeouts"] for st in stats),
                "window_pkts": wsum / n if n else None,
                "cap_pkts": csum / n if n else None,
            }
        )
    return rows


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("schemes", nargs="*", default=["panama"], help="schemes to run (default: panama)")
    p.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    p.add_argument("--rate-gbps", type=float, default=10.0, help="host and fabric link rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--period-us", type=float, default=20.0, help="window sampling period")
    p.add_argument("--min-workers", type=int, default=16, help="jobs with at least this many workers")
    a = p.parse_args()
    if a.rate_gbps <= 0 or a.period_us <= 0:
        p.error("--rate-gbps and --period-us must be > 0")
    for scheme in a.schemes:
        for r in run(a.preset, scheme, a.rate_gbps, a.seed, a.period_us, a.min_workers):
            print(
                f"{scheme:10s} {a.rate_gbps:g} Gb/s {r['job']:10s} training {_fmt(r['training_ms'], '.1f')} ms  "
                f"results {r['results']}  CE {_fmt(r['ce_share'], '.3f')}  ECE {_fmt(r['ece_share'], '.3f')}  "
                f"timeouts {r['timeouts']}  window {_fmt(r['window_pkts'], '.1f')} pkts "
                f"(cap {_fmt(r['cap_pkts'], '.0f')})",
                flush=True,
            )


if __name__ == "__main__":
    main()
