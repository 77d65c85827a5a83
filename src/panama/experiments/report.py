"""Write ``docs/results.md`` from experiment outputs: the original's claims next to ours.

Every number on the page is read from ``summary.json`` / ``demo.json`` files written by
the experiment commands; the only numbers in this module are the original work's
published claims (:data:`ORIGINAL`), which the page quotes for comparison. This module
reads and formats the numbers; the words of the page are the templates of
:mod:`panama.experiments.report_text`.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panama.core.errors import FieldError
from panama.experiments import report_text as T
from panama.experiments.report_regimes import floor_text, regimes_section
from panama.experiments.report_regimes import fmt_number as _f
from panama.experiments.schemes import FLOOR, scheme_label
from panama.version import code_version

#: Claims of the original work (quoted, for comparison only).
ORIGINAL = {
    "comm_ratio": (0.11, 0.70),  # share of iteration time spent communicating, 5 models x 3 GPUs
    "speedup": {"P100": (1.15, 1.53), "A100": (1.06, 1.28)},  # single-job INA speed-up, no overlap
    "short_p99_gain": 4.5,  # "up to", short flows' 99th-percentile FCT vs host-based allreduce
    "short_mean_gain": 2.0,  # "on average about"
    "large_job_gain": 1.34,  # "up to", average training time of large jobs
}


class ReportError(FieldError):
    """An input is missing or unreadable; ``field`` names the option."""


def _load(path: Path, field: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ReportError(field, f"{path} not found (run the experiment first)") from None
    except (OSError, ValueError) as exc:
        raise ReportError(field, f"cannot read {path}: {exc}") from None


def _ci(st: Mapping[str, Any], key: str, spec: str = ".2f") -> str:
    v = st.get(key)
    ci = st.get(key + "_ci")
    s = _f(v, spec)
    if st.get("n_seeds", 0) > 1 and ci and all(c is not None for c in ci):
        s += f" [{_f(ci[0], spec)}, {_f(ci[1], spec)}]"
    return s


def _cmd(summary: Mapping[str, Any], fallback: str) -> str:
    return (summary.get("config") or {}).get("command") or fallback


# --------------------------------------------------------------------------- sections


def _comm_section(cr: Mapping[str, Any], cr_dir: Path) -> tuple[list[str], dict[str, str]]:
    ranges = cr["ranges"]
    lines = T.lines(
        T.COMM_INTRO,
        ratio=_range(ORIGINAL["comm_ratio"]),
        p100=_range(ORIGINAL["speedup"]["P100"]),
        a100=_range(ORIGINAL["speedup"]["A100"]),
        out=cr_dir,
        models=Path(cr["config"]["models"]).name,
        ring_factor=f"{cr['config']['ring_factor']:g}",
    )
    for name, r in ranges["by_gpu"].items():
        gpu = name.split("@")[0]
        orig = ORIGINAL["speedup"].get(gpu)
        lines.append(
            f"| {name} | {r['comm_ratio_min']:.2f}–{r['comm_ratio_max']:.2f} | "
            f"{r['speedup_min']:.2f}–{r['speedup_max']:.2f} | "
            f"{_range(orig) if orig else T.COMM_NOT_STATED} |"
        )
    o = ranges["overall"]
    lines.append(
        T.text(
            T.COMM_ALL_ROW,
            ratio=f"{o['comm_ratio_min']:.2f}–{o['comm_ratio_max']:.2f}",
            speedup=f"{o['speedup_min']:.2f}–{o['speedup_max']:.2f}",
            original=_range(ORIGINAL["comm_ratio"]),
        )
    )
    lines += T.lines(T.COMM_PER_MODEL_HEAD)
    for r in cr["rows"]:
        lines.append(
            f"| {r['model']} | {r['gpu']} | {r['link_gbps']:g} | {r['gradient_bytes'] / 1e6:.1f} | "
            f"{r['compute_s'] * 1e3:.1f} | "
            f"{r['ring_comm_s'] * 1e3:.1f} | {r['ina_comm_s'] * 1e3:.1f} | {r['comm_ratio']:.2f} | "
            f"{r['speedup_ina_no_overlap']:.2f} | {r['source']} |"
        )
    sources = "; ".join(f"[{k}] {v}" for k, v in cr.get("sources", {}).items())
    lines += T.lines(T.COMM_PER_MODEL_FOOT, sources=sources)
    if (cr_dir / "comm_ratio.png").is_file():
        lines += [T.text(T.PLOT, path=cr_dir / "comm_ratio.png"), ""]
    facts = {
        "p100_max": _f(ranges["by_gpu"].get("P100@10Gbps", {}).get("speedup_max")),
        "ratio_min": _f(o["comm_ratio_min"]),
        "ratio_max": _f(o["comm_ratio_max"]),
    }
    return lines, facts


def _range(pair: Sequence[float]) -> str:
    """``lo–hi`` of one of the original's ranges."""
    return f"{pair[0]:.2f}–{pair[1]:.2f}"


