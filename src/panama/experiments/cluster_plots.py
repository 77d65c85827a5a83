"""The shared-cluster experiment's figures, each readable without the docs beside it.

Every figure's title names the preset, the schemes, the seeds and the number of short
flows behind it; every ratio is a gain against ring (ring / scheme, higher is better) on a
log axis around 1 (ring); the floor is labelled "floor (no jobs)". Axis limits follow the
values, not their intervals: an interval that leaves the axis is cut at its edge and the
cut is marked with a triangle, so two seeds' wide intervals cannot squash the bars.

* ``fct_cdf.png``: FCT CDFs per scheme of the headline group, seeds pooled;
* ``normalized.png``: the headline group's gains per metric, with their intervals and values;
* ``sweep.png``: gains along the first multi-valued sweep axis;
* ``gain_vs_share.png``: short-flow gains against the jobs' share of ring's bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from panama.experiments.cluster_analysis import _group_key
from panama.experiments.cluster_scenario import SHORT_FLOW_BYTES
from panama.experiments.schemes import BASELINE, FLOOR, GAIN_TEXT, scheme_label

#: The gains of ``normalized.png``: (summary key, label). The p99 is the per-seed gain's
#: geometric mean, the number the terminal table, the demo and docs/results.md call "p99 gain".
GAIN_METRICS = (
    ("short_fct_p99_us_gain", "short FCT p99"),
    ("short_fct_mean_us_gain", "short FCT mean"),
    ("large_flow_fct_mean_us_gain", "large-flow FCT mean"),
    ("large_job_training_time_s_gain", "large-job training time"),
    ("bytes_total_gain", "network bytes (x fewer)"),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def describe_run(summary: Mapping[str, Any], schemes: Sequence[str] | None = None) -> str:
    """One line for a figure's title: preset, schemes, seeds and short flows per scheme."""
    cfg = summary.get("config") or {}
    seeds = summary.get("headline_seeds") or []
    schemes = list(schemes if schemes is not None else summary.get("schemes", {}))
    first = next(iter(summary.get("schemes", {}).values()), {})
    n_short = first.get("short_flows_pooled")
    params = ", ".join(f"{k}={v}" for k, v in (summary.get("headline_params") or {}).items())
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"
    flows = f"; {n_short} short flows per scheme" if n_short is not None else ""
    return (
        f"preset {cfg.get('preset', '?')}{f' ({params})' if params else ''}, {seed_text}{flows}\n"
        f"schemes: {', '.join(scheme_label(s) for s in schemes)}"
    )


