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
  web-search flows at 50 % load and five jobs: three built from the comm-ratio table
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
* Metrics are normalised per seed to the ``ring`` run of the same parameters
  (``*_norm`` = scheme/ring, below 1 is better; ``*_gain`` = ring/scheme, the original's
  "x better"), then averaged over seeds with t 95 % confidence intervals.

Outputs (``out_dir``): ``points/`` (one JSON per run, for resume), ``runs.csv`` (one row per
run: raw and normalised metrics), ``summary.csv`` (per group and scheme: mean and CI),
``summary.json`` (schema in docs/experiments.md), ``config.json``, ``scenario.toml``,
``fct_cdf.png`` and ``normalized.png`` (and ``sweep.png`` for multi-valued sweeps).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from panama.core.controller import DEFAULT_THRESHOLD_BYTES
from panama.experiments.comm_ratio import load_models
from panama.experiments.stats import mean_ci, percentile
from panama.experiments.sweep import (
    SweepError,
    fingerprint_of,
    grid,
    point_id,
    run_sweep,
    write_json_atomic,
)

SCHEME_ORDER = ("ring", "ina-fixed", "ina-single", "panama")
BASELINE = "ring"
SHORT_FLOW_BYTES = 100_000
LARGE_FLOW_BYTES = 1_000_000
REAL_THRESHOLD_BYTES = DEFAULT_THRESHOLD_BYTES

#: Sweep parameter aliases -> dotted scenario keys.
ALIASES = {
    "load": "background.load",
    "trees": "panama.num_trees",
    "seed": "seed",
    "workload": "background.workload",
    "topology": "topology.spec",
    "threshold": "panama.threshold_bytes",
    "duration": "duration_ms",
}

#: Metrics normalised to ring (lower is better for all of them).
NORMALISED = (
    "short_fct_mean_us",
    "short_fct_p99_us",
    "large_flow_fct_mean_us",
    "large_flow_fct_p99_us",
    "fct_mean_us",
    "large_job_training_time_s",
    "small_job_training_time_s",
    "bytes_total",
)


# --------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class JobTemplate:
    """A job of the built-in mix: a model of the comm-ratio table, or an explicit size."""

    name: str
    workers: int
    model: str | None = None  # row of models.csv (P100 @ 10 Gbps)
    params: int | None = None  # explicit parameter count (small jobs)
    compute_ms: float | None = None  # explicit real compute time per iteration
    start_ms: float = 0.0


#: The built-in mix: three large jobs (above 40 MB) and two small ones (below).
JOB_MIX = (
    JobTemplate("vgg16", 6, model="VGG-16"),
    JobTemplate("alexnet", 4, model="AlexNet", start_ms=100.0),
    JobTemplate("resnet50", 4, model="ResNet-50", start_ms=200.0),
    JobTemplate("rl-policy", 4, params=2_000_000, compute_ms=60.0, start_ms=50.0),
    JobTemplate("kmeans", 4, params=5_000_000, compute_ms=120.0, start_ms=150.0),
)

PRESETS: dict[str, dict[str, Any]] = {
    # simulated ms of background traffic, iterations of the large jobs, load, scale
    "full": {"duration_ms": 40.0, "iterations": 4, "load": 0.3, "scale": 0.005, "topology": "fat-tree:k=4"},
    "quick": {
        "duration_ms": 20.0,
        "iterations": 3,
        "load": 0.3,
        "scale": 0.005,
        "topology": "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4",
    },
    # smoke tests only: a light-tailed workload so that a 2 ms window still has flows
    "tiny": {
        "duration_ms": 2.0,
        "iterations": 2,
        "load": 0.4,
        "workload": "fb-hadoop",
        "scale": 0.0005,
        "topology": "leaf-spine:leaves=2,spines=2,hosts_per_leaf=4",
    },
}


