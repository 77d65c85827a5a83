"""The results page's regimes: for every shared-cluster output, what removing the jobs allows
(the floor) beside what ``panama`` and ``panama-or`` reach, and one sentence on each."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panama.experiments.schemes import FLOOR

#: Below this pooled p99 gain the floor leaves no room: the background sets the tail.
NO_ROOM_GAIN = 1.5


def fmt_number(x: Any, spec: str = ".2f") -> str:
    """A number for the results page; ``–`` when missing or not finite (report.py uses it too)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x, spec)


_f = fmt_number


def _regime(summary: Mapping[str, Any]) -> str:
    """The preset and the scenario keys the command changed (rates, loads), in a few words."""
    cfg = summary.get("config", {})
    parts = [str(cfg.get("preset", "?"))]
    try:
        words = shlex.split(cfg.get("command") or "")
    except ValueError:
        words = []
    for i, w in enumerate(words[:-1]):
        if w == "--set" and words[i + 1].startswith("topology.host_rate_gbps="):
            parts.append(f"{words[i + 1].split('=', 1)[1]} Gb/s")
        elif w == "--load":
            parts.append(f"load {words[i + 1]}")
    return ", ".join(parts)


def _sentence(floor_p99: float | None, st: Mapping[str, Any]) -> str:
    p99 = st.get("short_fct_p99_pooled_us_gain")
    train = st.get("large_job_training_time_s_gain")
    if floor_p99 is None:
        return "No floor was run here, so this output cannot say how much room there was."
    if p99 is None:
        return f"PANAMA was not run here; removing the jobs would improve the short-flow p99 {_f(floor_p99)}x."
    if floor_p99 < NO_ROOM_GAIN:
        return (
            f"PANAMA cannot help short flows here: removing every job improves their p99 only {_f(floor_p99)}x "
            f"(the background sets the tail); it can still train the large jobs {_f(train)}x faster."
        )
    share = math.log(p99) / math.log(floor_p99) if p99 and p99 > 0 else None
    return (
        f"PANAMA can help here: removing the jobs would improve the short-flow p99 {_f(floor_p99)}x; PANAMA "
        f"reaches {_f(p99)}x ({_f(share and 100 * share, '.0f')} % of that room on a log scale) and trains "
        f"{_f(train)}x faster."
    )


def regimes_section(shared: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[str]:
    """Markdown: one row per output (gains against ring, pooled p99 and mean per seed), then a sentence each."""
    if not shared:
        return []
    lines = [
        "## Where PANAMA can and cannot help (every output, with the floor)",
        "",
        "Gains against ring on the same flows and seeds (above 1 is better): pooled short-flow p99, short-flow "
        "mean (geometric mean over seeds), large-job training. `floor` is the same flows without any job: what no "
        "allreduce scheme can beat. `panama` runs the default tree reaction (`dctcp-path`), `panama-or` the "
        "source's (`dctcp-or`).",
        "",
        "| output | regime | seeds | jobs' share of ring's bytes | floor p99 / mean | panama p99 / mean / training "
        "| panama-or p99 / mean / training |",
        "|---|---|---|---|---|---|---|",
    ]
    sentences = []
    for d, s in shared:
        schemes = s.get("schemes", {})
        fl, pa, po = schemes.get(FLOOR), schemes.get("panama", {}), schemes.get("panama-or")
        share = (s.get("groups") or [{}])[0].get("aggregation_share")

        def trio(st: Mapping[str, Any] | None) -> str:
            if not st:
                return "–"
            return (
                f"{_f(st.get('short_fct_p99_pooled_us_gain'))} / {_f(st.get('short_fct_mean_us_gain'))} / "
                f"{_f(st.get('large_job_training_time_s_gain'))}"
            )

        floor_txt = (
            f"{_f(fl.get('short_fct_p99_pooled_us_gain'))} / {_f(fl.get('short_fct_mean_us_gain'))}" if fl else "–"
        )
        seeds = ", ".join(map(str, s.get("headline_seeds", [])))
        lines.append(f"| `{d.name}` | {_regime(s)} | {seeds} | {_f(share)} | {floor_txt} | {trio(pa)} | {trio(po)} |")
        floor_p99 = fl.get("short_fct_p99_pooled_us_gain") if fl else None
        sentences.append(f"- **{_regime(s)}** (`{d.name}`): {_sentence(floor_p99, pa)}")
    return [*lines, "", *sentences, ""]


def floor_text(main: Mapping[str, Any]) -> str:
    """What removing every job gives short flows (the bound of every scheme), if the floor ran."""
    fl = main["schemes"].get(FLOOR)
    if not fl:
        return ""
    p99 = fl.get("short_fct_p99_pooled_us_gain")
    lo, hi = fl.get("short_fct_p99_pooled_us_gain_ci_low"), fl.get("short_fct_p99_pooled_us_gain_ci_high")
    mean = fl.get("short_fct_mean_us_gain")
    share = (main.get("groups") or [{}])[0].get("aggregation_share")
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    return (
        f"The floor bounds every scheme: with every job removed (same flows and seeds), short flows gain "
        f"{_f(p99)}x{ci} at p99 (pooled) and {_f(mean)}x at the mean; the jobs add "
        f"{_f(share)} of ring's link bytes. No allreduce scheme can beat removing the jobs, so a claim above "
        "the floor cannot be reproduced in this configuration. "
    )
