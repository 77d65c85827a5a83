"""The shared-cluster experiment's analysis: runs normalised to the baseline and summarised over seeds."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from panama.experiments.cluster_scenario import NORMALISED, SHORT_FLOW_BYTES
from panama.experiments.schemes import BASELINE, FLOOR
from panama.experiments.stats import mean_ci, percentile, ratio_ci


def _group_key(params: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in ("seed", "scheme")}, sort_keys=True)


def normalise_runs(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flat rows: params, raw metrics and ``*_gain`` = ring / scheme of the same params and seed
    (x better than ring, higher is better; for byte counts, x fewer bytes than ring)."""
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
            row[f"{k}_gain"] = b / a if ok else None
        for job, t in (res.get("job_training_time_s") or {}).items():
            row[f"job.{job}.training_time_s"] = t
        rows.append(row)
    return rows


def _pooled_short_fcts(runs: Sequence[Mapping[str, Any]], short_bytes: int) -> dict[tuple[str, str], list[float]]:
    """Short flows' FCTs (µs) of every seed of a group, per ``(group, scheme)``."""
    samples: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        key = (_group_key(r["params"]), r["params"]["scheme"])
        vals = samples.setdefault(key, [])
        vals.extend(f for size, f in r["result"].get("fct_samples", []) if size < short_bytes)
    return {k: v for k, v in samples.items() if v}


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
    all seeds' short flows pooled (``short_flows_pooled`` samples), with its gain against ring.
    Every ratio is a gain: ring / scheme, higher is better.
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
    pooled = _pooled_short_fcts(runs, short_bytes)
    out_groups = []
    for gk, g in groups.items():
        for scheme in schemes:
            srows = g["_rows"].get(scheme, [])
            st = _scheme_stats(srows)
            mine, base = pooled.get((gk, scheme), []), pooled.get((gk, BASELINE), [])
            p99 = percentile(mine, 99) if mine else None
            ref = percentile(base, 99) if base else None
            st["short_fct_p99_pooled_us"] = p99
            st["short_flows_pooled"] = len(mine)
            st["short_fct_p99_pooled_us_gain"] = ref / p99 if p99 and ref else None
            # Bootstrap intervals of the pooled gains (flows of every seed resampled; seeded):
            # a gain's interval is never negative, and one flow gives none (NaN bounds -> None).
            for stat, name in (("p99", "short_fct_p99_pooled_us"), ("mean", "short_fct_mean_pooled_us")):
                ci = ratio_ci(mine, base, stat, n_resamples=1000, seed=0) if mine and base else None
                ok = ci is not None and math.isfinite(ci.low) and ci.low > 0
                st[f"{name}_gain_ci_low"] = 1.0 / ci.high if ok else None
                st[f"{name}_gain_ci_high"] = 1.0 / ci.low if ok else None
                if stat == "mean":
                    ratio_ok = ci is not None and math.isfinite(ci.ratio) and ci.ratio > 0
                    st[f"{name}_gain"] = 1.0 / ci.ratio if ratio_ok else None
            g["schemes"][scheme] = st
        _aggregation_shares(g)
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


def _aggregation_shares(group: dict[str, Any]) -> None:
    """With the floor in the group: the share of each scheme's link bytes that the jobs added,
    ``aggregation_share = 1 - floor bytes / scheme bytes`` (means over seeds), and the group's
    ``aggregation_share``: the baseline's (what the jobs put on the fabric under ring)."""
    floor = group["schemes"].get(FLOOR, {}).get("bytes_total")
    for scheme, st in group["schemes"].items():
        mine = st.get("bytes_total")
        ok = scheme != FLOOR and isinstance(floor, (int, float)) and isinstance(mine, (int, float)) and mine > 0
        st["aggregation_share"] = 1.0 - floor / mine if ok else None
    group["aggregation_share"] = group["schemes"].get(BASELINE, {}).get("aggregation_share")


RATIO_SUFFIXES = ("_gain",)


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
        if k.endswith(RATIO_SUFFIXES):
            # Gains average on the log scale (the geometric mean, as for speed-up ratios):
            # the interval is a t interval of log gains mapped back, so it is never negative.
            logs = mean_ci([math.log(v) for v in vals if v > 0])
            stats[k] = math.exp(logs.mean) if logs.n else None
            stats[f"{k}_ci"] = [math.exp(logs.low), math.exp(logs.high)] if logs.n else None
            continue
        ci = mean_ci(vals)
        stats[k] = ci.mean if ci.n else None
        stats[f"{k}_ci"] = [ci.low, ci.high] if ci.n else None
    stats["finished_all"] = all(bool(r.get("finished")) for r in rows)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in stats.items()}


def check_consistency(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every scheme of one (params, seed) must have run the same flows and placement (the
    background-only floor has no jobs: it must have run the same flows)."""
    seen: dict[tuple[str, Any], dict[str, set[str]]] = {}
    for r in runs:
        p = r["params"]
        key = (_group_key(p), p.get("seed"))
        d = seen.setdefault(key, {"flows": set(), "placement": set()})
        d["flows"].add(r["result"].get("flows_digest"))
        if p["scheme"] != FLOOR:
            d["placement"].add(r["result"].get("placement_digest"))
    bad = [f"{k[0]} seed={k[1]}" for k, d in seen.items() if len(d["flows"]) > 1 or len(d["placement"]) > 1]
    return {"same_flows_and_placement": not bad, "mismatches": bad}