def experiment_scenario(preset: str = "full", *, models_path: str | Path | None = None):
    """The built-in shared-cluster scenario for ``preset`` (``full``, ``quick`` or ``tiny``).

    Jobs come from :data:`JOB_MIX`; model rows are read from the comm-ratio table (P100
    at 10 Gbps), and gradient bytes, compute times and start times are multiplied by the
    preset's ``scale``, as is the 40 MB aggregation threshold.
    """
    from panama.sim.scenario import (
        BackgroundConfig,
        JobConfig,
        PanamaConfig,
        Scenario,
        TopologyConfig,
    )

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    p = PRESETS[preset]
    scale = p["scale"]
    rows, _ = load_models(models_path)
    by_model = {r.model: r for r in rows if r.gpu == "P100"}
    jobs = []
    for t in JOB_MIX:
        if t.model is not None:
            row = by_model[t.model]
            grad = row.params * row.bytes_per_param
            compute_s = row.batch_size / row.images_per_s
        else:
            grad = int(t.params) * 4
            compute_s = float(t.compute_ms) / 1e3
        workers = min(t.workers, 4) if preset == "tiny" else t.workers
        jobs.append(
            JobConfig(
                name=t.name,
                workers=workers,
                gradient_bytes=max(4, round(grad * scale / 4) * 4),
                compute_us=compute_s * scale * 1e6,
                iterations=p["iterations"],
                start_us=t.start_ms * scale * 1e3,
            )
        )
    return Scenario(
        seed=1,
        duration_ms=p["duration_ms"],
        max_time_ms=p["duration_ms"] * 20 + 50,
        topology=TopologyConfig(spec=p["topology"]),
        background=BackgroundConfig(workload=p.get("workload", "web-search"), load=p["load"]),
        panama=PanamaConfig(threshold_bytes=round(REAL_THRESHOLD_BYTES * scale)),
        jobs=jobs,
    )


def code_version() -> str:
    """Short git revision of the code, ``-dirty`` if tracked files changed; ``$PANAMA_CODE_VERSION``
    when set (runs from an exported tree); ``unknown`` outside a checkout."""
    import os
    import subprocess

    if os.environ.get("PANAMA_CODE_VERSION"):
        return os.environ["PANAMA_CODE_VERSION"]

    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", str(here.parent)],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def scenario_key(name: str) -> str:
    """Sweep parameter name -> dotted scenario key."""
    return ALIASES.get(name, name)


def apply_params(base: Mapping[str, Any], params: Mapping[str, Any]):
    """The base scenario (JSON dict) with sweep parameters applied; raises ScenarioError."""
    from panama.sim.scenario import apply_sets, scenario_from_dict

    data = json.loads(json.dumps(base))
    sets = [f"{scenario_key(k)}={json.dumps(v) if isinstance(v, str) else v}" for k, v in params.items()]
    apply_sets(data, sets)
    return scenario_from_dict(data)


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
    sc = apply_params(base, params).with_scheme(point["scheme"])
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


def run_shared_cluster(
    out_dir: str | Path,
    *,
    base=None,
    preset: str = "full",
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
) -> SharedClusterResult:
    """Run every scheme on every sweep point (resuming from ``out_dir``) and write outputs.

    ``base``: a Scenario (default: :func:`experiment_scenario(preset)`); ``axes``: sweep
    axes (``{"load": [0.3, 0.5], "seed": [1, 2]}``; default: the base scenario's seed
    only). ``fresh`` discards finished runs found in ``out_dir`` (they are reused by
    default, even if the simulator code changed since: ``config.json`` records the code
    version of the latest invocation). Raises :class:`~panama.experiments.sweep.SweepError` if runs fail and
    ``ScenarioError`` (naming the key) for bad parameters.
    """
    from panama.sim.scenario import SCHEMES

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if base is None:
        base = experiment_scenario(preset)
    schemes = list(dict.fromkeys(schemes))
    for s in schemes:
        if s not in SCHEMES:
            raise ValueError(f"unknown scheme {s!r} (choose from {', '.join(SCHEMES)})")
    axes = dict(axes or {})
    if "scheme" in axes:
        raise ValueError("'scheme' is not a sweep axis: use --schemes")
    if "seed" not in axes:
        axes["seed"] = [base.seed]
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
    fingerprint = fingerprint_of({k: v for k, v in config.items() if k not in ("axes", "schemes", "preset")})
    if fresh:
        for old in (out / "points").glob("*.json"):
            old.unlink()
    write_json_atomic(
        out / "config.json", dict(config, fingerprint=fingerprint, command=command, code_version=code_version())
    )
    (out / "scenario.toml").write_text(base.to_toml())
    fn = functools.partial(
        run_point,
        base=base_json,
        short_bytes=short_bytes,
        large_bytes=large_bytes,
        runs_dir=str((out / "runs").resolve()) if keep_runs else None,
    )
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
    summary["config"] = {k: v for k, v in config.items() if k != "scenario"}
    summary["config"]["scenario_file"] = "scenario.toml"
    summary["config"]["threshold_bytes"] = base.panama.threshold_bytes
    summary["config"]["command"] = command
    summary["config"]["code_version"] = code_version()
    summary["computed_runs"] = len(sweep.computed)
    summary["resumed_runs"] = len(sweep.resumed)
    write_outputs(out, summary, runs, make_plots=make_plots)
    return SharedClusterResult(summary, out, runs, format_table(summary))


