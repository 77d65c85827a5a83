"""``panama demo``: a few-minute tour of the two halves of PANAMA-py.

1. The ``jobs-dominated`` shared-cluster preset (the regime where in-network aggregation
   can help short flows: the jobs carry most of the bytes), simulated under ``ring`` and
   ``panama`` and once without any job (the floor: what no scheme can beat), same flows,
   same placement, same seed: short-flow FCT, with the number of flows, and large-job
   training time.
2. ``panama train`` (:func:`panama.training.run.train`) of the reference LeNet with
   the gradients summed by PANAMA switch daemons on 127.0.0.1, and once more with stock
   DDP on gloo (``allreduce="gloo"``): same data, seed and steps, so the replicas'
   parameters must come out bitwise equal (with two workers a sum has one rounding).

Writes ``<out>/shared-cluster/`` (the experiment's usual outputs), ``train-panama.json``,
``train-gloo.json`` and ``demo.json`` (the headline numbers, read by
``panama experiment report --demo``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from panama.experiments.schemes import FLOOR, FLOOR_LABEL, GAIN_TEXT
from panama.experiments.shared_cluster import SharedClusterResult, run_shared_cluster
from panama.experiments.sweep import write_json_atomic
from panama.tables import format_table

# What the demo records of each scheme's run (the floor: the same without the training time).
_SCHEME_KEYS = ("short_fct_p99_us", "short_fct_mean_us", "large_job_training_time_s", "short_flows", "bytes_total")
#: demo.json's gains against ring (ring / scheme, higher is better): its key -> the experiment's summary key.
GAINS = {
    "short_fct_p99_gain": "short_fct_p99_us_gain",
    "short_fct_mean_gain": "short_fct_mean_us_gain",
    "large_job_training_time_gain": "large_job_training_time_s_gain",
    "bytes_gain": "bytes_total_gain",
}


def _gain(st: dict[str, Any], key: str) -> float | None:
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
    preset: str = "jobs-dominated",
    echo: Callable[[str], None] = print,
    progress: bool = True,
    command: str | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the ``demo.json`` dict plus ``table_text`` (the headline table)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    echo(f"[demo] 1/2 simulating the {preset} shared cluster under ring, panama and without jobs (seed {seed}) ...")
    sim = run_shared_cluster(
        out / "shared-cluster",
        preset=preset,
        schemes=["ring", "panama"],
        axes={"seed": [seed]},
        jobs=jobs,
        progress=progress,
        command=command,
        floor=True,
    )
    demo: dict[str, Any] = {
        "command": command,
        "simulation": _simulation_record(out, sim, preset, seed),
        "train": None,
    }
    if train:
        demo["train"] = _train_both(out, workers, epochs, echo)
    write_json_atomic(out / "demo.json", demo)
    demo["table_text"] = format_demo(demo)
    return demo


def _simulation_record(out: Path, sim: SharedClusterResult, preset: str, seed: int) -> dict[str, Any]:
    """``demo.json``'s ``simulation``: panama's gains against ring (ring / panama, higher is
    better), both schemes' and the floor's numbers (the floor's gains too), plots."""
    st = sim.summary["schemes"]["panama"]
    ring = sim.summary["schemes"]["ring"]
    floor = sim.summary["schemes"][FLOOR]
    floor_keys = ("short_fct_p99_us", "short_fct_mean_us", "short_flows", "bytes_total")
    return {
        "out_dir": str(out / "shared-cluster"),
        **{key: _gain(st, summary_key) for key, summary_key in GAINS.items()},
        "ring": {k: ring.get(k) for k in _SCHEME_KEYS},
        "panama": {k: st.get(k) for k in _SCHEME_KEYS},
        "floor": {k: floor.get(k) for k in floor_keys}
        | {key: _gain(floor, summary_key) for key, summary_key in GAINS.items() if "training" not in key},
        "preset": preset,
        "seed": seed,
        "plots": [
            str(out / "shared-cluster" / v) for v in sim.summary.get("files", {}).values() if str(v).endswith(".png")
        ],
    }


def _train_both(out: Path, workers: int, epochs: int, echo: Callable[[str], None]) -> dict[str, Any]:
    """``demo.json``'s ``train``: LeNet trained with panama's allreduce and with DDP on gloo, and
    whether the two end with bitwise-equal parameters."""
    from panama.training.run import TrainConfig
    from panama.training.run import train as run_train

    results = {}
    for name, mode in (("panama", "panama"), ("gloo", "gloo")):
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
            "parameter_sha256": res.parameter_sha256[0],
            "total_seconds": res.total_seconds,
            "file": str(out / f"train-{name}.json"),
        }
    results["parameters_bitwise_equal"] = results["panama"]["parameter_sha256"] == results["gloo"]["parameter_sha256"]
    return results


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _row(s: dict[str, Any], label: str, key: str, spec: str, gain_key: str, scale: float = 1.0) -> tuple:
    """One metric: ring's, panama's and the floor's values, panama's gain and the floor's."""
    fl = s.get("floor") or {}

    def value(v: Any) -> str:
        return _fmt(None if v is None else v / scale, spec)

    return (
        label,
        value(s["ring"].get(key)),
        value(s["panama"].get(key)),
        value(fl.get(key)),
        _fmt(s.get(gain_key), ".2f"),
        _fmt(fl.get(gain_key), ".2f"),
    )


