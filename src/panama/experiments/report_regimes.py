"""The results page's regimes: for every shared-cluster output, what removing the jobs allows
(the floor) beside what ``panama`` and ``panama-or`` reach, and one sentence on each."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from panama.experiments import report_text as T
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
        return T.REGIME_NO_FLOOR
    if p99 is None:
        return T.text(T.REGIME_NO_PANAMA, floor=_f(floor_p99))
    if floor_p99 < NO_ROOM_GAIN:
        return T.text(T.REGIME_NO_ROOM, floor=_f(floor_p99), training=_f(train))
    share = math.log(p99) / math.log(floor_p99) if p99 and p99 > 0 else None
    return T.text(
        T.REGIME_ROOM, floor=_f(floor_p99), p99=_f(p99), share=_f(share and 100 * share, ".0f"), training=_f(train)
    )


def regimes_section(shared: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[str]:
    """Markdown: one row per output (gains against ring, pooled p99 and mean per seed), then a sentence each."""
    if not shared:
        return []
    lines = T.lines(T.REGIMES_HEAD)
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
        sentences.append(T.text(T.REGIME_ITEM, regime=_regime(s), out=d.name, sentence=_sentence(floor_p99, pa)))
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
    return T.text(T.FLOOR_TEXT, p99=_f(p99), ci=ci, mean=_f(mean), share=_f(share))
