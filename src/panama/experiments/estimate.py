"""How long a simulation will take, said before it starts: packet hops from the scenario's
offered traffic, CPU seconds from a measured simulator speed.

The estimate (:func:`estimate_hops`) counts what a run moves: every background byte
offered in ``[start, stop)`` (hosts x host rate x load x time) crosses the mean host-to-host
path of the topology (shortest paths between 256 host pairs drawn with a fixed seed), once
as data in MSS-sized packets and once more as one ACK per data packet; each job moves its
gradient every iteration: host-based ring allreduce sends ``2 (n-1)/n`` gradients per
worker along the same mean path (with ACKs), in-network aggregation one gradient up and
one down per worker, about two tree links each way. :func:`estimate_cpu_s` divides by the
simulator's speed, measured on the project's 2-core development machine
(docs/performance.md, issue 34): the compiled path moved the 150 ms ``paper`` run at
100 Gb/s (562 M hops) at 4.7 M hops per CPU second, the pure path 0.40 M. On that run the
estimate says 568 M hops (1 % over). It is an estimate: congestion, retransmissions and
PFC change the hop count, and machines differ; it is printed as one.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

__all__ = [
    "COMPILED_HOPS_PER_CPU_S",
    "PURE_HOPS_PER_CPU_S",
    "RunEstimate",
    "estimate_hops",
    "estimate_cpu_s",
    "describe_runs",
]

#: Simulator speed on the development machine, packet hops per CPU second (issue 34).
COMPILED_HOPS_PER_CPU_S = 4.7e6
PURE_HOPS_PER_CPU_S = 0.40e6

_MSS_BYTES = 1460  # background and ring TCP payload per packet (sim.dctcp's default)
_PANAMA_PAYLOAD_BYTES = 1444  # 361 floats per PANAMA packet
_PANAMA_LINKS_PER_WORKER = 2  # tree links per worker on each of the way up and down
_PAIRS = 256


@dataclass(frozen=True)
class RunEstimate:
    """Packet hops of one run, split by origin, and the mean host-to-host path in links."""

    background_hops: float
    job_hops: float
    mean_path_links: float

    @property
    def hops(self) -> float:
        return self.background_hops + self.job_hops


def _mean_path_links(topo) -> float:
    hosts = list(topo.hosts)
    rng = np.random.default_rng(0)
    pairs = rng.choice(len(hosts), size=(_PAIRS, 2))
    lengths = [nx.shortest_path_length(topo.graph, hosts[a], hosts[b]) for a, b in pairs.tolist() if a != b]
    return float(np.mean(lengths)) if lengths else 0.0


def estimate_hops(sc, scheme: str | None = None, *, with_jobs: bool = True) -> RunEstimate:
    """Packet hops of scenario ``sc`` under ``scheme`` (default: the scenario's);
    ``with_jobs=False``: the background alone (the floor)."""
    from panama.sim.runner import build_topology

    topo = build_topology(sc)
    links = _mean_path_links(topo)
    bg = sc.background
    stop_ms = sc.duration_ms if bg.stop_ms is None else min(bg.stop_ms, sc.duration_ms)
    seconds = max(0.0, stop_ms - bg.start_ms) / 1e3
    host_bps = [d["rate_bps"] for a, b, d in topo.graph.edges(data=True) if topo.is_host(a) or topo.is_host(b)]
    offered_bytes = sum(host_bps) / 8 * bg.load * seconds
    background = offered_bytes / _MSS_BYTES * links * 2  # data + one ACK each
    jobs = 0.0
    if with_jobs:
        scheme = scheme or sc.scheme
        threshold = sc.panama.threshold_bytes
        for job in sc.jobs:
            n = len(job.hosts) if job.hosts else job.workers
            grad = job.gradient_bytes * job.iterations
            job_scheme = job.scheme or scheme
            if job_scheme == "ring" or grad / job.iterations < threshold:
                jobs += n * 2 * (n - 1) / n * grad / _MSS_BYTES * links * 2
            else:
                jobs += n * grad / _PANAMA_PAYLOAD_BYTES * 2 * _PANAMA_LINKS_PER_WORKER
    return RunEstimate(background, jobs, links)


def estimate_cpu_s(hops: float, *, compiled: bool) -> float:
    """CPU seconds to simulate ``hops`` packet hops (see the module docstring)."""
    return hops / (COMPILED_HOPS_PER_CPU_S if compiled else PURE_HOPS_PER_CPU_S)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def describe_runs(runs: list[tuple[object, str, bool]], processes: int, *, compiled: bool, what: str) -> str:
    """One line saying how long ``runs`` will take: each ``(scenario, scheme, with_jobs)``,
    run ``processes`` at a time (see the module docstring for the estimate)."""
    if not runs:
        return f"{what}: every run already finished (reusing them)"
    cpu = [
        estimate_cpu_s(estimate_hops(sc, scheme, with_jobs=with_jobs).hops, compiled=compiled)
        for sc, scheme, with_jobs in runs
    ]
    procs = max(1, min(processes, len(runs)))
    wall = max(sum(cpu) / procs, max(cpu))
    path = "compiled" if compiled else "pure Python"
    return (
        f"{what}: {len(runs)} runs, {procs} at a time: about {_duration(wall)} "
        f"({_duration(sum(cpu))} of CPU; estimate from the offered traffic at "
        f"{(COMPILED_HOPS_PER_CPU_S if compiled else PURE_HOPS_PER_CPU_S) / 1e6:.2f} M packet hops per CPU second, "
        f"{path}, as measured on a 2-core development machine)"
    )
