"""Outputs of ``panama simulate``: summary.json, flows.csv, jobs.csv, resolved scenario, plots.

Every key of ``summary.json`` is documented in docs/simulator.md (section
"summary.json"); the file itself carries a ``_doc`` pointer there. Times are in
microseconds (``_us``) or seconds (``_s``), sizes in bytes. Apart from ``wall_s`` (and
the derived ``events_per_wall_s``), two runs of the same scenario give identical files,
whether the simulator runs compiled or not (``compiled`` says which).

:class:`SimResult` is defined here, where :func:`collect` builds it; the runner
re-exports it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from panama._ext import compiled
from panama.core.units import PS_PER_S, PS_PER_US
from panama.sim.diagnostics import diagnostics
from panama.tables import format_table

if TYPE_CHECKING:
    from panama.sim.runner import Simulation
    from panama.sim.scenario import Scenario
    from panama.sim.training import TrainingJob

SHORT_FLOW_BYTES = 100_000
# Flow size buckets of the FCT plot and of summary["fct_by_size"]: [low, high) bytes.
SIZE_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("<10KB", 0, 10_000),
    ("10-100KB", 10_000, 100_000),
    ("100KB-1MB", 100_000, 1_000_000),
    ("1-10MB", 1_000_000, 10_000_000),
    (">=10MB", 10_000_000, 1 << 62),
)
FLOW_COLUMNS = (
    "kind",
    "flow_id",
    "src",
    "dst",
    "size_bytes",
    "start_us",
    "finish_us",
    "fct_us",
    "ideal_fct_us",
    "slowdown",
    "retransmits",
    "timeouts",
    "tag",
)
JOB_COLUMNS = ("job", "iteration", "scheme", "start_us", "comm_start_us", "end_us", "iteration_time_us", "comm_time_us")
SUMMARY_DOC = "keys documented in docs/simulator.md, section summary.json; times in us or s, sizes in bytes"
# summary keys that differ between otherwise identical runs.
# Keys that differ between runs of the same scenario (wall clock) or between the compiled
# and the pure-Python simulator (``compiled``); everything else is identical.
NONDETERMINISTIC_KEYS = ("wall_s", "events_per_wall_s", "compiled")


def _us(ps: int | float | None) -> float | None:
    return None if ps is None else ps / PS_PER_US


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not len(values):
        return {"mean": None, "p50": None, "p99": None}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99))}


def flow_row(kind: str, flow) -> dict[str, Any]:
    net = flow.stack.network
    fct = flow.fct_ps
    return {
        "kind": kind,
        "flow_id": flow.id,
        "src": net.host_names[flow.src],
        "dst": net.host_names[flow.dst],
        "size_bytes": flow.size_bytes,
        "start_us": _us(flow.start_ps),
        "finish_us": _us(flow.finish_ps),
        "fct_us": _us(fct),
        "ideal_fct_us": _us(flow.ideal_fct_ps),
        "slowdown": flow.slowdown,
        "retransmits": flow.retransmits,
        "timeouts": flow.timeouts,
        "tag": flow.tag if flow.tag is not None else "",
    }


def fct_by_size(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size bucket: completed flows, FCT mean/p50/p99 (us), slowdown mean/p99."""
    out = []
    for label, lo, hi in SIZE_BUCKETS:
        sel = [r for r in rows if lo <= r["size_bytes"] < hi and r["fct_us"] is not None]
        f = _stats([r["fct_us"] for r in sel])
        s = _stats([r["slowdown"] for r in sel if r["slowdown"] is not None])
        out.append(
            {
                "bucket": label,
                "flows": len(sel),
                "fct_mean_us": f["mean"],
                "fct_p50_us": f["p50"],
                "fct_p99_us": f["p99"],
                "slowdown_mean": s["mean"],
                "slowdown_p99": s["p99"],
            }
        )
    return out


