"""Main result: one shared cluster, the same workload under every allreduce scheme.

Claim reproduced: with in-network aggregation spread over several trees and a
DCTCP-compatible tree congestion control (``panama``), latency-sensitive short flows
sharing the fabric with data-parallel jobs finish much faster than with host-based ring
allreduce (original: p99 FCT up to 4.5x, mean about 2x better), and large jobs train
faster (original: up to 1.34x). ``ina-single`` (one tree) and ``ina-fixed`` (several
trees, fixed windows, no ECN reaction) isolate the two mechanisms.

How a run works
---------------
* The base :class:`~panama.sim.scenario.Scenario` holds the fabric, background traffic and
  jobs. The built-in one (:func:`experiment_scenario`) is a k=4 fat-tree at 10 Gbps with
  web-search flows at 30 % load (``PRESETS``) and five jobs: three built from the comm-ratio table
  (``models.csv``: VGG-16, AlexNet, ResNet-50 on P100 at 10 Gbps) and two small ones.
  Gradients *and* compute times are multiplied by ``scale`` (1/200 in ``full`` and
  ``quick``), which keeps each job's communication/computation ratio at its real value on
  a 10 Gbps link, and the 40 MB in-network threshold is scaled by the same factor
  (200 KB).
* A sweep point is ``(parameters, seed, scheme)``; parameters map to scenario keys
  (``load`` -> ``background.load``, ``trees`` -> ``panama.num_trees``, ``seed`` ->
  ``seed``, ``workload`` -> ``background.workload``, ``topology`` -> ``topology.spec``; any
  dotted scenario key works too). The simulator seeds workload and placement from
  ``seed`` only, so every scheme of a seed sees exactly the same flows and job placement —
  each point records a digest of both and :func:`summarise` checks they agree.
* Metrics are compared per seed with the ``ring`` run of the same parameters as gains
  (``*_gain`` = ring/scheme, the original's "x better", higher is better; for bytes: x fewer
  bytes than ring), then averaged over seeds (geometric mean) with t 95 % confidence intervals.

Outputs (``out_dir``): ``points/`` (one JSON per run, for resume), ``runs.csv`` (one row per
run: raw and normalised metrics), ``summary.csv`` (per group and scheme: mean and CI),
``summary.json`` (schema in docs/experiments.md), ``config.json``, ``scenario.toml``,
``fct_cdf.png`` and ``normalized.png`` (and ``sweep.png`` for multi-valued sweeps).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from panama.experiments.cluster_analysis import check_consistency, normalise_runs, summarise
from panama.experiments.cluster_outputs import format_table, load_summary, write_outputs
from panama.experiments.cluster_scenario import (
    DEFAULT_PRESET,
    JOB_MIX,
    LARGE_FLOW_BYTES,
    NORMALISED,
    PRESETS,
    SHORT_BUCKETS,
    SHORT_FLOW_BYTES,
    apply_params,
    experiment_scenario,
    seed_axis,
)
from panama.experiments.schemes import FLOOR, SCHEME_ORDER
from panama.experiments.stats import percentile
from panama.experiments.sweep import (
    POINTS_DIR,
    SweepError,
    fingerprint_of,
    grid,
    point_id,
    run_sweep,
    write_json_atomic,
)
from panama.version import code_version

if TYPE_CHECKING:
    from panama.sim.scenario import Scenario

# --------------------------------------------------------------------------- one run


def _digest(items: Sequence[Any]) -> str:
    return hashlib.sha1(json.dumps(items, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fct_stats(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(np.mean(values)), percentile(values, 99)


def metrics_from_result(result, *, short_bytes: int, large_bytes: int) -> dict[str, Any]:
    """Raw metrics of one simulator run (a :class:`panama.sim.runner.SimResult`).

    Background flows not finished when the run stopped are counted in
    ``unfinished_flows`` and left out of the FCT statistics.
    """
    s = result.summary
    sc = result.scenario
    bg = [r for r in result.flow_rows if r["kind"] == "background"]
    done = [r for r in bg if r["fct_us"] is not None]
    short = [r["fct_us"] for r in done if r["size_bytes"] < short_bytes]
    large = [r["fct_us"] for r in done if r["size_bytes"] >= large_bytes]
    threshold = sc.panama.threshold_bytes
    jobs = s["jobs"]
    large_jobs = {n: j for n, j in jobs.items() if j["gradient_bytes"] >= threshold}
    small_jobs = {n: j for n, j in jobs.items() if j["gradient_bytes"] < threshold}

    def mean_time(js: Mapping[str, Any]) -> float | None:
        vals = [j["training_time_us"] / 1e6 for j in js.values() if j["training_time_us"] is not None]
        return float(np.mean(vals)) if vals and len(vals) == len(js) else None

    short_mean, short_p99 = _fct_stats(short)
    large_mean, large_p99 = _fct_stats(large)
    all_mean, _ = _fct_stats([r["fct_us"] for r in done])
    m: dict[str, Any] = {
        "short_fct_mean_us": short_mean,
        "short_fct_p50_us": percentile(short, 50) if short else None,
        "short_fct_p99_us": short_p99,
        "large_flow_fct_mean_us": large_mean,
        "large_flow_fct_p99_us": large_p99,
        "fct_mean_us": all_mean,
        "large_job_training_time_s": mean_time(large_jobs),
        "small_job_training_time_s": mean_time(small_jobs),
        "bytes_total": s["bytes_total"],
        "short_flows": len(short),
        "large_flows": len(large),
        "background_flows": len(bg),
        "unfinished_flows": len(bg) - len(done),
        "jobs_finished": s["jobs_finished"],
        "jobs_total": len(jobs),
        "finished": bool(s["finished"]),
        "simulated_s": s["simulated_s"],
        "wall_s": s["wall_s"],
        "events": s["events"],
        "drops": s["drops"],
        "pfc_pauses": s["pfc_pauses"],
        "ecn_marks": s["ecn_marks"],
    }
    for tier, nbytes in s["link_bytes"].items():
        m[f"bytes_{tier}"] = nbytes
    _queueing_metrics(m, s, done, short_bytes)
    m["job_training_time_s"] = {
        n: (j["training_time_us"] / 1e6 if j["training_time_us"] is not None else None) for n, j in jobs.items()
    }
    m["job_scheme_used"] = {n: j["scheme_used"] for n, j in jobs.items()}
    m["large_jobs"] = sorted(large_jobs)
    m["flows_digest"] = _digest([(r["flow_id"], r["src"], r["dst"], r["size_bytes"], r["start_us"]) for r in bg])
    m["placement_digest"] = _digest({n: j["hosts"] for n, j in jobs.items()})
    # FCT samples for the CDF plot: (size_bytes, fct_us) of finished background flows.
    m["fct_samples"] = [[r["size_bytes"], round(r["fct_us"], 3)] for r in done]
    return m


def _queueing_metrics(m: dict[str, Any], s: Mapping[str, Any], done: list[dict[str, Any]], short_bytes: int) -> None:
    """Add to ``m`` the metrics of where traffic queued: short flows' p99 per size bucket, queue
    p99s per tier, PFC pause time, short flows' queueing by kind of traffic ahead, PANAMA bursts."""
    for key, _, lo, hi in SHORT_BUCKETS:
        sel = [r["fct_us"] for r in done if lo <= r["size_bytes"] < min(hi, short_bytes)]
        m[f"short_flows_{key}"] = len(sel)
        m[f"short_fct_p99_us_{key}"] = percentile(sel, 99) if sel else None
    diag = s.get("diagnostics") or {}
    for tier, q in (diag.get("queues_by_tier") or {}).items():
        m[f"queue_p99_bytes_{tier}"] = q["p99_bytes"]
        m[f"queue_above_k_share_{tier}"] = q["above_k_share"]
    m["pfc_paused_s"] = s.get("pfc_paused_s")
    # Where short flows queued, by kind of traffic ahead (mean µs per flow; all flows of
    # the bucket and its tail at or above the bucket's p99), and PANAMA bursts per port.
    labels = {label: key for key, label, _, _ in SHORT_BUCKETS}
    for b in diag.get("short_flow_queueing") or []:
        key = labels.get(b["bucket"])
        for part in ("all", "tail"):
            if key is None or part not in b:
                continue
            m[f"short_queue_{part}_us_{key}"] = b[part]["queueing_mean_us"]
            for kind, v in b[part]["by_kind"].items():
                m[f"short_queue_{part}_us_{key}_{kind}"] = v["mean_us"]
    for typ, dirs in (diag.get("panama_bursts") or {}).items():
        for tier, v in dirs.items():
            m[f"panama_burst_p99_per_us_{typ}_{tier}"] = v["p99_per_us"]
            m[f"panama_burst_max_per_us_{typ}_{tier}"] = v["max_per_us"]