# --------------------------------------------------------------------------- aggregation


def _group_key(params: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in ("seed", "scheme")}, sort_keys=True)


def normalise_runs(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flat rows (params + raw metrics + ``*_norm``/``*_gain`` vs. ring of the same params and seed)."""
    by_key: dict[tuple[str, Any], dict[str, Mapping[str, Any]]] = {}
    for r in runs:
        p = r["params"]
        by_key.setdefault((_group_key(p), p.get("seed")), {})[p["scheme"]] = r["result"]
    rows = []
    for r in runs:
        p, res = r["params"], r["result"]
        ref = by_key[(_group_key(p), p.get("seed"))].get(BASELINE)
        row: dict[str, Any] = dict(p)
        for k, v in res.items():
            if k == "fct_samples" or isinstance(v, (dict, list)):
                continue
            row[k] = v
        tiers = sorted(k for k in res if k.startswith("bytes_") and k != "bytes_total")
        for k in list(NORMALISED) + tiers:
            a = res.get(k)
            b = ref.get(k) if ref is not None else None
            ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0
            row[f"{k}_norm"] = a / b if ok else None
            row[f"{k}_gain"] = b / a if ok else None
        for job, t in (res.get("job_training_time_s") or {}).items():
            row[f"job.{job}.training_time_s"] = t
        rows.append(row)
    return rows


def _pooled_short_p99(runs: Sequence[Mapping[str, Any]], short_bytes: int) -> dict[tuple[str, str], tuple[float, int]]:
    samples: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        key = (_group_key(r["params"]), r["params"]["scheme"])
        vals = samples.setdefault(key, [])
        vals.extend(f for size, f in r["result"].get("fct_samples", []) if size < short_bytes)
    return {k: (percentile(v, 99), len(v)) for k, v in samples.items() if v}


def summarise(
    runs: Sequence[Mapping[str, Any]],
    *,
    schemes: Sequence[str],
    axes: Mapping[str, Any],
    short_bytes: int = SHORT_FLOW_BYTES,
) -> dict[str, Any]:
    """The summary.json dict: per group (parameters except seed) and scheme, mean and CI.

    ``schemes`` at the top level is the headline group (the first one): for each scheme,
    every metric ``m`` as its mean across seeds, plus ``m_ci`` = [low, high] (95 % t
    interval; equal to the mean with one seed) and ``n_seeds``. With few short flows per
    run, a per-seed p99 is close to the maximum; ``short_fct_p99_pooled_us`` is the p99 of
    all seeds' short flows pooled (``short_flows_pooled`` samples), with its ratio to ring.
    """
    rows = normalise_runs(runs)
    consistency = check_consistency(runs)
    groups: dict[str, dict[str, Any]] = {}
    for run, row in zip(runs, rows, strict=True):
        params = run["params"]
        gk = _group_key(params)
        g = groups.setdefault(gk, {"params": json.loads(gk), "seeds": [], "schemes": {}, "_rows": {}})
        if params.get("seed") not in g["seeds"]:
            g["seeds"].append(params.get("seed"))
        g["_rows"].setdefault(params["scheme"], []).append(row)
    pooled = _pooled_short_p99(runs, short_bytes)
    out_groups = []
    for gk, g in groups.items():
        for scheme in schemes:
            srows = g["_rows"].get(scheme, [])
            st = _scheme_stats(srows)
            p99, n = pooled.get((gk, scheme), (None, 0))
            ref, _ = pooled.get((gk, BASELINE), (None, 0))
            st["short_fct_p99_pooled_us"] = p99
            st["short_flows_pooled"] = n
            st["short_fct_p99_pooled_us_norm"] = p99 / ref if p99 and ref else None
            st["short_fct_p99_pooled_us_gain"] = ref / p99 if p99 and ref else None
            g["schemes"][scheme] = st
        del g["_rows"]
        out_groups.append(g)
    headline = out_groups[0] if out_groups else {"schemes": {}}
    return {
        "experiment": "shared-cluster",
        "_doc": "keys documented in docs/experiments.md (shared-cluster summary.json)",
        "baseline": BASELINE,
        "axes": dict(axes),
        "schemes": headline["schemes"],
        "headline_params": headline.get("params", {}),
        "headline_seeds": headline.get("seeds", []),
        "groups": out_groups,
        "consistency": consistency,
    }


def _scheme_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    stats: dict[str, Any] = {"n_seeds": len(rows)}
    if not rows:
        return stats
    names: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k in ("seed", "scheme") or k in names:
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                names.append(k)
    for k in names:
        vals = [r.get(k) for r in rows]
        vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        ci = mean_ci(vals)
        stats[k] = ci.mean if ci.n else None
        stats[f"{k}_ci"] = [ci.low, ci.high] if ci.n else None
    stats["finished_all"] = all(bool(r.get("finished")) for r in rows)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in stats.items()}


def check_consistency(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every scheme of one (params, seed) must have run the same flows and placement."""
    seen: dict[tuple[str, Any], dict[str, set[str]]] = {}
    for r in runs:
        p = r["params"]
        key = (_group_key(p), p.get("seed"))
        d = seen.setdefault(key, {"flows": set(), "placement": set()})
        d["flows"].add(r["result"].get("flows_digest"))
        d["placement"].add(r["result"].get("placement_digest"))
    bad = [f"{k[0]} seed={k[1]}" for k, d in seen.items() if len(d["flows"]) > 1 or len(d["placement"]) > 1]
    return {"same_flows_and_placement": not bad, "mismatches": bad}


# --------------------------------------------------------------------------- outputs


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
    import matplotlib.pyplot as plt

    files = {}
    head = json.dumps(summary.get("headline_params", {}), sort_keys=True)
    schemes = list(summary["schemes"])
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
        ax.set_xlabel("flow completion time (us)")
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fct_cdf.png", dpi=120)
    plt.close(fig)
    files["fct_cdf"] = "fct_cdf.png"

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
    fig.savefig(out / "normalized.png", dpi=120)
    plt.close(fig)
    files["normalized"] = "normalized.png"

    multi = [k for k, v in summary.get("axes", {}).items() if k != "seed" and len(v) > 1]
    if multi:
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
                ax.plot(
                    [p[0] for p in pts], [p[idx] if p[idx] is not None else np.nan for p in pts], "o-", label=scheme
                )
        axs[0].set_ylabel(f"short-flow p99 FCT gain vs {BASELINE}")
        axs[1].set_ylabel(f"large-job training-time gain vs {BASELINE}")
        for ax in axs:
            ax.set_xlabel(axis + (f"  ({', '.join(f'{k}={v}' for k, v in others.items())})" if others else ""))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "sweep.png", dpi=120)
        plt.close(fig)
        files["sweep"] = "sweep.png"
    return files


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
        lines.append(
            f"{params}; seeds {', '.join(map(str, g['seeds']))}  (ratios = scheme/{BASELINE}, lower is better)"
        )
        head = (
            f"{'scheme':<11} {'short mean us':>13} {'short p99 us':>12} {'large-flow us':>13} "
            f"{'large-job s':>11} {'p99 ratio':>18} {'pooled p99':>10} {'mean ratio':>18} {'train ratio':>18} "
            f"{'bytes ratio':>11}"
        )
        lines += [head, "-" * len(head)]
        for scheme, st in g["schemes"].items():
            lines.append(
                f"{scheme:<11} {_fmt(st.get('short_fct_mean_us'), '.1f'):>13} "
                f"{_fmt(st.get('short_fct_p99_us'), '.1f'):>12} "
                f"{_fmt(st.get('large_flow_fct_mean_us'), '.0f'):>13} "
                f"{_fmt(st.get('large_job_training_time_s'), '.4f'):>11} "
                f"{_fmt_ci(st, 'short_fct_p99_us_norm', '.2f'):>18} "
                f"{_fmt(st.get('short_fct_p99_pooled_us_norm'), '.2f'):>10} "
                f"{_fmt_ci(st, 'short_fct_mean_us_norm', '.2f'):>18} "
                f"{_fmt_ci(st, 'large_job_training_time_s_norm', '.2f'):>18} "
                f"{_fmt(st.get('bytes_total_norm'), '.2f'):>11}"
            )
        n_short = next(iter(g["schemes"].values()), {}).get("short_flows_pooled")
        lines.append(
            f"(short flows < {SHORT_FLOW_BYTES // 1000} KB: {n_short} over all seeds; 'pooled p99' = p99 of "
            "all seeds' short flows together, as a ratio)"
        )
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


__all__ = [
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
