"""``panama experiment publish``: the outputs behind the docs, stored in the repository, and
the pages and README rows written from them, so that no quoted number can go stale.

One command (:func:`publish`) copies the small files of the page's outputs (summaries, demo
and training records, scenarios, figures; never the per-run points) from a run directory
(``out/final``) into ``docs/results/<name>/``, writes ``docs/results.md`` from those copies
and rewrites the README's headline rows between :data:`README_BEGIN` and :data:`README_END`.
:func:`check_published` says what disagrees: README rows or the results page that the stored
outputs no longer give, a quoted fact (:data:`QUOTED_FACTS`) that differs from its source,
or a file named in the README or ``docs/*.md`` that does not exist (``tests/test_doc_numbers.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panama.experiments.page_outputs import PAGE_OUTPUTS, page_output
from panama.experiments.report import ORIGINAL, write_report
from panama.experiments.report_regimes import fmt_number as _f

__all__ = [
    "PAGE_OUTPUTS",
    "QUOTED_FACTS",
    "README_BEGIN",
    "README_END",
    "check_published",
    "publish",
    "readme_rows",
]

# PAGE_OUTPUTS: the outputs of the results page, by directory name, in page order (the first
# shared-cluster one is the page's main configuration); from page_outputs.PAGE, the table that
# `panama experiment reproduce` runs.
#: Where they are stored, relative to the repository root.
STORE = Path("docs/results")
RESULTS_PAGE = Path("docs/results.md")
README_BEGIN = "<!-- headline rows: written by `panama experiment publish` from docs/results/; do not edit -->"
README_END = "<!-- end of headline rows -->"
#: The files of an output directory that are stored (small; the per-run points are not).
_KEPT = ("summary.json", "config.json", "scenario.toml", "demo.json", "train-panama.json", "train-gloo.json")
#: The command written into the results page's header.
PAGE_COMMAND = "panama experiment publish"


def _copy_output(src: Path, dest: Path, root_from: Path, root_to: Path) -> None:
    """The kept files and figures of one output directory (and of its ``shared-cluster/``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.iterdir()):
        if path.is_file() and (path.name in _KEPT or path.suffix == ".png"):
            text_like = path.suffix in (".json", ".toml")
            if text_like:  # paths inside (demo.json's plots, logs) point at the stored copies
                text = path.read_text().replace(f"{root_from.as_posix()}/", f"{root_to.as_posix()}/")
                (dest / path.name).write_text(text)
            else:
                shutil.copyfile(path, dest / path.name)
    inner = src / "shared-cluster"
    if inner.is_dir():
        _copy_output(inner, dest / "shared-cluster", root_from, root_to)


def _finished(d: Path) -> bool:
    """An output directory whose run finished (its summary or demo record was written)."""
    return (d / "summary.json").is_file() or (d / "demo.json").is_file()


def _page_dirs(store: Path) -> dict[str, Path]:
    return {name: store / name for name in PAGE_OUTPUTS if _finished(store / name)}


def write_results_page(store: Path = STORE, output: Path = RESULTS_PAGE, command: str = PAGE_COMMAND) -> Path:
    """``docs/results.md`` from the stored outputs (or, from ``panama experiment reproduce``, the
    page of a run directory: ``store`` the run directory, ``command`` the one in its header)."""
    dirs = _page_dirs(store)
    shared = [d for name, d in dirs.items() if page_output(name).kind == "shared-cluster"]
    return write_report(
        output,
        comm_ratio_dir=dirs.get("comm-ratio"),
        shared_dirs=shared,
        demo_dir=dirs.get("demo"),
        command=command,
    )


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _pooled(st: Mapping[str, Any]) -> str:
    """A pooled p99 gain with its bootstrap interval: ``3.82x [3.50, 4.12]``."""
    lo, hi = st.get("short_fct_p99_pooled_us_gain_ci_low"), st.get("short_fct_p99_pooled_us_gain_ci_high")
    ci = f" [{_f(lo)}, {_f(hi)}]" if lo is not None and hi is not None else ""
    return f"{_f(st.get('short_fct_p99_pooled_us_gain'))}x{ci}"