def run_point(
    point: Mapping[str, Any],
    *,
    base: Mapping[str, Any],
    short_bytes: int = SHORT_FLOW_BYTES,
    large_bytes: int = LARGE_FLOW_BYTES,
    runs_dir: str | None = None,
) -> dict[str, Any]:
    """Sweep point function: simulate ``point`` (parameters incl. ``seed`` and ``scheme``).

    ``base`` is the base scenario as a JSON dict. With ``runs_dir`` the simulator's own
    outputs (flows.csv, jobs.csv, summary.json, resolved scenario) are kept in
    ``runs_dir/<point id>/``.
    """
    from panama.sim.runner import run_scenario

    params = {k: v for k, v in point.items() if k != "scheme"}
    scheme = point["scheme"]
    if scheme == FLOOR:  # the same flows and seed, no jobs
        sc = apply_params(base, params).model_copy(update={"jobs": []})
    else:
        sc = apply_params(base, params).with_scheme(scheme)
    out = Path(runs_dir) / point_id(point) if runs_dir else None
    result = run_scenario(sc, out, progress=False, plots=False)
    return metrics_from_result(result, short_bytes=short_bytes, large_bytes=large_bytes)


# --------------------------------------------------------------------------- experiment


@dataclass
class SharedClusterResult:
    """What :func:`run_shared_cluster` produced: the summary dict and the output directory."""

    summary: dict[str, Any]
    out_dir: Path
    runs: list[dict[str, Any]]
    table_text: str


