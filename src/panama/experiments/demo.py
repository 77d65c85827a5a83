"""``panama demo``: a few-minute tour of the two halves of PANAMA-py.

1. The quick shared-cluster preset, simulated under ``ring`` and ``panama`` (same flows,
   same placement, same seed): short-flow FCT and large-job training time.
2. ``panama train`` (:func:`panama.runtime.training.train`) of the reference LeNet with
   the gradients summed by PANAMA switch daemons on 127.0.0.1, and once more with an
   in-process sum (``allreduce="local"``) as the accuracy reference.

Writes ``<out>/shared-cluster/`` (the experiment's usual outputs), ``train-panama.json``,
``train-reference.json`` and ``demo.json`` (the headline numbers, read by
``panama experiment report --demo``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from panama.experiments.shared_cluster import run_shared_cluster
from panama.experiments.sweep import write_json_atomic
from panama.tables import format_table


def _ratio(st: dict[str, Any], key: str) -> float | None:
    v = st.get(key)
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def run_demo(
    out_dir: str | Path,
    *,
    train: bool = True,
    epochs: int = 2,
    workers: int = 2,
    jobs: int | None = None,
    seed: int = 1,
    preset: str = "quick",
    echo: Callable[[str], None] = print,
    progress: bool = True,
    command: str | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the ``demo.json`` dict plus ``table_text`` (the headline table)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    echo(f"[demo] 1/2 simulating the {preset} shared cluster under ring and panama (seed {seed}) ...")
    sim = run_shared_cluster(
        out / "shared-cluster",
        preset=preset,
        schemes=["ring", "panama"],
        axes={"seed": [seed]},
        jobs=jobs,
        progress=progress,
        command=command,
        floor=False,  # the demo compares two schemes; the experiment itself runs the floor
    )
    st = sim.summary["schemes"]["panama"]
    ring = sim.summary["schemes"]["ring"]
    demo: dict[str, Any] = {
        "command": command,
        "simulation": {
            "out_dir": str(out / "shared-cluster"),
            "short_fct_p99_ratio": _ratio(st, "short_fct_p99_us_norm"),
            "short_fct_mean_ratio": _ratio(st, "short_fct_mean_us_norm"),
            "large_job_training_time_ratio": _ratio(st, "large_job_training_time_s_norm"),
            "bytes_ratio": _ratio(st, "bytes_total_norm"),
            "ring": {
                k: ring.get(k)
                for k in (
                    "short_fct_p99_us",
                    "short_fct_mean_us",
                    "large_job_training_time_s",
                    "short_flows",
                    "bytes_total",
                )
            },
            "panama": {
                k: st.get(k)
                for k in (
                    "short_fct_p99_us",
                    "short_fct_mean_us",
                    "large_job_training_time_s",
                    "short_flows",
                    "bytes_total",
                )
            },
            "plots": [
                str(out / "shared-cluster" / v)
                for v in sim.summary.get("files", {}).values()
                if str(v).endswith(".png")
            ],
        },
        "train": None,
    }
    if train:
        from panama.runtime.training import TrainConfig
        from panama.runtime.training import train as run_train

        results = {}
        for name, mode in (("panama", "panama"), ("reference", "local")):
            echo(f"[demo] 2/2 training LeNet, {workers} workers, {epochs} epochs, allreduce={mode} ...")
            cfg = TrainConfig(workers=workers, epochs=epochs, allreduce=mode, seed=0)
            res = run_train(cfg, on_status=lambda line: echo(f"[demo]   {line}"))
            res.write_json(out / f"train-{name}.json")
            results[name] = {
                "allreduce": mode,
                "workers": workers,
                "epochs": epochs,
                "dataset": res.dataset,
                "final_test_accuracy": res.final_test_accuracy,
                "test_accuracy_by_epoch": [e.test_accuracy for e in res.epochs],
                "replicas_identical": res.replicas_identical,
                "total_seconds": res.total_seconds,
                "file": str(out / f"train-{name}.json"),
            }
        demo["train"] = results
    write_json_atomic(out / "demo.json", demo)
    demo["table_text"] = format_demo(demo)
    return demo


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _mb(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.1f}"


def format_demo(demo: dict[str, Any]) -> str:
    """The headline table printed by ``panama demo``."""
    s = demo["simulation"]
    lines = [
        "PANAMA demo: panama vs ring on one simulated shared cluster (same flows, same seed)",
        "",
        format_table(
            [
                (
                    "short-flow FCT p99 (µs)",
                    _fmt(s["ring"]["short_fct_p99_us"], ".1f"),
                    _fmt(s["panama"]["short_fct_p99_us"], ".1f"),
                    _fmt(s["short_fct_p99_ratio"], ".2f"),
                ),
                (
                    "short-flow FCT mean (µs)",
                    _fmt(s["ring"]["short_fct_mean_us"], ".1f"),
                    _fmt(s["panama"]["short_fct_mean_us"], ".1f"),
                    _fmt(s["short_fct_mean_ratio"], ".2f"),
                ),
                (
                    "large-job training time (s, simulated)",
                    _fmt(s["ring"]["large_job_training_time_s"], ".4f"),
                    _fmt(s["panama"]["large_job_training_time_s"], ".4f"),
                    _fmt(s["large_job_training_time_ratio"], ".2f"),
                ),
                (
                    "network bytes (MB, every link)",
                    _mb(s["ring"].get("bytes_total")),
                    _mb(s["panama"].get("bytes_total")),
                    _fmt(s["bytes_ratio"], ".2f"),
                ),
            ],
            ("metric", "ring", "panama", "panama/ring"),
            indent="  ",
        ),
        (
            f"  (one seed, short flows < 100 KB: {_fmt(s['ring']['short_flows'], '.0f')} per run; ratios below 1 "
            f"favour "
            "panama; several seeds with confidence intervals: panama experiment shared-cluster --quick --seeds 1,2,3,4)"
        ),
    ]
    t = demo.get("train")
    if t:
        p, r = t["panama"], t["reference"]
        lines += [
            "",
            f"Real training through PANAMA switch daemons (LeNet on {p['dataset']}, {p['workers']} workers, "
            f"{p['epochs']} epochs):",
            (
                f"  test accuracy {p['final_test_accuracy']:.4f} with in-network aggregation, "
                f"{r['final_test_accuracy']:.4f} with an in-process sum; replicas identical: "
                f"{p['replicas_identical']}; "
                f"{p['total_seconds']:.1f} s"
            ),
        ]
    lines += ["", "Plots: " + ", ".join(s["plots"])]
    if t:
        lines.append("Training logs: " + ", ".join(v["file"] for v in t.values()))
    return "\n".join(lines)