@dataclass
class SimResult:
    """Outcome of one run: ``summary`` (the summary.json dict), ``flow_rows`` (flows.csv),
    ``iteration_rows`` (jobs.csv), ``queue`` (busiest queue samples), ``out_dir`` (where
    files were written, if anywhere) and ``sim`` (the live :class:`Simulation`)."""

    scenario: Scenario
    summary: dict[str, Any]
    flow_rows: list[dict[str, Any]]
    iteration_rows: list[dict[str, Any]]
    queue: dict[str, Any]
    sim: Simulation
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)


def collect(sim: Simulation) -> SimResult:
    """Turn a finished :class:`Simulation` into a :class:`SimResult` (summary and tables)."""

    sc = sim.scenario
    bg_rows = [flow_row("background", f) for f in sim.background.flows]
    ring_rows = [flow_row("ring", f) for f in sim.ring_tcp.flows]
    iter_rows = [r.row() for job in sim.jobs for r in job.records]
    done_bg = [r for r in bg_rows if r["fct_us"] is not None]
    short = [r for r in done_bg if r["size_bytes"] < SHORT_FLOW_BYTES]
    short_fct = _stats([r["fct_us"] for r in short])
    short_sd = _stats([r["slowdown"] for r in short if r["slowdown"] is not None])
    all_sd = _stats([r["slowdown"] for r in done_bg if r["slowdown"] is not None])
    counters = sim.net.counters()
    acc = sim.pswitches.stats()
    now = sim.engine.now
    events = sim.engine.events

    jobs: dict[str, Any] = {job.name: _job_summary(job, sc) for job in sim.jobs}
    done_jobs = [j for j in jobs.values() if j["training_time_us"] is not None]

    queue_stats, queue = _busiest_queue(sim)

    drops_by_reason = {f"network.{k}": v for k, v in counters["drops"].items()}
    drops_by_reason |= {f"accelerator.{k}": v for k, v in acc["drops"].items()}
    summary: dict[str, Any] = {
        "_doc": SUMMARY_DOC,
        "scheme": sc.scheme,
        "congestion_control": sc.congestion_control(sc.scheme),
        "seed": sc.seed,
        "topology": sim.topology.name,
        **link_rates_gbps(sim.topology),
        "finished": sim.finished,
        "simulated_s": now / PS_PER_S,
        "wall_s": sim.wall_s,
        "compiled": compiled(),
        "events": events,
        "events_per_wall_s": events / sim.wall_s if sim.wall_s > 0 else None,
        "events_per_hop": events / counters["packet_hops"] if counters["packet_hops"] else None,
        "packet_hops": counters["packet_hops"],
        "drops": counters["drops_total"] + acc["drops_total"],
        "network_drops": counters["drops_total"],
        "accelerator_drops": acc["drops_total"],
        "drops_by_reason": drops_by_reason,
        "pfc_pauses": counters["pfc_pauses"],
        "pfc_paused_s": counters["pfc_paused_ps"] / PS_PER_S,
        "ecn_marks": counters["ecn_marks"],
        "link_bytes": counters["bytes_by_tier"],
        "bytes_total": counters["bytes_total"],
        "background_flows": len(bg_rows),
        "background_completed": len(done_bg),
        "short_flows": len(short),
        "short_fct_mean_us": short_fct["mean"],
        "short_fct_p50_us": short_fct["p50"],
        "short_fct_p99_us": short_fct["p99"],
        "short_slowdown_mean": short_sd["mean"],
        "short_slowdown_p99": short_sd["p99"],
        "slowdown_mean": all_sd["mean"],
        "slowdown_p99": all_sd["p99"],
        "fct_by_size": fct_by_size(done_bg),
        "ring_flows": len(ring_rows),
        "jobs": jobs,
        "jobs_finished": len(done_jobs),
        "mean_iteration_us": (
            float(np.mean([j["mean_iteration_us"] for j in jobs.values() if j["mean_iteration_us"] is not None]))
            if any(j["mean_iteration_us"] is not None for j in jobs.values())
            else None
        ),
        "mean_training_time_us": float(np.mean([j["training_time_us"] for j in done_jobs])) if done_jobs else None,
        "accelerators": {
            "contributions": acc["contributions"],
            "results_out": acc["results_out"],
            "retransmits_answered": acc["retransmits_answered"],
            "peak_used_slots": acc["peak_used_slots"],
            "peak_switch": acc["peak_switch"],
            "packet_memory_slots": acc["packet_memory_slots"],
        },
        "busiest_queue": queue_stats,
        "diagnostics": diagnostics(sim, bg_rows, PS_PER_S),
    }
    return SimResult(sc, summary, bg_rows + ring_rows, iter_rows, queue, sim)