def _checked_schemes(schemes: Sequence[str], floor: bool) -> list[str]:
    """The schemes to run, each once in the order given, then the floor (with ``floor``);
    ValueError naming an unknown one."""
    from panama.sim.scenario import SCHEMES

    schemes = [s for s in dict.fromkeys(schemes) if s != FLOOR]
    for s in schemes:
        if s not in SCHEMES:
            raise ValueError(f"unknown scheme {s!r} (choose from {', '.join(SCHEMES)})")
    return [*schemes, FLOOR] if floor else schemes


def _prepare_output(out: Path, config: dict[str, Any], base: Scenario, command: str | None, fresh: bool) -> str:
    """Write the run's ``config.json`` and ``scenario.toml`` into ``out`` (``fresh``: discard its
    finished points first); returns the fingerprint that finished points must carry to be reused."""
    fingerprint = fingerprint_of({k: v for k, v in config.items() if k not in ("axes", "schemes", "preset")})
    if fresh:
        for old in (out / "points").glob("*.json"):
            old.unlink()
    write_json_atomic(
        out / "config.json", dict(config, fingerprint=fingerprint, command=command, code_version=code_version())
    )
    (out / "scenario.toml").write_text(base.to_toml())
    return fingerprint


def _estimate_line(base_json: Mapping[str, Any], points: list[dict[str, Any]], out: Path, jobs: int | None) -> str:
    """One line: how long the runs not finished in ``out`` will take (experiments.estimate)."""
    from panama._ext import compiled
    from panama.experiments.estimate import describe_runs

    finished = {p.stem for p in (out / POINTS_DIR).glob("*.json")}
    runs = []
    for point in points:
        if point_id(point) in finished:
            continue
        params = {k: v for k, v in point.items() if k != "scheme"}
        scheme = point["scheme"]
        sc = apply_params(base_json, params)
        runs.append((sc, scheme, scheme != FLOOR))
    return describe_runs(runs, jobs or os.cpu_count() or 1, compiled=compiled(), what="shared-cluster")


