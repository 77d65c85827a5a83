"""Motivation figure: how much of a data-parallel iteration is communication.

Reproduces the analysis behind the original work's Figure 1: for image-classification
models of the TensorFlow benchmark suite on three GPU generations, each paired with a
link speed (P100/10, V100/40, A100/100 Gbps), estimate

* compute time of one iteration  ``C = batch_size / images_per_s`` (published throughput);
* in-network aggregation traffic ``G = params * bytes_per_param`` per worker per
  iteration, taking ``R_ina = 8 G / link_bps`` seconds;
* ring allreduce moves ``f = 2 (N-1)/N`` times as much per worker (``f -> 2`` for large
  ``N``), so ``R_ring = f * R_ina``;
* communication ratio ``R_ring / (R_ring + C)`` and the single-job speed-up of in-network
  aggregation with no compute/communication overlap ``(C + R_ring) / (C + R_ina)`` —
  equivalently ``1 / (1 - ratio * (1 - 1/f))``, the analytic bound.

The input table (``src/panama/data/models.csv`` by default) is user data: each row cites
its source; ``--models FILE`` replaces it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from panama.core.errors import FieldError
from panama.experiments.sweep import write_json_atomic
from panama.tables import format_table as draw_table

REQUIRED_COLUMNS = ("model", "gpu", "link_gbps", "params", "batch_size", "images_per_s")
OPTIONAL_COLUMNS = ("bytes_per_param", "throughput_batch", "source", "param_source", "note")


class ModelTableError(FieldError):
    """The models table is malformed; ``field`` names the column (or ``row N: column``)."""


@dataclass(frozen=True)
class ModelRow:
    """One (model, GPU) input row."""

    model: str
    gpu: str
    link_gbps: float
    params: int
    batch_size: int
    images_per_s: float
    bytes_per_param: int = 4
    throughput_batch: int | None = None
    source: str = ""
    param_source: str = ""
    note: str = ""


@dataclass(frozen=True)
class RatioRow:
    """Derived quantities of one (model, GPU, link) combination; times in seconds."""

    model: str
    gpu: str
    link_gbps: float
    params: int
    gradient_bytes: int
    batch_size: int
    images_per_s: float
    compute_s: float
    ina_comm_s: float
    ring_comm_s: float
    ring_factor: float
    comm_ratio: float
    ina_comm_ratio: float
    speedup_ina_no_overlap: float
    speedup_zero_comm_bound: float
    source: str
    note: str


def default_models_path() -> Path:
    """The packaged input table."""
    return Path(str(resources.files("panama") / "data" / "models.csv"))


def parse_legend(text: str) -> dict[str, str]:
    """Citations from comment lines ``#  [KEY]  text`` (continued by indented ``#`` lines)."""
    legend: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if not line.startswith("#"):
            current = None
            continue
        body = line[1:]
        m = re.match(r"\s*\[([A-Za-z0-9_-]+)\]\s+(.*)", body)
        if m:
            current = m.group(1)
            legend[current] = m.group(2).strip()
        elif current and body.startswith("       ") and body.strip():
            legend[current] += " " + body.strip()
        else:
            current = None
    return legend


def load_models(path: str | Path | None = None) -> tuple[list[ModelRow], dict[str, str]]:
    """Read a models table (CSV; ``#`` lines are comments). Returns rows and source legend.

    Raises :class:`ModelTableError` naming the row and column of the first bad value.
    """
    p = Path(path) if path is not None else default_models_path()
    try:
        text = p.read_text()
    except OSError as exc:
        raise ModelTableError("models", f"cannot read {p}: {exc.strerror or exc}") from exc
    legend = parse_legend(text)
    data_lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(data_lines)))
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ModelTableError(missing[0], f"column missing from {p}")
    rows = []
    for i, raw in enumerate(reader, start=1):
        where = f"row {i}"
        model = (raw.get("model") or "").strip()
        gpu = (raw.get("gpu") or "").strip()
        if not model:
            raise ModelTableError(f"{where}: model", "empty value")
        if not gpu:
            raise ModelTableError(f"{where}: gpu", "empty value")
        rows.append(
            ModelRow(
                model=model,
                gpu=gpu,
                link_gbps=_number(raw, where, "link_gbps", float),
                params=_number(raw, where, "params", int),
                batch_size=_number(raw, where, "batch_size", int),
                images_per_s=_number(raw, where, "images_per_s", float),
                bytes_per_param=_number(raw, where, "bytes_per_param", int, default=4),
                throughput_batch=_number(raw, where, "throughput_batch", int),
                source=(raw.get("source") or "").strip(),
                param_source=(raw.get("param_source") or "").strip(),
                note=(raw.get("note") or "").strip(),
            )
        )
    if not rows:
        raise ModelTableError("models", f"no data rows in {p}")
    return rows, legend


def _number(raw: dict[str, str | None], where: str, col: str, kind: type, default: Any = None) -> Any:
    """A positive finite number from column ``col``; empty optional columns give ``default``."""
    value = (raw.get(col) or "").strip()
    if value == "":
        if default is not None or col in OPTIONAL_COLUMNS:
            return default
        raise ModelTableError(f"{where}: {col}", "empty value")
    try:
        x = kind(float(value)) if kind is int else kind(value)
    except ValueError as exc:
        raise ModelTableError(f"{where}: {col}", f"not a number: {value!r}") from exc
    if not (x > 0 and math.isfinite(x)):
        raise ModelTableError(f"{where}: {col}", f"must be > 0, got {value!r}")
    return x


