"""The shared-cluster experiment's outputs: JSON and CSV files, plots, the terminal table."""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from panama.experiments.cluster_analysis import _group_key, normalise_runs
from panama.experiments.cluster_scenario import SHORT_BUCKETS, SHORT_FLOW_BYTES
from panama.experiments.schemes import BASELINE, FLOOR
from panama.experiments.sweep import (
    write_json_atomic,
)
from panama.tables import format_table as draw_table


def write_outputs(out: Path, summary: dict[str, Any], runs: Sequence[Mapping[str, Any]], *, make_plots: bool) -> None:
    """runs.csv, summary.csv, summary.json and the plots."""
    rows = normalise_runs(runs)
    _write_csv(out / "runs.csv", rows)
    srows = []
    for g in summary["groups"]:
        for scheme, st in g["schemes"].items():
            row = dict(g["params"], scheme=scheme, seeds=" ".join(map(str, g["seeds"])))
            for k, v in st.items():
                if k.endswith("_ci"):
                    lo, hi = v if v else (None, None)
                    row[k + "_low"], row[k + "_high"] = lo, hi
                else:
                    row[k] = v
            srows.append(row)
    _write_csv(out / "summary.csv", srows)
    files = {"runs": "runs.csv", "summary_csv": "summary.csv", "config": "config.json", "points": "points/"}
    if make_plots:
        files.update(plot_all(out, summary, runs))
    summary["files"] = files
    write_json_atomic(out / "summary.json", summary)


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})


PLOT_METRICS = (
    ("short_fct_mean_us_norm", "short FCT mean"),
    ("short_fct_p99_us_norm", "short FCT p99"),
    ("large_flow_fct_mean_us_norm", "large-flow FCT mean"),
    ("large_job_training_time_s_norm", "large-job training time"),
    ("bytes_total_norm", "network bytes"),
)


