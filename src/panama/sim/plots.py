"""PNG plots of one simulation run (matplotlib, Agg backend; no display needed).

Every title says what ran (:func:`run_label`: topology with its link rates as run, scheme,
congestion control, seed) and how many flows or jobs the figure holds.

* ``fct_by_size.png``: mean and p99 slowdown of background flows per size bucket;
* ``job_iterations.png``: iteration time of every job against the (integer) iteration index;
* ``queue_occupancy.png``: occupancy (KB) of the busiest switch queue over time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panama.sim.outputs import SimResult


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_label(summary: dict) -> str:
    """What ran, for a title (two lines): the topology as run (``fat-tree:k=8,gbps=100,...``), then
    the scheme, its congestion control and the seed."""
    return (
        f"{summary['topology']}\nscheme {summary['scheme']} (congestion control {summary['congestion_control']}),"
        f" seed {summary['seed']}"
    )


def plot_fct_by_size(result: SimResult, path: Path) -> Path:
    plt = _pyplot()
    buckets = [b for b in result.summary["fct_by_size"] if b["flows"]]  # no empty groups
    labels = [f"{b['bucket']}\n(n={b['flows']})" for b in buckets]
    mean = [b["slowdown_mean"] or 0.0 for b in buckets]
    p99 = [b["slowdown_p99"] or 0.0 for b in buckets]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(buckets))
    ax.bar([i - 0.2 for i in x], mean, width=0.4, label="mean")
    ax.bar([i + 0.2 for i in x], p99, width=0.4, label="p99")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("FCT slowdown (FCT / ideal FCT)")
    s = result.summary
    ax.set_title(
        f"Background flow slowdown by size ({s['background_completed']} of {s['background_flows']} flows done)\n"
        + run_label(s),
        fontsize=8,
    )
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_job_iterations(result: SimResult, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    by_job: dict[str, list[tuple[int, float]]] = {}
    for r in result.iteration_rows:
        by_job.setdefault(r["job"], []).append((r["iteration"], r["iteration_time_us"]))
    for name, pts in by_job.items():
        used = result.summary["jobs"][name]["scheme_used"]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{name} ({used})")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("iteration time (µs)")
    ax.set_title(
        f"Training iteration times ({len(by_job)} jobs; legend: scheme used)\n" + run_label(result.summary), fontsize=8
    )
    if by_job:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_queue(result: SimResult, path: Path) -> Path:
    plt = _pyplot()
    q = result.queue
    fig, ax = plt.subplots(figsize=(7, 4))
    where = q["port"] if q["port"] is not None else "no samples"
    if q["port"] is not None:
        ax.plot([t / 1000 for t in q["times_us"]], [b / 1000 for b in q["bytes"]], lw=0.8)
    ax.set_title(f"Occupancy of the busiest queue ({where})\n" + run_label(result.summary), fontsize=8)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("queue (KB)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(result: SimResult, out_dir: Path) -> list[Path]:
    return [
        plot_fct_by_size(result, out_dir / "fct_by_size.png"),
        plot_job_iterations(result, out_dir / "job_iterations.png"),
        plot_queue(result, out_dir / "queue_occupancy.png"),
    ]