def ring_factor(workers: int | None) -> float:
    """Bytes a worker sends in ring allreduce per gradient byte: ``2 (N-1)/N``; 2 if ``N`` is None."""
    if workers is None:
        return 2.0
    if workers < 2:
        raise ValueError("workers must be >= 2")
    return 2.0 * (workers - 1) / workers


def compute_ratios(
    rows: Sequence[ModelRow],
    *,
    workers: int | None = None,
    link_gbps: Sequence[float] | None = None,
) -> list[RatioRow]:
    """Derived table; with ``link_gbps`` every row is evaluated at each listed bandwidth."""
    f = ring_factor(workers)
    out = []
    for row in rows:
        for gbps in link_gbps or [row.link_gbps]:
            grad = row.params * row.bytes_per_param
            compute = row.batch_size / row.images_per_s
            ina = grad * 8 / (gbps * 1e9)
            ring = f * ina
            ratio = ring / (ring + compute)
            out.append(
                RatioRow(
                    model=row.model,
                    gpu=row.gpu,
                    link_gbps=float(gbps),
                    params=row.params,
                    gradient_bytes=grad,
                    batch_size=row.batch_size,
                    images_per_s=row.images_per_s,
                    compute_s=compute,
                    ina_comm_s=ina,
                    ring_comm_s=ring,
                    ring_factor=f,
                    comm_ratio=ratio,
                    ina_comm_ratio=ina / (ina + compute),
                    speedup_ina_no_overlap=(compute + ring) / (compute + ina),
                    speedup_zero_comm_bound=(compute + ring) / compute,
                    source=row.source,
                    note=row.note,
                )
            )
    return out


def summarise(table: Sequence[RatioRow]) -> dict[str, Any]:
    """Ranges of the ratio and speed-up per (GPU, link) and overall."""
    groups: dict[str, list[RatioRow]] = {}
    for r in table:
        groups.setdefault(f"{r.gpu}@{r.link_gbps:g}Gbps", []).append(r)

    def rng(rs: Sequence[RatioRow]) -> dict[str, float]:
        return {
            "comm_ratio_min": min(r.comm_ratio for r in rs),
            "comm_ratio_max": max(r.comm_ratio for r in rs),
            "speedup_min": min(r.speedup_ina_no_overlap for r in rs),
            "speedup_max": max(r.speedup_ina_no_overlap for r in rs),
        }

    return {"by_gpu": {k: rng(v) for k, v in groups.items()}, "overall": rng(table)}


def format_table(table: Sequence[RatioRow]) -> str:
    """Terminal table."""
    rows = [
        (
            r.model,
            r.gpu,
            f"{r.link_gbps:g}",
            f"{r.gradient_bytes / 1e6:.1f}",
            f"{r.compute_s * 1e3:.1f}",
            f"{r.ring_comm_s * 1e3:.1f}",
            f"{r.ina_comm_s * 1e3:.1f}",
            f"{r.comm_ratio:.2f}",
            f"{r.speedup_ina_no_overlap:.2f}",
        )
        for r in table
    ]
    headers = ("model", "gpu", "link Gb/s", "grad MB", "compute ms", "ring ms", "INA ms", "ratio", "speedup")
    return draw_table(rows, headers, align="llrrrrrrr")


def plot(table: Sequence[RatioRow], path: Path) -> None:
    """Two panels: (a) communication ratio, (b) speed-up, grouped by model, one bar per GPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(r.model for r in table))
    configs = list(dict.fromkeys(f"{r.gpu} {r.link_gbps:g} Gbps" for r in table))
    lookup = {(r.model, f"{r.gpu} {r.link_gbps:g} Gbps"): r for r in table}
    x = np.arange(len(models))
    width = 0.8 / max(1, len(configs))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, attr, label in (
        (axes[0], "comm_ratio", "communication / (communication + compute)"),
        (axes[1], "speedup_ina_no_overlap", "expected speed-up of in-network aggregation"),
    ):
        for j, cfg in enumerate(configs):
            vals = [getattr(lookup[(m, cfg)], attr) if (m, cfg) in lookup else np.nan for m in models]
            ax.bar(x + (j - (len(configs) - 1) / 2) * width, vals, width, label=cfg)
        ax.set_xticks(x, models, rotation=20)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title("(a) share of iteration time spent in ring allreduce")
    axes[1].set_title("(b) single-job speed-up, no overlap")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


CSV_COLUMNS = [f for f in RatioRow.__dataclass_fields__]


def run_comm_ratio(
    out_dir: str | Path,
    *,
    models_path: str | Path | None = None,
    workers: int | None = None,
    link_gbps: Sequence[float] | None = None,
    make_plot: bool = True,
) -> dict[str, Any]:
    """Compute the table and write ``comm_ratio.csv``, ``summary.json``, ``models_used.csv``
    and ``comm_ratio.png`` (unless ``make_plot`` is false) into ``out_dir``; return the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(models_path) if models_path is not None else default_models_path()
    rows, legend = load_models(src)
    table = compute_ratios(rows, workers=workers, link_gbps=link_gbps)
    with open(out / "comm_ratio.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in table:
            w.writerow(asdict(r))
    (out / "models_used.csv").write_text(src.read_text())
    summary = {
        "experiment": "comm-ratio",
        "config": {
            "models": str(src),
            "workers": workers,
            "ring_factor": ring_factor(workers),
            "link_gbps_override": list(link_gbps) if link_gbps else None,
        },
        "sources": legend,
        "ranges": summarise(table),
        "rows": [asdict(r) for r in table],
        "files": {"table": "comm_ratio.csv", "plot": "comm_ratio.png" if make_plot else None},
    }
    write_json_atomic(out / "summary.json", summary)
    if make_plot:
        plot(table, out / "comm_ratio.png")
    summary["table_text"] = format_table(table)
    return summary