def plot_all(out: Path, summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """fct_cdf.png (short-flow FCT CDF per scheme, headline group, seeds pooled),
    normalized.png (bars of normalised metrics with CI), sweep.png (multi-valued axes)."""
    import matplotlib

    matplotlib.use("Agg")
    files = {}
    schemes = list(summary["schemes"])
    _plot_fct_cdf(out / "fct_cdf.png", summary, runs, schemes)
    files["fct_cdf"] = "fct_cdf.png"
    _plot_normalized(out / "normalized.png", summary, schemes)
    files["normalized"] = "normalized.png"
    multi = [k for k, v in summary.get("axes", {}).items() if k != "seed" and len(v) > 1]
    if multi:
        _plot_sweep(out / "sweep.png", summary, schemes, multi)
        files["sweep"] = "sweep.png"
    if len(summary["groups"]) > 1 and all(g.get("aggregation_share") is not None for g in summary["groups"]):
        plot_gain_vs_share(out / "gain_vs_share.png", summary, schemes)
        files["gain_vs_share"] = "gain_vs_share.png"
    return files


def _plot_fct_cdf(
    path: Path, summary: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], schemes: Sequence[str]
) -> None:
    """FCT CDFs per scheme of the headline group, seeds pooled: short background flows, all."""
    import matplotlib.pyplot as plt  # plot_all chose the Agg backend

    head = json.dumps(summary.get("headline_params", {}), sort_keys=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for scheme in schemes:
        short, allf = [], []
        for r in runs:
            if r["params"]["scheme"] != scheme or _group_key(r["params"]) != head:
                continue
            for size, fct in r["result"].get("fct_samples", []):
                allf.append(fct)
                if size < summary.get("config", {}).get("short_flow_bytes", SHORT_FLOW_BYTES):
                    short.append(fct)
        for ax, vals in ((axes[0], short), (axes[1], allf)):
            if vals:
                xs = np.sort(np.asarray(vals))
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=scheme)
    axes[0].set_title("short background flows (< 100 KB)")
    axes[1].set_title("all background flows")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("flow completion time (µs)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_normalized(path: Path, summary: Mapping[str, Any], schemes: Sequence[str]) -> None:
    """Bars of the normalised metrics (:data:`PLOT_METRICS`) per scheme, with their intervals."""
    import matplotlib.pyplot as plt  # plot_all chose the Agg backend

    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(schemes))
    x = np.arange(len(PLOT_METRICS))
    for j, scheme in enumerate(schemes):
        st = summary["schemes"][scheme]
        vals = [st.get(k) if st.get(k) is not None else np.nan for k, _ in PLOT_METRICS]
        errs = []
        for (k, _), v in zip(PLOT_METRICS, vals):
            ci = st.get(k + "_ci")
            if ci and all(c is not None and math.isfinite(c) for c in ci) and math.isfinite(v):
                errs.append([v - ci[0], ci[1] - v])
            else:
                errs.append([0.0, 0.0])
        ax.bar(x + (j - (len(schemes) - 1) / 2) * width, vals, width, yerr=np.array(errs).T, capsize=3, label=scheme)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [label for _, label in PLOT_METRICS])
    ax.set_ylabel(f"normalised to {BASELINE} (lower is better)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_sweep(path: Path, summary: Mapping[str, Any], schemes: Sequence[str], multi: list[str]) -> None:
    """Gains along the first multi-valued sweep axis (the others at their first value)."""
    import matplotlib.pyplot as plt  # plot_all chose the Agg backend

    axis = multi[0]
    others = {k: summary["axes"][k][0] for k in multi[1:]}
    fig, axs = plt.subplots(1, 2, figsize=(11, 4))
    for scheme in schemes:
        pts = []
        for g in summary["groups"]:
            if all(g["params"].get(k) == v for k, v in others.items()):
                st = g["schemes"].get(scheme, {})
                pts.append(
                    (g["params"][axis], st.get("short_fct_p99_us_gain"), st.get("large_job_training_time_s_gain"))
                )
        pts.sort(key=lambda t: t[0])
        for ax, idx in ((axs[0], 1), (axs[1], 2)):
            ax.plot([p[0] for p in pts], [p[idx] if p[idx] is not None else np.nan for p in pts], "o-", label=scheme)
    axs[0].set_ylabel(f"short-flow p99 FCT gain vs {BASELINE}")
    axs[1].set_ylabel(f"large-job training-time gain vs {BASELINE}")
    for ax in axs:
        ax.set_xlabel(axis + (f"  ({', '.join(f'{k}={v}' for k, v in others.items())})" if others else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_gain_vs_share(path: Path, summary: Mapping[str, Any], schemes: Sequence[str]) -> None:
    """Short-flow p99 (pooled, bootstrap interval) and mean (t interval over seeds) gain vs ring
    against the share of ring's link bytes that aggregation traffic adds, one line per scheme;
    the background-only floor is the bound of every scheme. One seed: no error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted(summary["groups"], key=lambda g: g["aggregation_share"])
    fig, axs = plt.subplots(1, 2, figsize=(11, 4))
    specs = (
        (axs[0], "short_fct_p99_pooled_us_gain", "short-flow p99 gain vs ring (pooled over seeds)"),
        (axs[1], "short_fct_mean_us_gain", "short-flow mean gain vs ring (mean over seeds)"),
    )
    for ax, key, label in specs:
        for scheme in [s for s in schemes if s != BASELINE]:
            xs, ys, lo, hi = [], [], [], []
            for g in groups:
                st = g["schemes"].get(scheme, {})
                y = st.get(key)
                if y is None:
                    continue
                if key.endswith("pooled_us_gain"):
                    ci = (st.get("short_fct_p99_pooled_us_gain_ci_low"), st.get("short_fct_p99_pooled_us_gain_ci_high"))
                else:
                    ci = tuple(st.get(key + "_ci") or (None, None))
                many = len(g["seeds"]) > 1 and all(c is not None and math.isfinite(c) for c in ci)
                xs.append(g["aggregation_share"])
                ys.append(y)
                lo.append(y - ci[0] if many else 0.0)
                hi.append(ci[1] - y if many else 0.0)
            if xs:
                style = "k--" if scheme == FLOOR else "o-"
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, capsize=3, label=scheme)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel(f"aggregation share of {BASELINE}'s link bytes (1 - floor / {BASELINE})")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def _fmt_ci(st: Mapping[str, Any], key: str, spec: str) -> str:
    v = st.get(key)
    ci = st.get(key + "_ci")
    s = _fmt(v, spec)
    if ci and st.get("n_seeds", 0) > 1 and all(c is not None for c in ci):
        s += f" [{_fmt(ci[0], spec)},{_fmt(ci[1], spec)}]"
    return s


def format_table(summary: Mapping[str, Any]) -> str:
    """Terminal table of every group: raw metrics and ratios to ring (mean [95 % CI])."""
    lines = []
    for g in summary["groups"]:
        params = ", ".join(f"{k}={v}" for k, v in g["params"].items()) or "default"
        share = g.get("aggregation_share")
        share_text = f"; aggregation share of {BASELINE}'s bytes {share:.2f}" if share is not None else ""
        lines.append(
            f"{params}; seeds {', '.join(map(str, g['seeds']))}{share_text}  (ratios = scheme/{BASELINE}, lower is "
            "better)"
        )
        rows = [
            (
                scheme,
                _fmt(st.get("short_fct_mean_us"), ".1f"),
                _fmt(st.get("short_fct_p99_us"), ".1f"),
                _fmt(st.get("large_flow_fct_mean_us"), ".0f"),
                _fmt(st.get("large_job_training_time_s"), ".4f"),
                _fmt_ci(st, "short_fct_p99_us_norm", ".2f"),
                _fmt(st.get("short_fct_p99_pooled_us_norm"), ".2f"),
                _fmt_ci(st, "short_fct_mean_us_norm", ".2f"),
                _fmt_ci(st, "large_job_training_time_s_norm", ".2f"),
                _fmt(st.get("bytes_total_norm"), ".2f"),
            )
            for scheme, st in g["schemes"].items()
        ]
        headers = (
            "scheme", "short mean µs", "short p99 µs", "large-flow µs", "large-job s", "p99 ratio", "pooled p99",
            "mean ratio", "train ratio", "bytes ratio",
        )  # fmt: skip
        lines.append(draw_table(rows, headers))
        n_short = next(iter(g["schemes"].values()), {}).get("short_flows_pooled")
        lines.append(
            f"(short flows < {SHORT_FLOW_BYTES // 1000} KB: {n_short} over all seeds; 'pooled p99' = p99 of "
            f"all seeds' short flows together, as a ratio; '{FLOOR}' = the same flows without any job)"
        )
        by_size = [
            (scheme, *(_fmt_ci(st, f"short_fct_p99_us_{key}_norm", ".2f") for key, _, _, _ in SHORT_BUCKETS))
            for scheme, st in g["schemes"].items()
        ]
        first = next(iter(g["schemes"].values()), {})
        size_headers = (
            "p99 ratio by size",
            *(f"{label} (n={_fmt(first.get(f'short_flows_{key}'), '.0f')}/seed)" for key, label, _, _ in SHORT_BUCKETS),
        )
        lines.append(draw_table(by_size, size_headers))
        lines.append("")
    c = summary.get("consistency", {})
    if not c.get("same_flows_and_placement", True):
        lines.append("WARNING: schemes saw different flows/placements: " + "; ".join(c.get("mismatches", [])))
    return "\n".join(lines).rstrip()


def load_summary(out_dir: str | Path) -> dict[str, Any]:
    """Read ``summary.json`` of a shared-cluster output directory."""
    return json.loads((Path(out_dir) / "summary.json").read_text())


def _echo(msg: str) -> None:
    print(msg, file=sys.stderr)