def run_shared_cluster(
    out_dir: str | Path,
    *,
    base=None,
    preset: str = DEFAULT_PRESET,
    schemes: Sequence[str] = SCHEME_ORDER,
    axes: Mapping[str, Sequence[Any]] | None = None,
    jobs: int | None = None,
    scheduler: Any = None,
    keep_runs: bool = False,
    make_plots: bool = True,
    progress: bool = True,
    short_bytes: int = SHORT_FLOW_BYTES,
    large_bytes: int = LARGE_FLOW_BYTES,
    command: str | None = None,
    fresh: bool = False,
    floor: bool = True,
) -> SharedClusterResult:
    """Run every scheme on every sweep point (resuming from ``out_dir``) and write outputs.

    ``base``: a Scenario (default: :func:`experiment_scenario(preset)`); ``axes``: sweep
    axes (``{"load": [0.3, 0.5], "seed": [1, 2]}``; default: the base scenario's seed
    only). ``fresh`` discards finished runs found in ``out_dir`` (they are reused by
    default, even if the simulator code changed since: ``config.json`` records the code
    version of the latest invocation). ``floor`` adds the background-only run
    (:data:`FLOOR`) of every sweep point. Raises :class:`~panama.experiments.sweep.SweepError` if runs fail and
    ``ScenarioError`` (naming the key) for bad parameters.
    """
    # Long: the signature and docstring are a third of it; the body is one sequence (check the
    # schemes and axes, write the config, run the sweep, summarise) whose steps share the arguments.
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from_preset = base is None
    if base is None:
        base = experiment_scenario(preset)
    schemes = _checked_schemes(schemes, floor)
    axes = dict(axes or {})
    if "scheme" in axes:
        raise ValueError("'scheme' is not a sweep axis: use --schemes")
    if "seed" not in axes:
        axes["seed"] = seed_axis(preset, base.seed, from_preset=from_preset)
    base_json = base.model_dump(mode="json")
    # validate every parameter combination before launching anything
    params_list = grid(axes)
    for params in params_list:
        apply_params(base_json, params)
    points = [dict(p, scheme=s) for p in params_list for s in schemes]
    config = {
        "experiment": "shared-cluster",
        "preset": preset,
        "schemes": schemes,
        "axes": axes,
        "short_flow_bytes": short_bytes,
        "large_flow_bytes": large_bytes,
        "scenario": base_json,
    }
    fingerprint = _prepare_output(out, config, base, command, fresh)
    fn = functools.partial(
        run_point,
        base=base_json,
        short_bytes=short_bytes,
        large_bytes=large_bytes,
        runs_dir=str((out / "runs").resolve()) if keep_runs else None,
    )
    if progress:
        print(_estimate_line(base_json, points, out, jobs), file=sys.stderr, flush=True)
    sweep = run_sweep(
        fn,
        points,
        out,
        jobs=jobs,
        scheduler=scheduler,
        fingerprint=fingerprint,
        progress=progress,
        desc="shared-cluster",
    )
    runs = [{"params": r.params, "result": r.result} for r in sweep.records]
    summary = summarise(runs, schemes=schemes, axes=axes, short_bytes=short_bytes)
    summary["config"] = {k: v for k, v in config.items() if k != "scenario"} | {
        "scenario_file": "scenario.toml",
        "threshold_bytes": base.panama.threshold_bytes,
        "command": command,
        "code_version": code_version(),
    }
    summary["computed_runs"] = len(sweep.computed)
    summary["resumed_runs"] = len(sweep.resumed)
    write_outputs(out, summary, runs, make_plots=make_plots)
    return SharedClusterResult(summary, out, runs, format_table(summary))


__all__ = [
    "NORMALISED",
    "JOB_MIX",
    "PRESETS",
    "SCHEME_ORDER",
    "SharedClusterResult",
    "SweepError",
    "apply_params",
    "check_consistency",
    "experiment_scenario",
    "format_table",
    "load_summary",
    "normalise_runs",
    "run_point",
    "run_shared_cluster",
    "summarise",
]