def _group_label(g: Mapping[str, Any]) -> str:
    p = ", ".join(f"{k}={v}" for k, v in g["params"].items())
    return (p or "default") + f" (seeds {', '.join(map(str, g['seeds']))})"


def _shared_section(sc: Mapping[str, Any], sdir: Path, title: str) -> list[str]:
    cfg = sc.get("config", {})
    lines = T.lines(
        T.SHARED_HEAD,
        title=title,
        command=_cmd(sc, f"panama experiment shared-cluster --out {sdir}"),
        out=sdir,
        preset=cfg.get("preset"),
        scenario=sdir / "scenario.toml",
        threshold=_f(cfg.get("threshold_bytes", 0) / 1e6, ".3g"),
    )
    for g in sc["groups"]:
        lines += _group_tables(g)
    files = sc.get("files", {})
    plots = [f"`{sdir / v}`" for k, v in files.items() if str(v).endswith(".png")]
    if plots:
        lines += [T.text(T.PLOTS, plots=", ".join(plots)), ""]
    c = sc.get("consistency", {})
    verdict = (
        T.SAME_FLOWS_YES
        if c.get("same_flows_and_placement")
        else T.text(T.SAME_FLOWS_NO, mismatches="; ".join(c.get("mismatches", [])))
    )
    return [*lines, T.text(T.SAME_FLOWS, verdict=verdict), ""]


def _group_tables(g: Mapping[str, Any]) -> list[str]:
    """One sweep group of a shared-cluster output: the gains table, the short flows behind
    its p99s, bytes per tier and unfinished flows."""
    lines = T.lines(T.GROUP_HEAD, label=_group_label(g))
    for scheme, st in g["schemes"].items():
        lines.append(
            f"| {scheme_label(scheme)} | {_f(st.get('short_fct_mean_us'), '.1f')} | "
            f"{_f(st.get('short_fct_p99_us'), '.1f')} | "
            f"{_ci(st, 'short_fct_p99_us_gain')} | {_f(st.get('short_fct_p99_pooled_us_gain'))} | "
            f"{_ci(st, 'short_fct_mean_us_gain')} | "
            f"{_ci(st, 'large_flow_fct_mean_us_gain')} | {_f(st.get('large_job_training_time_s'), '.4f')} | "
            f"{_ci(st, 'large_job_training_time_s_gain')} | {_ci(st, 'bytes_total_gain')} |"
        )
    n_short = next(iter(g["schemes"].values()), {}).get("short_flows_pooled")
    per_seed = _f((n_short or 0) / max(1, len(g["seeds"])), ".0f")
    lines += T.lines(T.SHORT_FLOWS_POOLED, pooled=n_short, per_seed=per_seed)
    tiers = sorted(
        {
            k[len("bytes_") : -len("_gain")]
            for st in g["schemes"].values()
            for k in st
            if k.startswith("bytes_") and k.endswith("_gain") and k != "bytes_total_gain"
        }
    )
    if tiers:
        lines += T.lines(T.TIERS_HEAD)
        lines += ["| scheme | " + " | ".join(tiers) + " |", "|---|" + "---|" * len(tiers)]
        for scheme, st in g["schemes"].items():
            gains = " | ".join(_ci(st, f"bytes_{t}_gain") for t in tiers)
            lines.append(f"| {scheme_label(scheme)} | {gains} |")
    schemes = g["schemes"].items()
    unfinished = [f"{scheme_label(s)}: {st['unfinished_flows']}" for s, st in schemes if st.get("unfinished_flows")]
    if unfinished:
        lines += T.lines(T.UNFINISHED, flows=", ".join(unfinished))
    lines.append("")
    return lines


