"""Settings and results of a training run (:class:`TrainConfig`, :class:`TrainResult`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from panama.settings import Settings

ALLREDUCE_MODES = ("panama", "gloo", "local")
STATUS_INTERVAL_S = 5.0
EVAL_BATCH = 1024

BYTES_SOURCE = {
    "panama": "measured: UDP payload bytes sent by the worker's communicator (PANAMA headers, float32 payload, "
    "retransmissions)",
    "gloo": "measured: TCP payload bytes sent by the worker's gloo sockets (tcp_info.tcpi_bytes_sent)",
    "gloo-model": "model: ring allreduce, 2(W-1)/W x gradient bytes per step (kernel reports no TCP byte count)",
    "local": "none: all replicas live in one process, nothing crosses a network",
}


class TrainingError(RuntimeError):
    """Training could not complete (a worker failed or went silent); the message names the rank."""


class TrainConfig(Settings):
    """What ``panama train`` runs; its options are these fields (``--field-name``), and a bad
    value is a :class:`~panama.settings.SettingsError` naming the field."""

    workers: int = Field(2, ge=1, le=64, description="Data-parallel workers W (processes, or replicas for local).")
    epochs: int = Field(5, ge=1, le=100_000, description="Passes over the training set.")
    batch_size: int = Field(64, ge=1, description="Global minibatch B, split across the workers.")
    lr: float = Field(0.1, gt=0.0, allow_inf_nan=False, description="SGD learning rate.")
    seed: int = Field(0, ge=0, lt=2**63, description="Seed of initialisation and batch order.")
    data_dir: Path | None = Field(
        None,
        description="Directory with Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz], ...) "
        "[default: sklearn digits].",
    )
    allreduce: Literal["panama", "gloo", "local"] = Field(
        "panama", description="Gradient sum: PANAMA switch daemons, gloo (host-based), or W replicas in one process."
    )
    controller: str | None = Field(
        None,
        description="HOST:PORT of a running controller for --allreduce panama (its token from $PANAMA_TOKEN) "
        "[default: a local cluster for the run].",
    )
    job: str | None = Field(None, description="Job name at the controller (panama) [default: unique].")
    threads: int = Field(1, ge=1, le=256, description="torch intra-op threads per worker.")
    init: Literal["he", "reference"] = Field(
        "he", description="Weight init: He normal, or the reference's N(0, 0.01^2)."
    )
    timeout_s: float = Field(
        120.0, gt=0.0, allow_inf_nan=False, description="Longest silence tolerated from a worker (s)."
    )

    @field_validator("batch_size")
    @classmethod
    def _batch_covers_workers(cls, v: int, info: Any) -> int:
        workers = info.data.get("workers")
        if workers is not None and v < workers:
            raise ValueError(f"must be >= workers ({workers}) so that every worker gets at least one example")
        return v

    @field_validator("controller")
    @classmethod
    def _controller_addr(cls, v: str | None, info: Any) -> str | None:
        if v is None:
            return v
        if info.data.get("allreduce") != "panama":
            raise ValueError("only meaningful with allreduce=panama")
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT, got {v!r}")
        return v

    @field_validator("job")
    @classmethod
    def _job_name(cls, v: str | None) -> str | None:
        if v is not None and (not v or "/" in v or len(v) > 100):
            raise ValueError("must be 1 to 100 characters without '/'")
        return v


@dataclass
class EpochStats:
    """One row of the per-epoch table."""

    epoch: int  # 1-based
    steps: int  # optimizer steps in the epoch
    train_loss: float  # mean cross-entropy over the epoch's training examples (all workers)
    test_accuracy: float  # fraction in [0, 1], replica 0 after the epoch
    seconds: float  # wall time of the epoch's training pass (slowest worker), evaluation excluded
    bytes_sent_per_worker: float  # mean over workers; see TrainResult.bytes_sent_source
    tcp_bytes_sent_per_worker: float | None = None  # host-based (gloo TCP) bytes, measured; None if unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "steps": self.steps,
            "train_loss": self.train_loss,
            "test_accuracy": self.test_accuracy,
            "seconds": self.seconds,
            "bytes_sent_per_worker": self.bytes_sent_per_worker,
            "tcp_bytes_sent_per_worker": self.tcp_bytes_sent_per_worker,
        }


@dataclass
class TrainResult:
    """Outcome of :func:`train`; :meth:`to_dict` is the JSON written by ``panama train``."""

    config: TrainConfig
    dataset: str
    dataset_source: str
    num_train: int
    num_test: int
    num_parameters: int
    epochs: list[EpochStats]
    replicas_identical: bool
    parameter_sha256: list[str]  # one per replica/rank
    total_seconds: float
    controller: str | None = None
    job: str | None = None
    communicator_stats: list[dict[str, Any]] | None = None
    parameters: torch.Tensor | None = field(default=None, repr=False)  # replica 0, flat float32

    @property
    def final_test_accuracy(self) -> float:
        return self.epochs[-1].test_accuracy if self.epochs else float("nan")

    bytes_source_key: str | None = None  # key of BYTES_SOURCE; default: the allreduce mode

    @property
    def bytes_sent_source(self) -> str:
        return BYTES_SOURCE[self.bytes_source_key or self.config.allreduce]

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.model_dump(mode="json"),
            "dataset": {
                "name": self.dataset,
                "source": self.dataset_source,
                "num_train": self.num_train,
                "num_test": self.num_test,
            },
            "model": {
                "name": "lenet",
                "num_parameters": self.num_parameters,
                "gradient_bytes": 4 * self.num_parameters,
            },
            "epochs": [e.to_dict() for e in self.epochs],
            "final_test_accuracy": self.final_test_accuracy,
            "replicas_identical": self.replicas_identical,
            "parameter_sha256": self.parameter_sha256,
            "bytes_sent_source": self.bytes_sent_source,
            "total_seconds": self.total_seconds,
            "controller": self.controller,
            "job": self.job,
            "communicator_stats": self.communicator_stats,
        }

    def write_json(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def default_out_path(config: TrainConfig) -> Path:
    """``runs/train/<dataset>-<allreduce>-w<W>-seed<seed>.json`` under the working directory."""
    dataset = "digits" if config.data_dir is None else "fashion-mnist"
    return Path("runs") / "train" / f"{dataset}-{config.allreduce}-w{config.workers}-seed{config.seed}.json"


def format_bytes(n: float) -> str:
    """``1.23 MB`` style (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