def link_rates_gbps(topology) -> dict[str, float | list[float] | None]:
    """The summary's ``host_rate_gbps`` and ``fabric_rate_gbps``: the rates of the links as
    run (host-ToR links, switch-switch links), one number when every link of the kind has the
    same rate, else the sorted distinct rates; None when there is no such link."""
    rates: dict[str, set[float]] = {"host_rate_gbps": set(), "fabric_rate_gbps": set()}
    g = topology.graph
    for a, b, d in g.edges(data=True):
        host_link = topology.is_host(a) or topology.is_host(b)
        rates["host_rate_gbps" if host_link else "fabric_rate_gbps"].add(d["rate_bps"] / 1e9)
    return {k: (None if not v else min(v) if len(v) == 1 else sorted(v)) for k, v in rates.items()}


def _job_summary(job: TrainingJob, sc: Scenario) -> dict[str, Any]:
    """One job's entry of the summary's ``jobs``: placement, progress, times, retransmissions."""
    mean_it = job.mean_iteration_ps()
    total = job.training_time_ps()
    ws = job.worker_stats()
    return {
        "scheme": job.scheme,
        "scheme_used": job.scheme_used,
        "congestion_control": sc.congestion_control(job.scheme_used) if job.scheme_used else None,
        "admission": job.admission,
        "trees": len(job.plan.trees) if job.plan is not None and job.plan.admitted else 0,
        "hosts": list(job.hosts),
        "workers": job.n,
        "gradient_bytes": job.gradient_bytes,
        "iterations": job.iterations,
        "iterations_done": job.iterations_done,
        "start_us": _us(job.start_ps),
        "finish_us": _us(job.finish_ps),
        "mean_iteration_us": _us(mean_it),
        "training_time_us": _us(total),
        "worker_retransmissions": sum(w["retransmissions"] for w in ws),
        "worker_timeouts": sum(w["timeouts"] for w in ws),
        "error": job.error,
    }


def _busiest_queue(sim: Simulation) -> tuple[dict[str, Any], dict[str, Any]]:
    """The busiest sampled queue: its statistics (the summary's ``busiest_queue``) and its
    samples over time (:attr:`SimResult.queue`)."""
    queue_stats: dict[str, Any] = {"port": None}
    queue: dict[str, Any] = {"port": None, "times_us": [], "bytes": []}
    if sim.sampler is not None:
        port, col = sim.sampler.busiest()
        if port is not None and col:
            qs = sim.sampler.stats(port, packet_bytes=sim.scenario.network.mtu_bytes)
            queue_stats = {k: qs[k] for k in ("port", "samples", "mean_bytes", "p50_bytes", "p99_bytes", "max_bytes")}
            queue = {"port": port.name, "times_us": [t / PS_PER_US for t in sim.sampler.times_ps], "bytes": list(col)}
    return queue_stats, queue