def _best(groups: Sequence[Mapping[str, Any]], scheme: str, key: str) -> tuple[float | None, Mapping[str, Any] | None]:
    best, where = None, None
    for g in groups:
        v = g["schemes"].get(scheme, {}).get(key)
        if v is not None and (best is None or v > best):
            best, where = v, g
    return best, where


def write_report(
    output: str | Path,
    *,
    comm_ratio_dir: str | Path | None,
    shared_dirs: Sequence[str | Path],
    demo_dir: str | Path | None = None,
    command: str = "",
) -> Path:
    """Read the experiment outputs and write the markdown results page to ``output``."""
    out = Path(output)
    cr_dir = Path(comm_ratio_dir) if comm_ratio_dir else None
    cr = _load(cr_dir / "summary.json", "--comm-ratio") if cr_dir else None
    shared = [(Path(d), _load(Path(d) / "summary.json", "--shared-cluster")) for d in shared_dirs]
    demo = _load(Path(demo_dir) / "demo.json", "--demo") if demo_dir else None
    if cr is None and not shared:
        raise ReportError("--comm-ratio", "nothing to report: give at least one output directory")

    sources = ([cr_dir] if cr_dir else []) + [d for d, _ in shared] + ([Path(demo_dir)] if demo_dir else [])
    lines = T.lines(
        T.HEADER,
        command=command or "panama experiment report",
        when=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        rev=code_version(),
        sources=", ".join(f"`{p}`" for p in sources),
    )
    main_dir, main = shared[0] if shared else (None, None)
    all_groups = [g for _, s in shared for g in s["groups"]]
    lines += _summary(cr, main_dir, main, all_groups, demo)
    lines += regimes_section(shared)
    facts: dict[str, str] = {}
    if cr:
        sec, facts = _comm_section(cr, cr_dir)
        lines += sec
    if shared:
        lines += _shared_sections(shared)
    if demo and demo.get("train"):
        lines += _demo_section(demo, demo_dir)
    jobs = _run_jobs(main_dir, ((main or {}).get("config") or {}).get("preset"))
    lines += _discussion(cr, main, all_groups, facts, shared, _cluster_text(main_dir), jobs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines).rstrip() + "\n")
    return out


def _summary(cr, main_dir: Path | None, main, all_groups, demo) -> list[str]:
    """The headline table: each claim of the original beside ours and the command behind it."""
    lines = T.lines(T.SUMMARY_HEAD)
    if cr:
        o = cr["ranges"]["overall"]
        lines.append(
            T.text(
                T.SUMMARY_COMM_SHARE,
                original=_range(ORIGINAL["comm_ratio"]),
                ours=f"{o['comm_ratio_min']:.2f}–{o['comm_ratio_max']:.2f}",
            )
        )
        for gpu, (lo, hi) in ORIGINAL["speedup"].items():
            r = next((v for k, v in cr["ranges"]["by_gpu"].items() if k.startswith(gpu + "@")), None)
            if r:
                ours = f"{r['speedup_min']:.2f}–{r['speedup_max']:.2f}"
                lines.append(T.text(T.SUMMARY_SPEEDUP, gpu=gpu, original=f"{lo:.2f}–{hi:.2f}", ours=ours))
    if main:
        lines += _summary_shared(main_dir, main, all_groups)
    if demo and demo.get("train"):
        t = demo["train"]
        other = t.get("gloo") or t.get("reference")  # demo.json before 2026-11-26: an in-process sum
        comparison = (
            T.text(T.ACCURACY_GLOO, equal=t.get("parameters_bitwise_equal"))
            if "gloo" in t
            else T.text(T.ACCURACY_IN_PROCESS, identical=t["panama"]["replicas_identical"])
        )
        lines.append(
            T.text(
                T.SUMMARY_ACCURACY,
                panama=_f(t["panama"]["final_test_accuracy"], ".4f"),
                other=_f(other["final_test_accuracy"], ".4f"),
                comparison=comparison,
            )
        )
    lines.append("")
    return lines


