"""How long a simulation will take, said before it starts: packet hops from the scenario's
offered traffic, CPU seconds from a measured simulator speed.

The estimate (:func:`estimate_hops`) counts what a run moves. Background: each source host
starts flows at the rate the runner draws them (``rate x load / (8 x mean size)``, the
mean of the untruncated distribution), each flow's packets are those of its size as
sampled, truncated at ``max_flow_bytes`` (so a preset of short flows only offers the few
packets it really sends: with ``max_flow_bytes = 100 KB`` web-search flows send 44
packets on average, not the 1,172 their mean size would give), and every packet crosses
the mean host-to-host path of the topology (shortest paths between 256 host pairs drawn
with a fixed seed) with one ACK per data packet. Each job moves its gradient every
iteration: host-based ring allreduce sends ``2 (n-1)/n`` gradients per worker along the
same mean path (with ACKs), in-network aggregation one gradient up and one down per
worker, about two tree links each way (:attr:`RunEstimate.tree_hops`).

:func:`estimate_cpu_s` divides by the simulator's speed, measured on the project's 2-core
development machine (docs/performance.md, issue 34), apart for the two kinds of hop: TCP
and fabric hops at the rate of the 150 ms ``paper`` run at 100 Gb/s (562 M hops, 4.7 M
hops per CPU second compiled, 0.40 M pure), hops of in-network aggregation at
``panama bench sim --scenario panama``'s (2.2 M and 0.17 M: the accelerators' and the
workers' per-packet work). Checked against runs (``Simulation`` of the presets, hops and
CPU seconds compiled, 2026-11-29): ``paper`` at 100 Gb/s with panama, 568 M hops estimated
against 562 M; ``paper`` (10 Gb/s, 150 ms) ring, panama and the floor, 77.0 M, 60.7 M and
56.3 M against 74.4 M, 62.6 M and 57.7 M, 16.4, 13.8 and 12.0 CPU seconds against 11.1,
14.9 and 8.3; ``jobs-dominated`` (the same with short flows only at load 0.1) 21.4 M,
5.1 M and 0.70 M against 17.4 M, 5.7 M and 0.73 M, 4.5, 2.0 and 0.15 CPU seconds against
2.3, 2.4 and 0.21 (before the truncation was counted, its floor was estimated at 18.8 M
hops). It is an estimate: congestion, retransmissions and PFC change the hop count, and
machines differ; it is printed as one.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

__all__ = [
    "COMPILED_HOPS_PER_CPU_S",
    "PURE_HOPS_PER_CPU_S",
    "COMPILED_TREE_HOPS_PER_CPU_S",
    "PURE_TREE_HOPS_PER_CPU_S",
    "RunEstimate",
    "packets_per_flow",
    "estimate_hops",
    "estimate_cpu_s",
    "describe_runs",
]

#: Simulator speed on the development machine, packet hops per CPU second (issue 34): TCP
#: and fabric hops (the 150 ms ``paper`` run at 100 Gb/s) ...
COMPILED_HOPS_PER_CPU_S = 4.7e6
PURE_HOPS_PER_CPU_S = 0.40e6
#: ... and hops of in-network aggregation (``panama bench sim --scenario panama``,
#: 2026-11-29: 2.20 M compiled, 0.174 M pure).
COMPILED_TREE_HOPS_PER_CPU_S = 2.2e6
PURE_TREE_HOPS_PER_CPU_S = 0.17e6

_MSS_BYTES = 1460  # background and ring TCP payload per packet (sim.dctcp's default)
_PANAMA_PAYLOAD_BYTES = 1444  # 361 floats per PANAMA packet
_PANAMA_LINKS_PER_WORKER = 2  # tree links per worker on each of the way up and down
_PAIRS = 256
_QUANTILES = 1 << 14  # points of the flow-size distribution the packets per flow average over


@dataclass(frozen=True)
class RunEstimate:
    """Packet hops of one run, split by origin, and the mean host-to-host path in links;
    ``tree_hops``: the part of ``job_hops`` carried by in-network aggregation."""

    background_hops: float
    job_hops: float
    mean_path_links: float
    tree_hops: float = 0.0

    @property
    def hops(self) -> float:
        return self.background_hops + self.job_hops


def _mean_path_links(topo) -> float:
    hosts = list(topo.hosts)
    rng = np.random.default_rng(0)
    pairs = rng.choice(len(hosts), size=(_PAIRS, 2))
    lengths = [nx.shortest_path_length(topo.graph, hosts[a], hosts[b]) for a, b in pairs.tolist() if a != b]
    return float(np.mean(lengths)) if lengths else 0.0


def packets_per_flow(cdf, max_flow_bytes: int | None = None, mss_bytes: int = _MSS_BYTES) -> float:
    """Mean data packets of a flow drawn from ``cdf`` (a
    :class:`panama.sim.workload.FlowSizeCdf`) as the runner draws it: whole bytes, at least
    one, truncated at ``max_flow_bytes``, in ``mss_bytes`` segments; averaged over
    evenly spaced quantiles (deterministic)."""
    u = (np.arange(_QUANTILES) + 0.5) / _QUANTILES
    sizes = np.maximum(1, np.rint(cdf.quantile(u)))
    if max_flow_bytes is not None:
        sizes = np.minimum(sizes, max_flow_bytes)
    return float(np.mean(np.ceil(sizes / mss_bytes)))


def estimate_hops(sc, scheme: str | None = None, *, with_jobs: bool = True) -> RunEstimate:
    """Packet hops of scenario ``sc`` under ``scheme`` (default: the scenario's);
    ``with_jobs=False``: the background alone (the floor)."""
    from panama.sim.runner import build_topology
    from panama.sim.workload import load_cdf

    topo = build_topology(sc)
    links = _mean_path_links(topo)
    bg = sc.background
    stop_ms = sc.duration_ms if bg.stop_ms is None else min(bg.stop_ms, sc.duration_ms)
    seconds = max(0.0, stop_ms - bg.start_ms) / 1e3
    hosts = list(topo.hosts)
    if bg.hosts is not None:
        # Names that are not hosts here are the run's to refuse, with its own message.
        hosts = [h for h in bg.hosts if h in topo and topo.is_host(h)]
    background = 0.0
    if hosts and bg.load > 0:
        # As the runner draws them: one Poisson process per host at the slowest host link's rate.
        rate_bps = min(topo.rate_bps(h, topo.tor_of(h)) for h in hosts)
        cdf = load_cdf(bg.workload)
        flows = len(hosts) * rate_bps * bg.load * seconds / (8 * cdf.mean_bytes)
        background = flows * packets_per_flow(cdf, bg.max_flow_bytes) * links * 2  # data + one ACK each
    jobs = tree = 0.0
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
                tree += n * grad / _PANAMA_PAYLOAD_BYTES * 2 * _PANAMA_LINKS_PER_WORKER
    return RunEstimate(background, jobs + tree, links, tree)


def _rates(compiled: bool) -> tuple[float, float]:
    """Hops per CPU second of one path: TCP and fabric hops, in-network aggregation's."""
    if compiled:
        return COMPILED_HOPS_PER_CPU_S, COMPILED_TREE_HOPS_PER_CPU_S
    return PURE_HOPS_PER_CPU_S, PURE_TREE_HOPS_PER_CPU_S


def estimate_cpu_s(hops: float, *, compiled: bool, tree_hops: float = 0.0) -> float:
    """CPU seconds to simulate ``hops`` packet hops, ``tree_hops`` of them in-network
    aggregation's (see the module docstring)."""
    tcp, tree = _rates(compiled)
    return (hops - tree_hops) / tcp + tree_hops / tree


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
    cpu = []
    for sc, scheme, with_jobs in runs:
        e = estimate_hops(sc, scheme, with_jobs=with_jobs)
        cpu.append(estimate_cpu_s(e.hops, compiled=compiled, tree_hops=e.tree_hops))
    procs = max(1, min(processes, len(runs)))
    wall = max(sum(cpu) / procs, max(cpu))
    path = "compiled" if compiled else "pure Python"
    tcp, tree = _rates(compiled)
    return (
        f"{what}: {len(runs)} runs, {procs} at a time: about {_duration(wall)} "
        f"({_duration(sum(cpu))} of CPU; estimate from the offered traffic at "
        f"{tcp / 1e6:.2f} M packet hops per CPU second ({tree / 1e6:.2f} M for in-network aggregation), "
        f"{path}, as measured on a 2-core development machine)"
    )
