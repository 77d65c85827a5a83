"""The shared-cluster experiment's outputs: JSON and CSV files, the terminal table (the figures:
:mod:`panama.experiments.cluster_plots`). Every ratio is a gain against ring (ring / scheme,
higher is better) and the floor is "floor (no jobs)"."""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panama.experiments.cluster_analysis import normalise_runs
from panama.experiments.cluster_scenario import SHORT_BUCKETS, SHORT_FLOW_BYTES
from panama.experiments.schemes import BASELINE, FLOOR_LABEL, GAIN_TEXT, scheme_label
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
        from panama.experiments.cluster_plots import plot_all

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
    """Terminal table of every group: raw metrics and gains against ring (geometric mean [95 % CI])."""
    lines = []
    for g in summary["groups"]:
        params = ", ".join(f"{k}={v}" for k, v in g["params"].items()) or "default"
        share = g.get("aggregation_share")
        share_text = f"; jobs' share of {BASELINE}'s bytes {share:.2f}" if share is not None else ""
        lines.append(f"{params}; seeds {', '.join(map(str, g['seeds']))}{share_text}  ({GAIN_TEXT})")
        rows = [
            (
                scheme_label(scheme),
                _fmt(st.get("short_fct_mean_us"), ".1f"),
                _fmt(st.get("short_fct_p99_us"), ".1f"),
                _fmt(st.get("large_flow_fct_mean_us"), ".0f"),
                _fmt(st.get("large_job_training_time_s"), ".4f"),
                _fmt_ci(st, "short_fct_p99_us_gain", ".2f"),
                _fmt(st.get("short_fct_p99_pooled_us_gain"), ".2f"),
                _fmt_ci(st, "short_fct_mean_us_gain", ".2f"),
                _fmt_ci(st, "large_job_training_time_s_gain", ".2f"),
                _fmt(st.get("bytes_total_gain"), ".2f"),
            )
            for scheme, st in g["schemes"].items()
        ]
        headers = (
            "scheme", "short mean µs", "short p99 µs", "large-flow µs", "large-job s", "p99 gain", "pooled p99 gain",
            "mean gain", "training gain", "x fewer bytes",
        )  # fmt: skip
        lines.append(draw_table(rows, headers))
        n_short = next(iter(g["schemes"].values()), {}).get("short_flows_pooled")
        lines.append(
            f"(short flows < {SHORT_FLOW_BYTES // 1000} KB: {n_short} over all seeds; 'p99 gain' = geometric mean of "
            "the per-seed gains; 'pooled p99 gain' = on the p99 of all seeds' short flows together; "
            f"'{FLOOR_LABEL}' = the same flows without any job)"
        )
        by_size = [
            (scheme_label(scheme), *(_fmt_ci(st, f"short_fct_p99_us_{k}_gain", ".2f") for k, _, _, _ in SHORT_BUCKETS))
            for scheme, st in g["schemes"].items()
        ]
        first = next(iter(g["schemes"].values()), {})
        size_headers = (
            "p99 gain by size",
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