def _summary_shared(main_dir: Path, main, all_groups) -> list[str]:
    """The headline rows of the main shared-cluster output (claims 2 and 3, network bytes)."""
    st = main["schemes"].get("panama", {})
    hp = ", ".join(f"{k}={v}" for k, v in main.get("headline_params", {}).items()) or "defaults"
    seeds = ", ".join(map(str, main.get("headline_seeds", [])))
    where = f"{main_dir.name}, {hp}, seeds {seeds}"
    bp99, _gp99 = _best(all_groups, "panama", "short_fct_p99_us_gain")
    btr, _gtr = _best(all_groups, "panama", "large_job_training_time_s_gain")
    return [
        T.text(
            T.SUMMARY_SHORT_P99,
            original=ORIGINAL["short_p99_gain"],
            gain=_ci(st, "short_fct_p99_us_gain"),
            where=where,
            pooled=_f(st.get("short_fct_p99_pooled_us_gain")),
            best=_f(bp99),
            command=_cmd(main, "panama experiment shared-cluster"),
        ),
        T.text(
            T.SUMMARY_SHORT_MEAN,
            original=f"{ORIGINAL['short_mean_gain']:.0f}",
            gain=_ci(st, "short_fct_mean_us_gain"),
            where=where,
        ),
        T.text(
            T.SUMMARY_TRAINING,
            original=ORIGINAL["large_job_gain"],
            gain=_ci(st, "large_job_training_time_s_gain"),
            where=where,
            best=_f(btr),
        ),
        T.text(T.SUMMARY_BYTES, gain=_ci(st, "bytes_total_gain")),
    ]


def _shared_sections(shared) -> list[str]:
    """Claims 2 and 3: the main configuration, then every other output titled by what it varies."""
    lines = T.lines(
        T.SHARED_INTRO,
        p99=ORIGINAL["short_p99_gain"],
        mean=f"{ORIGINAL['short_mean_gain']:.0f}",
        training=ORIGINAL["large_job_gain"],
    )
    main_scenario = _scenario_of(shared[0][0])
    for i, (d, s) in enumerate(shared):
        diffs = _variant(main_scenario, d, s) if i else None
        title = (
            T.MAIN_CONFIGURATION
            if i == 0
            else T.text(
                T.SWEEP_TITLE,
                axes=(", ".join(k for k, v in s["axes"].items() if len(v) > 1) or d.name)
                + (f" ({', '.join(diffs)})" if diffs else ""),
            )
        )
        lines += _shared_section(s, d, title)
    return lines


def _demo_section(demo, demo_dir) -> list[str]:
    """Claim 4: the demo's training runs."""
    t = demo["train"]
    lines = T.lines(T.DEMO_HEAD, command=demo.get("command") or "panama demo", out=demo_dir)
    for name in (n for n in ("panama", "gloo", "reference") if n in t):
        r = t[name]
        lines.append(
            f"| {name} | {r['allreduce']} | {r['workers']} | {r['epochs']} | "
            f"{_f(r['final_test_accuracy'], '.4f')} | "
            f"{r['replicas_identical']} | {_f(r['total_seconds'], '.1f')} |"
        )
    if "parameters_bitwise_equal" in t:
        lines += T.lines(T.DEMO_BITWISE, equal=t["parameters_bitwise_equal"])
    sim = demo.get("simulation") or {}
    if "short_fct_p99_gain" in sim:  # demo.json since the gains (earlier: scheme/ring ratios, not shown)
        fl = sim.get("floor") or {}
        lines += T.lines(
            T.DEMO_SIMULATION,
            preset=sim.get("preset"),
            seed=sim.get("seed"),
            flows=_f(sim["ring"].get("short_flows"), ".0f"),
            out=Path(sim["out_dir"]),
            p99=_f(sim.get("short_fct_p99_gain")),
            mean=_f(sim.get("short_fct_mean_gain")),
            training=_f(sim.get("large_job_training_time_gain")),
            floor_p99=_f(fl.get("short_fct_p99_gain")),
            floor_mean=_f(fl.get("short_fct_mean_gain")),
        )
    lines.append("")
    return lines


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _span(lo: float, hi: float, spec: str) -> str:
    """``lo–hi``, or one value when they are equal."""
    return format(lo, spec) if format(lo, spec) == format(hi, spec) else f"{lo:{spec}}–{hi:{spec}}"