def write(result: SimResult, out_dir: Path, *, plots: bool = True) -> list[Path]:
    """Write summary.json, flows.csv, jobs.csv, resolved.toml/.json and (``plots``) PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    p = out_dir / "summary.json"
    p.write_text(json.dumps(result.summary, indent=2) + "\n")
    files.append(p)
    files.append(_write_csv(out_dir / "flows.csv", FLOW_COLUMNS, result.flow_rows))
    files.append(_write_csv(out_dir / "jobs.csv", JOB_COLUMNS, result.iteration_rows))
    p = out_dir / "resolved.toml"
    p.write_text(result.scenario.to_toml())
    files.append(p)
    p = out_dir / "resolved.json"
    p.write_text(result.scenario.model_dump_json(indent=2) + "\n")
    files.append(p)
    if plots:
        from panama.sim import plots as plotting

        files.extend(plotting.write_all(result, out_dir))
    result.out_dir = out_dir
    result.files = files
    return files


# The files two runs of one scenario must give byte for byte (beside summary.json).
COMPARED_FILES = ("flows.csv", "jobs.csv")


def differences(dir_a: Path, dir_b: Path) -> list[str]:
    """What differs between two ``panama simulate`` output folders: ``summary.json``'s
    keys (present on one side only, or other values; less :data:`NONDETERMINISTIC_KEYS`),
    then each of :data:`COMPARED_FILES` that is present on one side only or holds other
    bytes. Empty when the runs are identical (the compiled-vs-pure identity's test)."""
    a = json.loads((Path(dir_a) / "summary.json").read_text())
    b = json.loads((Path(dir_b) / "summary.json").read_text())
    keys = sorted((set(a) | set(b)) - set(NONDETERMINISTIC_KEYS))
    diff = [k for k in keys if k not in a or k not in b or a[k] != b[k]]
    for name in COMPARED_FILES:
        fa, fb = Path(dir_a) / name, Path(dir_b) / name
        if fa.exists() != fb.exists() or (fa.exists() and fa.read_bytes() != fb.read_bytes()):
            diff.append(name)
    return diff


def _write_csv(path: Path, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in columns})
    return path


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _gbps(rate: float | list[float] | None) -> str:
    if rate is None:
        return "none"
    return "/".join(f"{r:g}" for r in (rate if isinstance(rate, list) else [rate])) + " Gb/s"


def terminal_table(result: SimResult) -> str:
    """A short human-readable summary of one run."""
    s = result.summary
    lines = [
        f"scenario: {s['topology']}  scheme={s['scheme']}  cc={s['congestion_control']}  seed={s['seed']}"
        f"  {'finished' if s['finished'] else 'STOPPED at max_time_ms'}",
        f"links: hosts {_gbps(s['host_rate_gbps'])}, fabric {_gbps(s['fabric_rate_gbps'])}",
        f"simulated {s['simulated_s'] * 1e3:.3f} ms in {s['wall_s']:.1f} s wall"
        f"  ({s['events']:,} events, {s['packet_hops']:,} packet hops)",
        f"drops {s['drops']} (network {s['network_drops']}, accelerators {s['accelerator_drops']})"
        f"  PFC pauses {s['pfc_pauses']}  ECN marks {s['ecn_marks']}",
        f"background flows {s['background_completed']}/{s['background_flows']} done;"
        f" short (<100KB) n={s['short_flows']}: FCT mean {_fmt(s['short_fct_mean_us'])} µs,"
        f" p50 {_fmt(s['short_fct_p50_us'])} µs, p99 {_fmt(s['short_fct_p99_us'])} µs;"
        f" slowdown mean {_fmt(s['short_slowdown_mean'], '.2f')}, p99 {_fmt(s['short_slowdown_p99'], '.2f')}",
    ]
    if s["jobs"]:
        rows = [
            (
                name,
                j["scheme"],
                str(j["scheme_used"]),
                str(j["congestion_control"]),
                j["trees"],
                j["workers"],
                f"{j['iterations_done']}/{j['iterations']}",
                _fmt(j["mean_iteration_us"]),
                _fmt(j["training_time_us"]),
            )
            for name, j in s["jobs"].items()
        ]
        headers = ("job", "scheme", "used", "cc", "trees", "workers", "iters", "mean iter µs", "total µs")
        lines += ["", format_table(rows, headers, align="llllrrrrr")]
        for name, j in s["jobs"].items():  # why a job did not run the scheme it asked for
            if j["scheme_used"] != j["scheme"]:
                lines.append(f"{name} ran {j['scheme_used']} instead of {j['scheme']}: {j.get('admission')}")
    if s["link_bytes"]:
        lines.append("")
        lines.append("bytes by link tier: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in s["link_bytes"].items()))
    return "\n".join(lines)
