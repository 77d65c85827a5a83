"""The shared-cluster experiment's scenario: schemes, presets, the job mix, and sweep parameters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panama.core.controller import DEFAULT_THRESHOLD_BYTES
from panama.experiments.comm_ratio import load_models
from panama.experiments.schemes import DEFAULT_PRESET
from panama.sim.diagnostics import SHORT_BUCKETS as DIAGNOSTIC_BUCKETS

#: Short-flow size buckets reported on their own (the simulator's, key, label, [low, high)
#: bytes): queueing dominates the tiny ones, bandwidth the larger ones, and a pooled p99
#: hides which.
SHORT_BUCKETS = DIAGNOSTIC_BUCKETS
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

#: Metrics compared with ring as gains, ring / scheme (each is lower-is-better, so a gain
#: above 1 is better); the name says what it once was: the metrics normalised to ring.
NORMALISED = (
    "short_fct_mean_us",
    "short_fct_p99_us",
    "large_flow_fct_mean_us",
    "large_flow_fct_p99_us",
    "fct_mean_us",
    "large_job_training_time_s",
    "small_job_training_time_s",
    "bytes_total",
    *(f"short_fct_p99_us_{key}" for key, _, _, _ in SHORT_BUCKETS),
)


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

#: The paper-scale mix (128 hosts): four 16-worker jobs above the 40 MB threshold and four
#: 8-worker ones below it; 96 workers, each on its own host (``placement = "disjoint"``).
PAPER_JOB_MIX = (
    JobTemplate("vgg16", 16, model="VGG-16"),
    JobTemplate("alexnet", 16, model="AlexNet", start_ms=100.0),
    JobTemplate("resnet152", 16, model="ResNet-152", start_ms=200.0),
    JobTemplate("resnet50", 16, model="ResNet-50", start_ms=300.0),
    JobTemplate("rl-policy", 8, params=2_000_000, compute_ms=60.0, start_ms=50.0),
    JobTemplate("kmeans", 8, params=5_000_000, compute_ms=120.0, start_ms=150.0),
    JobTemplate("ctr", 8, params=8_000_000, compute_ms=80.0, start_ms=250.0),
    JobTemplate("lstm", 8, params=3_000_000, compute_ms=40.0, start_ms=350.0),
)

PRESETS: dict[str, dict[str, Any]] = {  # keyed by schemes.PRESET_NAMES (tests/experiments/test_presets.py)
    # simulated ms of background traffic, iterations of the large jobs, load, scale
    "full": {"duration_ms": 40.0, "iterations": 4, "load": 0.3, "scale": 0.005, "topology": "fat-tree:k=4"},
    "quick": {
        "duration_ms": 20.0,
        "iterations": 3,
        "load": 0.3,
        "scale": 0.005,
        "topology": "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4",
    },
    # paper scale: k=8 fat-tree (128 hosts) at 10 Gbps, every worker on its own host, gradients
    # and compute times at 1/40 (an iteration of VGG-16 takes about 30 ms instead of 1.2 s, so
    # several fit the window; the bytes per second each job offers stay those of the real job)
    "paper": {
        "duration_ms": 150.0,
        "iterations": 3,
        "load": 0.3,
        "scale": 0.025,
        "topology": "fat-tree:k=8",
        "placement": "disjoint",
        "jobs": PAPER_JOB_MIX,
        "seeds": (1, 2, 3, 4, 5),  # the default seeds of a run of this preset (at least 2,000 short flows each)
    },
    # the regime where the claim can live: the paper cluster, the same jobs, and background
    # traffic that is only latency-sensitive short flows (web-search sizes cut at 100 KB:
    # queries and RPCs, no background bulk) at load 0.1, so the jobs carry about 95 % of
    # ring's bytes and removing them improves the short-flow p99 about 5x (docs/experiments.md)
    "jobs-dominated": {
        "duration_ms": 150.0,
        "iterations": 3,
        "load": 0.1,
        "max_flow_bytes": 100_000,
        "scale": 0.025,
        "topology": "fat-tree:k=8",
        "placement": "disjoint",
        "jobs": PAPER_JOB_MIX,
        "seeds": (1, 2, 3, 4, 5),
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


def experiment_scenario(preset: str = DEFAULT_PRESET, *, models_path: str | Path | None = None):
    """The built-in shared-cluster scenario for ``preset`` (``paper``, ``jobs-dominated``, ``full``,
    ``quick`` or ``tiny``).

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
    for t in p.get("jobs", JOB_MIX):
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
        placement=p.get("placement", "random"),
        background=BackgroundConfig(
            workload=p.get("workload", "web-search"), load=p["load"], max_flow_bytes=p.get("max_flow_bytes")
        ),
        panama=PanamaConfig(threshold_bytes=round(REAL_THRESHOLD_BYTES * scale)),
        jobs=jobs,
    )


def seed_axis(preset: str, base_seed: int, *, from_preset: bool) -> list[int]:
    """The seeds of a run given no seed axis: the preset's own (``PRESETS[p]["seeds"]``,
    paper: 1-5) when the scenario is the preset's, else the scenario's one seed."""
    if from_preset and "seeds" in PRESETS[preset]:
        return list(PRESETS[preset]["seeds"])
    return [base_seed]


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