def format_demo(demo: dict[str, Any]) -> str:
    """The headline table printed by ``panama demo``."""
    s = demo["simulation"]
    preset = s.get("preset", "quick")
    lines = [
        f"PANAMA demo: panama vs ring on one simulated shared cluster ({preset} preset"
        + (": the jobs carry most of the bytes" if preset == "jobs-dominated" else "")
        + f", seed {s.get('seed')}), same flows and seed, and the same flows without any job "
        "(the floor no scheme can beat)",
        "",
        format_table(
            [
                _row(s, "short-flow FCT p99 (µs)", "short_fct_p99_us", ".1f", "short_fct_p99_gain"),
                _row(s, "short-flow FCT mean (µs)", "short_fct_mean_us", ".1f", "short_fct_mean_gain"),
                _row(
                    s,
                    "large-job training time (s, simulated)",
                    "large_job_training_time_s",
                    ".4f",
                    "large_job_training_time_gain",
                ),
                _row(s, "network bytes (MB, every link; gain: x fewer)", "bytes_total", ".1f", "bytes_gain", 1e6),
            ],
            ("metric", "ring", "panama", FLOOR_LABEL, "panama gain", "floor gain"),
            indent="  ",
        ),
        (
            f"  ({GAIN_TEXT}. One seed, {_fmt(s['ring']['short_flows'], '.0f')} short flows < 100 KB per run. "
            "Five seeds with confidence intervals, the source's reaction (panama-or) beside: "
            f"panama experiment shared-cluster --preset {preset}; where the jobs do not dominate the fabric, "
            "the floor and every scheme stay close to ring: --preset paper)"
        ),
    ]
    t = demo.get("train")
    if t:
        p, g = t["panama"], t["gloo"]
        lines += [
            "",
            f"Real training through PANAMA switch daemons (LeNet on {p['dataset']}, {p['workers']} workers, "
            f"{p['epochs']} epochs), against stock DDP on gloo with the same data, seed and steps:",
            (
                f"  test accuracy {p['final_test_accuracy']:.4f} (panama) and {g['final_test_accuracy']:.4f} (gloo); "
                f"parameters bitwise equal: {t['parameters_bitwise_equal']}; replicas identical: "
                f"{p['replicas_identical']}; {p['total_seconds']:.1f} s and {g['total_seconds']:.1f} s"
            ),
        ]
    lines += ["", "Plots: " + ", ".join(s["plots"])]
    if t:
        lines.append("Training logs: " + ", ".join(v["file"] for v in (t["panama"], t["gloo"])))
    return "\n".join(lines)