def _seeds(st: Mapping[str, Any], key: str) -> str:
    """A gain over seeds with its t interval: ``1.67x [1.55, 1.80]``."""
    ci = st.get(key + "_ci")
    ci_text = f" [{_f(ci[0])}, {_f(ci[1])}]" if st.get("n_seeds", 0) > 1 and ci and None not in ci else ""
    return f"{_f(st.get(key))}x{ci_text}"


def readme_rows(store: Path = STORE) -> list[str]:
    """The README's headline rows of the experiments, from the stored outputs."""
    rows = []
    jobs = store / "jobs-dominated" / "summary.json"
    if jobs.is_file():
        s = _load(jobs)
        pa, po, fl = (s["schemes"].get(k, {}) for k in ("panama", "panama-or", "floor"))
        n = len(s.get("headline_seeds", []))
        floor_p99, or_p99 = _f(fl.get("short_fct_p99_pooled_us_gain")), _f(po.get("short_fct_p99_pooled_us_gain"))
        rows += [
            f"| short-flow p99 FCT, PANAMA vs ring, jobs dominate the fabric (`--preset jobs-dominated`, {n} "
            f"seeds) | up to {ORIGINAL['short_p99_gain']}x better | {_pooled(pa)} (floor (no jobs) {floor_p99}x; "
            f"the source's reaction, panama-or, {or_p99}x) |",
            f"| short-flow mean FCT, same | about {ORIGINAL['short_mean_gain']:.0f}x better | "
            f"{_seeds(pa, 'short_fct_mean_us_gain')} (floor (no jobs) {_f(fl.get('short_fct_mean_us_gain'))}x) |",
            f"| large-job training time, same | up to {ORIGINAL['large_job_gain']}x faster | "
            f"{_seeds(pa, 'large_job_training_time_s_gain')} |",
        ]
    paper = store / "paper" / "summary.json"
    if paper.is_file():
        s = _load(paper)
        pa, fl = s["schemes"].get("panama", {}), s["schemes"].get("floor", {})
        rows.append(
            f"| short-flow p99 / training, busy background (`--preset paper`, 10 Gb/s, "
            f"{len(s.get('headline_seeds', []))} seeds) | | {_f(pa.get('short_fct_p99_pooled_us_gain'))}x "
            f"(floor (no jobs) {_f(fl.get('short_fct_p99_pooled_us_gain'))}x) / "
            f"{_seeds(pa, 'large_job_training_time_s_gain')} |"
        )
    fast = store / "paper-100g" / "summary.json"
    if fast.is_file():
        s = _load(fast)
        pa, po = s["schemes"].get("panama", {}), s["schemes"].get("panama-or", {})
        rows.append(
            f"| training at 100 Gb/s (`--preset paper`, {len(s.get('headline_seeds', []))} seeds) | | "
            f"{_seeds(pa, 'large_job_training_time_s_gain')} (the source's reaction "
            f"{_f(po.get('large_job_training_time_s_gain'))}x); short-flow p99 "
            f"{_f(pa.get('short_fct_p99_pooled_us_gain'))}x |"
        )
    demo = store / "demo" / "demo.json"
    if demo.is_file():
        t = _load(demo).get("train") or {}
        if t:
            rows.append(
                f"| accuracy with float32 in-network sums (`panama demo`) | no loss | "
                f"{_f(t['panama']['final_test_accuracy'], '.4f')} vs DDP on gloo "
                f"{_f(t['gloo']['final_test_accuracy'], '.4f')}, parameters bitwise equal: "
                f"{t['parameters_bitwise_equal']} |"
            )
    comm = store / "comm-ratio" / "summary.json"
    if comm.is_file():
        by_gpu = _load(comm)["ranges"]["by_gpu"]
        p100, a100 = by_gpu.get("P100@10Gbps"), by_gpu.get("A100@100Gbps")
        if p100 and a100:
            o = ORIGINAL["speedup"]
            rows.append(
                f"| single-job speed-up bound, P100 / A100 | {o['P100'][0]:.2f}–{o['P100'][1]:.2f}x / "
                f"{o['A100'][0]:.2f}–{o['A100'][1]:.2f}x | {p100['speedup_min']:.2f}–{p100['speedup_max']:.2f}x / "
                f"{a100['speedup_min']:.2f}–{a100['speedup_max']:.2f}x |"
            )
    return rows