def _run_jobs(sdir: Path | None, preset: str | None) -> list[tuple[str, int]]:
    """(model, workers) of the main run's jobs that are comm-ratio models: read from the run's
    ``scenario.toml`` (job names mapped to models through the built-in job templates), or the
    preset's mix when the run directory has no scenario."""
    import tomllib

    from panama.experiments.cluster_scenario import JOB_MIX, PRESETS

    templates = [t for p in PRESETS.values() for t in p.get("jobs", ())] + list(JOB_MIX)
    model_of = {t.name: t.model for t in templates if t.model}
    try:
        jobs = tomllib.loads((sdir / "scenario.toml").read_text())["jobs"] if sdir else None
    except (OSError, ValueError, KeyError):
        jobs = None
    if jobs is None:
        mix = PRESETS.get(preset or "", {}).get("jobs", JOB_MIX)
        return [(t.model, t.workers) for t in mix if t.model]
    return [(model_of[j["name"]], int(j["workers"])) for j in jobs if j.get("name") in model_of]


def _job_bound(cr, jobs: list[tuple[str, int]]) -> str:
    """The single-job bound of the simulated jobs' models (``(model, workers)`` pairs, see
    :func:`_run_jobs`) on P100 / 10 Gbps, from comm-ratio."""
    if not cr:
        return ""
    models = {m for m, _ in jobs}
    rows = [r for r in cr["rows"] if r["gpu"] == "P100" and r["model"] in models]
    if not rows:
        return ""
    lo = min(r["speedup_ina_no_overlap"] for r in rows)
    hi = max(r["speedup_ina_no_overlap"] for r in rows)
    workers = sorted({w for m, w in jobs if m in {r["model"] for r in rows}})
    return T.text(
        T.JOB_BOUND,
        speedup=f"{lo:.2f}–{hi:.2f}",
        models=", ".join(sorted(models)),
        workers=_span(workers[0], workers[-1], "d"),
        factor=_span(2 * (workers[0] - 1) / workers[0], 2 * (workers[-1] - 1) / workers[-1], ".2f"),
    )


def _trend(shared) -> list[str]:
    """One sentence per multi-valued sweep axis: panama's gains along it."""
    out = []
    for d, s in shared:
        multi = [k for k, v in s.get("axes", {}).items() if k != "seed" and len(v) > 1]
        for axis in multi:
            parts = []
            for g in sorted(s["groups"], key=lambda g: g["params"].get(axis)):
                st = g["schemes"].get("panama", {})
                fl = g["schemes"].get(FLOOR)
                floor = (
                    T.text(
                        T.TREND_FLOOR,
                        share=_f(g.get("aggregation_share")),
                        mean=_f(fl.get("short_fct_mean_us_gain")),
                        pooled=_f(fl.get("short_fct_p99_pooled_us_gain")),
                    )
                    if fl
                    else ""
                )
                parts.append(
                    T.text(
                        T.TREND_POINT,
                        axis=axis,
                        value=g["params"].get(axis),
                        p99=_f(st.get("short_fct_p99_us_gain")),
                        pooled=_f(st.get("short_fct_p99_pooled_us_gain")),
                        mean=_f(st.get("short_fct_mean_us_gain")),
                        training=_f(st.get("large_job_training_time_s_gain")),
                        floor=floor,
                    )
                )
            out.append(T.text(T.TREND, axis=axis, out=d, points="; ".join(parts)))
    return out


def _scenario_of(sdir: Path) -> dict:
    """The run directory's ``scenario.toml`` with every default filled in (so outputs written
    before a key existed compare equal on it); {} when it has none or it no longer loads."""
    from panama.sim.scenario import load_scenario

    try:
        return load_scenario(sdir / "scenario.toml").model_dump()
    except (OSError, ValueError):
        return {}