def plot_all(out: Path, summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Write the figures of one output directory; returns ``{name: file}`` for summary.json."""
    files = {}
    schemes = list(summary["schemes"])
    plot_fct_cdf(out / "fct_cdf.png", summary, runs, schemes)
    files["fct_cdf"] = "fct_cdf.png"
    plot_gains(out / "normalized.png", summary, schemes)
    files["normalized"] = "normalized.png"
    multi = [k for k, v in summary.get("axes", {}).items() if k != "seed" and len(v) > 1]
    if multi:
        plot_sweep(out / "sweep.png", summary, schemes, multi)
        files["sweep"] = "sweep.png"
    if len(summary["groups"]) > 1 and all(g.get("aggregation_share") is not None for g in summary["groups"]):
        plot_gain_vs_share(out / "gain_vs_share.png", summary, schemes)
        files["gain_vs_share"] = "gain_vs_share.png"
    return files


def plot_fct_cdf(path: Path, summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], schemes: Sequence[str]):
    """FCT CDFs per scheme of the headline group, seeds pooled: short background flows, all."""
    plt = _pyplot()
    head = json.dumps(summary.get("headline_params", {}), sort_keys=True)
    short_bytes = summary.get("config", {}).get("short_flow_bytes", SHORT_FLOW_BYTES)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for scheme in schemes:
        short, allf = [], []
        for r in runs:
            if r["params"]["scheme"] != scheme or _group_key(r["params"]) != head:
                continue
            for size, fct in r["result"].get("fct_samples", []):
                allf.append(fct)
                if size < short_bytes:
                    short.append(fct)
        for ax, vals in ((axes[0], short), (axes[1], allf)):
            if vals:
                xs = np.sort(np.asarray(vals))
                style = {"color": "k", "ls": "--"} if scheme == FLOOR else {}
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=f"{scheme_label(scheme)} (n={len(xs)})", **style)
    axes[0].set_title(f"short background flows (< {short_bytes // 1000} KB)")
    axes[1].set_title("all background flows")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("flow completion time (µs)")
        ax.set_ylabel("CDF (flows of every seed pooled)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Flow completion times, " + describe_run(summary, schemes), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plain_log_ticks(ax) -> None:
    """Gains as plain numbers (0.5, 1, 2, 5) on a log axis, not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _log_limits(values: Sequence[float]) -> tuple[float, float]:
    """Log-axis limits that hold ``values`` and 1 (ring) with a margin."""
    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    return lo / 1.35, hi * 1.35


def _clip_marks(ax, xs: Sequence[float], lows: Sequence[float], highs: Sequence[float], limits) -> None:
    """Triangles at the axis edge where an interval was cut by the limits."""
    for x, lo, hi in zip(xs, lows, highs, strict=True):
        if hi > limits[1]:
            ax.plot([x], [limits[1]], marker="^", color="k", ms=5, clip_on=False, zorder=5)
        if lo < limits[0]:
            ax.plot([x], [limits[0]], marker="v", color="k", ms=5, clip_on=False, zorder=5)


def plot_gains(path: Path, summary: Mapping[str, Any], schemes: Sequence[str]) -> None:
    """Bars of the headline group's gains against ring (:data:`GAIN_METRICS`), one per scheme
    (ring is the line at 1), rising from 1 on a log axis, with their intervals and values;
    a metric no scheme has (no large flows, say) is left out."""
    plt = _pyplot()
    shown = [s for s in schemes if s != BASELINE]
    st = summary["schemes"]
    metrics = [(k, label) for k, label in GAIN_METRICS if any(_finite(st.get(s, {}).get(k)) for s in shown)]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / max(1, len(shown))
    x = np.arange(len(metrics))
    values = [st[s][k] for s in shown for k, _ in metrics if _finite(st[s].get(k))]
    limits = _log_limits(values) if values else (0.5, 2.0)
    for j, scheme in enumerate(shown):
        xs, vals, lows, highs = [], [], [], []
        for i, (k, _) in enumerate(metrics):
            v = st[scheme].get(k)
            if not _finite(v):
                continue
            ci = st[scheme].get(k + "_ci")
            ok = st[scheme].get("n_seeds", 0) > 1 and ci and all(_finite(c) for c in ci)
            xs.append(x[i] + (j - (len(shown) - 1) / 2) * width)
            vals.append(v)
            lows.append(ci[0] if ok else v)
            highs.append(ci[1] if ok else v)
        style = {"color": "0.55", "hatch": "//"} if scheme == FLOOR else {}
        ax.bar(xs, [v - 1.0 for v in vals], width, bottom=1.0, label=scheme_label(scheme), **style)
        err = [
            [v - max(lo, limits[0]) for v, lo in zip(vals, lows)],
            [min(hi, limits[1]) - v for v, hi in zip(vals, highs)],
        ]
        ax.errorbar(xs, vals, yerr=err, fmt="none", ecolor="k", capsize=3, lw=0.9)
        _clip_marks(ax, xs, lows, highs, limits)
        for xi, v in zip(xs, vals):
            ax.annotate(f"{v:.2f}", (xi, v), xytext=(0, 2 if v >= 1 else -9), textcoords="offset points",
                        ha="center", fontsize=7)  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylim(*limits)
    _plain_log_ticks(ax)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [label for _, label in metrics])
    ax.set_ylabel(f"gain against {BASELINE} (x better; log)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3, which="both")
    seeds = len(summary.get("headline_seeds") or [])
    interval = "95 % t intervals over seeds" if seeds > 1 else "one seed: no interval"
    ax.set_title(
        f"Gains against {BASELINE} ({GAIN_TEXT}; geometric mean over seeds, {interval}; cut intervals: ▲▼)\n"
        + describe_run(summary, schemes),
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(path: Path, summary: Mapping[str, Any], schemes: Sequence[str], multi: list[str]) -> None:
    """Gains along the first multi-valued sweep axis (the others at their first value)."""
    plt = _pyplot()
    axis = multi[0]
    others = {k: summary["axes"][k][0] for k in multi[1:]}
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.6))
    for scheme in [s for s in schemes if s != BASELINE]:
        pts = []
        for g in summary["groups"]:
            if all(g["params"].get(k) == v for k, v in others.items()):
                st = g["schemes"].get(scheme, {})
                pts.append(
                    (g["params"][axis], st.get("short_fct_p99_us_gain"), st.get("large_job_training_time_s_gain"))
                )
        pts.sort(key=lambda t: t[0])
        for ax, idx in ((axs[0], 1), (axs[1], 2)):
            ys = [p[idx] if p[idx] is not None else np.nan for p in pts]
            if any(_finite(y) for y in ys):
                style = "k--" if scheme == FLOOR else "o-"
                ax.plot([p[0] for p in pts], ys, style, label=scheme_label(scheme))
    axs[0].set_ylabel(f"short-flow p99 FCT gain against {BASELINE} (x better)")
    axs[1].set_ylabel(f"large-job training-time gain against {BASELINE} (x better)")
    for ax in axs:
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel(axis + (f"  ({', '.join(f'{k}={v}' for k, v in others.items())})" if others else ""))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    seeds = ", ".join(map(str, summary.get("headline_seeds") or []))
    cfg = summary.get("config") or {}
    fig.suptitle(
        f"Gains against {BASELINE} along {axis} (geometric mean over seeds {seeds}); preset {cfg.get('preset', '?')}; "
        f"schemes: {', '.join(scheme_label(s) for s in schemes)}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_gain_vs_share(path: Path, summary: Mapping[str, Any], schemes: Sequence[str]) -> None:
    """Short-flow p99 (pooled, bootstrap interval) and mean (t interval over seeds) gain against
    ring, against the share of ring's link bytes that aggregation traffic adds, one line per
    scheme; the floor is the bound of every scheme. One seed: no error bars."""
    plt = _pyplot()
    groups = sorted(summary["groups"], key=lambda g: g["aggregation_share"])
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.6))
    specs = (
        (axs[0], "short_fct_p99_pooled_us_gain", f"short-flow p99 gain against {BASELINE} (seeds pooled)"),
        (axs[1], "short_fct_mean_us_gain", f"short-flow mean gain against {BASELINE} (over seeds)"),
    )
    for ax, key, label in specs:
        values, cut = [], []
        for scheme in [s for s in schemes if s != BASELINE]:
            xs, ys, lo, hi = [], [], [], []
            for g in groups:
                st = g["schemes"].get(scheme, {})
                y = st.get(key)
                if not _finite(y):
                    continue
                if key.endswith("pooled_us_gain"):
                    ci = (st.get(key + "_ci_low"), st.get(key + "_ci_high"))
                else:
                    ci = tuple(st.get(key + "_ci") or (None, None))
                many = len(g["seeds"]) > 1 and all(_finite(c) for c in ci)
                xs.append(g["aggregation_share"])
                ys.append(y)
                lo.append(ci[0] if many else y)
                hi.append(ci[1] if many else y)
            if xs:
                values += ys
                cut.append((xs, ys, lo, hi, scheme))
        limits = _log_limits(values) if values else (0.5, 2.0)
        for xs, ys, lo, hi, scheme in cut:
            err = [[y - max(a, limits[0]) for y, a in zip(ys, lo)], [min(b, limits[1]) - y for y, b in zip(ys, hi)]]
            style = "k--" if scheme == FLOOR else "o-"
            ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3, label=scheme_label(scheme))
            _clip_marks(ax, xs, lo, hi, limits)
        ax.set_yscale("log")
        ax.set_ylim(*limits)
        _plain_log_ticks(ax)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel(f"jobs' share of {BASELINE}'s link bytes (1 - floor / {BASELINE})")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Short-flow gains against {BASELINE} by the jobs' share of the bytes ({GAIN_TEXT}; cut intervals: ▲▼)\n"
        + describe_run(summary, schemes),
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