def _readme_block(store: Path) -> str:
    return "\n".join([README_BEGIN, *readme_rows(store), README_END])


def update_readme(readme: Path, store: Path = STORE) -> None:
    """Replace the README's block between :data:`README_BEGIN` and :data:`README_END`."""
    text = readme.read_text()
    pattern = re.compile(re.escape(README_BEGIN) + r".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{readme} has no headline block ({README_BEGIN!r} ... {README_END!r})")
    readme.write_text(pattern.sub(lambda _m: _readme_block(store), text))


def publish(run_root: Path, root: Path = Path(".")) -> list[Path]:
    """Store the page's outputs found in ``run_root`` under ``root/docs/results``, write the
    results page and the README's headline rows; returns the files written."""
    store = root / STORE
    for name in PAGE_OUTPUTS:
        src = run_root / name
        if _finished(src):
            if (store / name).exists():
                shutil.rmtree(store / name)
            _copy_output(src, store / name, run_root / name, STORE / name)
    page = write_results_page(STORE if root == Path(".") else store, root / RESULTS_PAGE)
    update_readme(root / "README.md", store)
    return [store, page, root / "README.md"]


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class QuotedFact:
    """A number quoted in a doc outside the generated rows: ``pattern``'s group 1 in ``doc`` must
    equal ``value(stored output)`` formatted."""

    doc: str
    pattern: str
    source: str
    value: Callable[[dict[str, Any]], str]


QUOTED_FACTS = (
    QuotedFact(
        "docs/experiments.md",
        r"the demo's short-flow p99 gain (\d+\.\d\d)x",
        "docs/results/demo/demo.json",
        lambda d: f"{d['simulation']['short_fct_p99_gain']:.2f}",
    ),
    QuotedFact(
        "docs/experiments.md",
        r"\(floor \(no\s+jobs\) (\d+\.\d\d)x\), test accuracy",
        "docs/results/demo/demo.json",
        lambda d: f"{d['simulation']['floor']['short_fct_p99_gain']:.2f}",
    ),
    QuotedFact(
        "docs/experiments.md",
        r"test accuracy (\d\.\d{4}) with panama",
        "docs/results/demo/demo.json",
        lambda d: f"{d['train']['panama']['final_test_accuracy']:.4f}",
    ),
)

_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_CODE_PATH = re.compile(r"`((?:docs|examples|src|tests|bench|\.ci)/[A-Za-z0-9_./-]+)`")


def missing_files(root: Path = Path(".")) -> list[str]:
    """Files named in README.md and docs/*.md (relative links, and backticked paths under docs/,
    examples/, src/, tests/, bench/, .ci/) that do not exist."""
    problems = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text()
        for target in _LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                problems.append(f"{doc.relative_to(root)} links {target}, which does not exist")
        for path in _CODE_PATH.findall(text):
            path = path.rstrip(".")
            if "::" in path or not (root / path).exists():
                if "::" not in path:
                    problems.append(f"{doc.relative_to(root)} names {path}, which does not exist")
    return problems


def check_published(root: Path = Path("."), readme_text: str | None = None) -> list[str]:
    """Everything the docs quote that the stored outputs do not give (empty: all agree)."""
    problems = []
    store = root / STORE
    readme = readme_text if readme_text is not None else (root / "README.md").read_text()
    block = _readme_block(store)
    if block not in readme:
        got = re.search(re.escape(README_BEGIN) + r".*?" + re.escape(README_END), readme, re.S)
        stale = set(got.group(0).splitlines()) - set(block.splitlines()) if got else {"(no block)"}
        problems += [f"README.md row disagrees with {STORE}: {line}" for line in sorted(stale)]
    for fact in QUOTED_FACTS:
        want = fact.value(_load(root / fact.source))
        found = re.findall(fact.pattern, (root / fact.doc).read_text())
        if not found:
            problems.append(f"{fact.doc} no longer quotes {fact.pattern!r} (update QUOTED_FACTS)")
        for got in found:
            if got != want:
                problems.append(f"{fact.doc} quotes {got} where {fact.source} gives {want}")
    return problems + missing_files(root)