def _flat(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _differences(base: Mapping[str, Any], other: Mapping[str, Any], limit: int = 4) -> list[str] | None:
    """``key=value`` (dotted scenario keys) for each setting of ``other`` that differs from
    ``base``, seed and scheme aside; None when a scenario is missing, the jobs differ, or
    more than ``limit`` settings do (another preset rather than a variant of the main one)."""
    if not base or not other:
        return None
    a, b = _flat(base), _flat(other)
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in ("seed", "scheme") or a.get(key) == b.get(key):
            continue
        if isinstance(a.get(key), list) or isinstance(b.get(key), list):
            return None
        value = b.get(key)
        diffs.append(f"{key}={'unset' if value is None else str(value).lower() if isinstance(value, bool) else value}")
    return diffs if len(diffs) <= limit else None


def _variant(base: Mapping[str, Any], sdir: Path, summary: Mapping[str, Any]) -> list[str] | None:
    """How the output in ``sdir`` differs from the main configuration: its scenario's
    settings (:func:`_differences`) and its single-valued sweep axes (``--load 0.1``)."""
    diffs = _differences(base, _scenario_of(sdir))
    if diffs is None:
        return None
    fixed = [f"{k}={v[0]}" for k, v in summary.get("axes", {}).items() if k != "seed" and len(v) == 1]
    return fixed + diffs


def _settings_text(shared) -> list[str]:
    """One sentence per seeds-only output that is the main configuration with a few settings
    changed (:func:`_differences`): panama's gains there, the aggregation share and the floor."""
    if not shared:
        return []
    base = _scenario_of(shared[0][0])
    out = []
    for d, s in shared[1:]:
        multi = [k for k, v in s.get("axes", {}).items() if k != "seed" and len(v) > 1]
        diffs = _variant(base, d, s)
        if multi or not diffs or len(s.get("groups", ())) != 1:
            continue
        g = s["groups"][0]
        st = g["schemes"].get("panama", {})
        fl = g["schemes"].get(FLOOR)
        floor = (
            T.text(
                T.SETTINGS_FLOOR,
                pooled=_f(fl.get("short_fct_p99_pooled_us_gain")),
                mean=_f(fl.get("short_fct_mean_us_gain")),
            )
            if fl
            else ""
        )
        ci = st.get("large_job_training_time_s_gain_ci") or (None, None)
        slower = T.SETTINGS_SLOWER if ci[1] is not None and ci[1] < 1.0 else ""
        out.append(
            T.text(
                T.SETTINGS,
                settings=", ".join(diffs),
                out=d,
                seeds=", ".join(map(str, g.get("seeds", []))),
                p99=_ci(st, "short_fct_p99_us_gain"),
                pooled=_f(st.get("short_fct_p99_pooled_us_gain")),
                mean=_ci(st, "short_fct_mean_us_gain"),
                training=_ci(st, "large_job_training_time_s_gain"),
                share=_f(g.get("aggregation_share")),
                floor=floor,
                slower=slower,
            )
        )
    return out


def _health(main) -> str:
    parts = []
    for scheme, st in main["schemes"].items():
        parts.append(
            T.text(
                T.HEALTH,
                scheme=scheme_label(scheme),
                pauses=_f(st.get("pfc_pauses"), ".0f"),
                marks=_f(st.get("ecn_marks"), ".0f"),
                drops=_f(st.get("drops"), ".0f"),
            )
        )
    return "; ".join(parts)


def _cluster_text(sdir: Path | None) -> str:
    """``128 hosts (fat-tree:k=8), 8 jobs`` from the run's ``scenario.toml`` ('' if absent)."""
    import tomllib

    from panama.core.topology import parse_topology

    try:
        sc = tomllib.loads((sdir / "scenario.toml").read_text()) if sdir else {}
        spec = sc.get("topology", {}).get("spec", "fat-tree:k=4")
        hosts = len(parse_topology(spec).hosts)
    except (OSError, ValueError):
        return ""
    jobs = sc.get("jobs", [])
    workers = sum(int(j.get("workers", 0)) for j in jobs)
    return T.text(
        T.CLUSTER,
        hosts=hosts,
        spec=spec,
        jobs=len(jobs),
        workers=workers,
        placement=sc.get("placement", "random"),
        load=sc.get("background", {}).get("load", "?"),
    )


def _discussion(cr, main, groups, facts, shared=(), cluster: str = "", jobs=()) -> list[str]:
    lines = T.lines(T.DISCUSSION_HEAD)
    if cr:
        lines.append(_comm_share_item(cr, facts))
    if main:
        st = main["schemes"].get("panama", {})
        training = _compare(st, "large_job_training_time_s_gain", ORIGINAL["large_job_gain"], "training-time")
        lines += [
            _short_flows_item(main, cluster),
            *(T.text(T.LOAD_ITEM, sentence=t) for t in _trend(shared)),
            *(T.text(T.OTHER_SETTINGS_ITEM, sentence=t) for t in _settings_text(shared)),
            T.text(
                T.LARGE_JOBS_ITEM,
                verdict=_cap(training),
                bound=_job_bound(cr, jobs),
            ),
            T.SIMULATOR_ITEM,
            T.SCHEMES_ITEM,
        ]
    lines.append("")
    return lines


def _comm_share_item(cr, facts) -> str:
    """Why our communication shares differ from the original's (or that they match)."""
    o = cr["ranges"]["overall"]
    lo_ok = abs(o["comm_ratio_min"] - ORIGINAL["comm_ratio"][0]) <= 0.05
    hi_ok = abs(o["comm_ratio_max"] - ORIGINAL["comm_ratio"][1]) <= 0.05
    verdict = (
        T.COMM_SHARE_MATCHES
        if lo_ok and hi_ok
        else T.text(
            T.COMM_SHARE_DIFFERS,
            ours=f"{facts['ratio_min']}–{facts['ratio_max']}",
            original=_range(ORIGINAL["comm_ratio"]),
        )
    )
    return T.text(T.COMM_SHARE_ITEM, verdict=verdict)


def _compare(st: Mapping[str, Any], key: str, target: float, what: str) -> str:
    """How our gain ``key`` (with its confidence interval over seeds) compares with the original's ``target``."""
    v = st.get(key)
    ci = st.get(key + "_ci")
    has_ci = st.get("n_seeds", 0) > 1 and ci and all(c is not None for c in ci)
    ci_txt = T.text(T.GAIN_CI, lo=f"{ci[0]:.2f}", hi=f"{ci[1]:.2f}") if has_ci else ""
    if v is None:
        return T.text(T.GAIN_MISSING, what=what)
    values = {"what": what, "value": f"{v:.2f}", "ci": ci_txt, "target": target}
    if has_ci and ci[0] <= 1.0 <= ci[1]:
        return T.text(T.GAIN_NO_CHANGE, **values)
    if v >= target * 0.9:
        return T.text(T.GAIN_REACHES, **values)
    if v > 1.0:
        return T.text(T.GAIN_BELOW, **values)
    return T.text(T.GAIN_OTHER_WAY, **values)


def _short_flows_item(main, cluster: str) -> str:
    """Claim 2 in the main configuration: our short-flow gains against the original's, and why."""
    st = main["schemes"].get("panama", {})
    ina = {k: v for k, v in main["schemes"].items() if k not in ("ring", FLOOR)}
    best = max(ina, key=lambda k: ina[k].get("short_fct_p99_us_gain") or 0.0) if ina else None
    best_txt = (
        T.text(
            T.BEST_INA,
            scheme=best,
            p99=_f(ina[best].get("short_fct_p99_us_gain")),
            mean=_f(ina[best].get("short_fct_mean_us_gain")),
        )
        if best
        else ""
    )
    return T.text(
        T.SHORT_FLOWS_ITEM,
        p99_verdict=_cap(_compare(st, "short_fct_p99_us_gain", ORIGINAL["short_p99_gain"], "p99 FCT")),
        mean_verdict=_compare(st, "short_fct_mean_us_gain", ORIGINAL["short_mean_gain"], "mean FCT"),
        bytes=_f(st.get("bytes_total_gain")),
        best=best_txt,
        floor=floor_text(main),
        health=_health(main),
        cluster=T.text(T.OUR_CLUSTER, cluster=cluster) if cluster else "",
    )
