"""Data-parallel training of the reference LeNet with a pluggable gradient allreduce.

One training step, identical in every mode (d2l §13.5, data parallelism):

1. the global minibatch (``batch_size`` examples, drawn by a generator seeded from
   ``seed``, identical on every worker) is split into ``workers`` near-equal shards
   (``torch.tensor_split``); a final batch with fewer than ``workers`` examples is dropped;
2. each worker runs forward and backward on its shard only;
3. the gradients are summed over workers (``allreduce``):

   - ``local``: one process holds ``workers`` model replicas and sums their gradients
     into the first replica then copies the sum back, as the reference does;
   - ``gloo``: ``workers`` processes, stock ``DistributedDataParallel`` over a gloo process
     group on 127.0.0.1 (the host-based baseline);
   - ``panama``: the same DDP model with :func:`~panama.distributed.ddp_hook.register_panama_hook`:
     gradients travel through the PANAMA switch daemons via :class:`panama.Communicator`
     (a :class:`~panama.runtime.cluster.LocalCluster` is started for the run when no
     ``controller`` is given);

4. every replica applies the same SGD step with the gradient of the *global* batch's
   summed loss divided by its size, so replicas stay bitwise identical.

In ``local`` mode each replica backpropagates its shard's summed loss and the step is
``p -= lr / B * sum_of_gradients`` (the reference). DDP averages over ranks, so there each
rank backpropagates ``W / B`` times its shard's summed loss: the same update, up to
float32 rounding order.

At the end the SHA-256 of every replica's raw parameter bytes is compared;
:attr:`TrainResult.replicas_identical` says whether they are all equal.

Worker processes are started by a fork server (:func:`worker_context`), meet in
a gloo process group through a ``FileStore`` in a private temporary directory, and report
to the parent over a queue. Every wait is bounded by ``timeout_s`` of silence; a failure
names the rank and carries its traceback.
"""

from __future__ import annotations

import copy
import os
import queue as queue_mod
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.nn import functional as F

from panama.core.errors import FieldError
from panama.runtime.control.tokens import new_token
from panama.training.config import (
    ALLREDUCE_MODES,
    BYTES_SOURCE,
    EpochStats,
    TrainConfig,
    TrainingError,
    TrainResult,
    default_out_path,
    format_bytes,
)
from panama.training.data import Dataset, load_dataset
from panama.training.models import flat_parameters, make_lenet, num_parameters, parameter_digest
from panama.training.steps import (
    TcpByteCounter,
    _Status,
    _torch_threads,
    epoch_batches,
    evaluate_accuracy,
    reference_allreduce,
    ring_bytes_per_worker,
    seed_generators,
    shard,
)
from panama.training.worker import _status_text, _worker_entry, worker_context

__all__ = [
    "ALLREDUCE_MODES",
    "BYTES_SOURCE",
    "EpochStats",
    "TcpByteCounter",
    "TrainConfig",
    "TrainResult",
    "TrainingError",
    "default_out_path",
    "epoch_batches",
    "evaluate_accuracy",
    "format_bytes",
    "reference_allreduce",
    "ring_bytes_per_worker",
    "seed_generators",
    "shard",
    "train",
    "worker_context",
]


# --------------------------------------------------------------------------- local mode


def _train_local(
    cfg: TrainConfig,
    data: Dataset,
    on_epoch: Callable[[EpochStats], None] | None,
    on_status: Callable[[str], None] | None,
) -> TrainResult:
    start = time.perf_counter()
    workers = cfg.workers
    init_rng, shuffle_rng = seed_generators(cfg.seed)
    base = make_lenet(init_rng, cfg.init)
    replicas = [copy.deepcopy(base) for _ in range(workers)]
    params = [list(m.parameters()) for m in replicas]
    status = _Status(None if on_status is None else lambda s: on_status(_status_text(s)))
    x, y = data.train_images, data.train_labels
    epochs: list[EpochStats] = []
    with _torch_threads(cfg.threads):
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.perf_counter()
            batches = epoch_batches(data.num_train, cfg.batch_size, workers, shuffle_rng)
            loss_sum, seen = 0.0, 0
            for step, batch in enumerate(batches):
                for rank, model in enumerate(replicas):
                    idx = shard(batch, workers, rank)
                    model.zero_grad(set_to_none=False)
                    loss = F.cross_entropy(model(x[idx]), y[idx], reduction="sum")
                    loss.backward()
                    loss_sum += float(loss.detach())
                    seen += idx.numel()
                with torch.no_grad():
                    for i in range(len(params[0])):
                        reference_allreduce([params[r][i].grad for r in range(workers)])
                    scale = cfg.lr / batch.numel()
                    for plist in params:
                        for p in plist:
                            p.sub_(p.grad, alpha=scale)
                status.step(epoch, step + 1, len(batches))
            seconds = time.perf_counter() - t0
            stats = EpochStats(
                epoch=epoch,
                steps=len(batches),
                train_loss=loss_sum / max(1, seen),
                test_accuracy=evaluate_accuracy(replicas[0], data.test_images, data.test_labels),
                seconds=seconds,
                bytes_sent_per_worker=0.0,
            )
            epochs.append(stats)
            if on_epoch is not None:
                on_epoch(stats)
    digests = [parameter_digest(m) for m in replicas]
    return TrainResult(
        config=cfg,
        dataset=data.name,
        dataset_source=data.source,
        num_train=data.num_train,
        num_test=data.num_test,
        num_parameters=num_parameters(base),
        epochs=epochs,
        replicas_identical=len(set(digests)) == 1,
        parameter_sha256=digests,
        total_seconds=time.perf_counter() - start,
        parameters=flat_parameters(replicas[0]),
    )


@contextmanager
def _controller_for(cfg: TrainConfig) -> Iterator[tuple[str | None, str | None]]:
    """(controller address, token) for a panama run: the configured one (token from
    $PANAMA_TOKEN), or a LocalCluster's."""
    if cfg.allreduce != "panama":
        yield None, None
    elif cfg.controller is not None:
        yield cfg.controller, None  # its token: $PANAMA_TOKEN
    else:
        from panama.runtime.cluster import ClusterError, LocalCluster

        # Default leaf-spine (2 leaves, 2 spines), grown so that every worker has a host.
        cluster = LocalCluster(leaves=2, spines=2, hosts_per_leaf=max(4, -(-cfg.workers // 2)))
        try:
            cluster.start()
        except ClusterError as exc:
            raise TrainingError(f"could not start a local PANAMA cluster: {exc}") from None
        try:
            yield cluster.controller, cluster.token
        finally:
            cluster.stop()


def _train_processes(
    cfg: TrainConfig,
    data: Dataset,
    on_epoch: Callable[[EpochStats], None] | None,
    on_status: Callable[[str], None] | None,
) -> TrainResult:
    start = time.perf_counter()
    workers = cfg.workers
    job = (cfg.job or f"train-{uuid.uuid4().hex[:10]}") if cfg.allreduce == "panama" else None
    run_token = new_token()  # the run's job token: its ranks are one run (a job name binds one)
    ctx = worker_context()
    if on_status is not None:
        cluster = " and a local PANAMA cluster" if cfg.allreduce == "panama" and cfg.controller is None else ""
        on_status(f"starting {workers} worker processes{cluster}")
    with tempfile.TemporaryDirectory(prefix="panama-train-") as tmpdir, _controller_for(cfg) as (controller, token):
        out_queue = ctx.Queue()
        settings = cfg.model_dump(mode="json")
        store_path = os.path.join(tmpdir, "gloo-store")
        procs = [
            ctx.Process(
                target=_worker_entry,
                args=(rank, settings, data, store_path, out_queue, controller, job, token, run_token),
                name=f"panama-train-rank{rank}",
            )
            for rank in range(workers)
        ]
        for p in procs:
            p.start()
        try:
            epochs, done = _collect(cfg, procs, out_queue, on_epoch, on_status)
        except BaseException:
            _stop(procs, grace_s=2.0)  # the others are likely blocked on the failed rank
            raise
        _stop(procs)
    digests = [done[r]["sha256"] for r in range(workers)]
    params = done[0]["parameters"]
    return TrainResult(
        config=cfg,
        dataset=data.name,
        dataset_source=data.source,
        num_train=data.num_train,
        num_test=data.num_test,
        num_parameters=int(done[0]["num_parameters"]),
        epochs=epochs,
        replicas_identical=len(set(digests)) == 1,
        parameter_sha256=digests,
        total_seconds=time.perf_counter() - start,
        controller=controller,
        job=job,
        communicator_stats=[done[r]["communicator_stats"] for r in range(workers)]
        if cfg.allreduce == "panama"
        else None,
        bytes_source_key="gloo-model"
        if cfg.allreduce == "gloo" and any(e.tcp_bytes_sent_per_worker is None for e in epochs)
        else None,
        parameters=torch.from_numpy(params) if params is not None else None,
    )


def _collect(
    cfg: TrainConfig,
    procs: list[Any],
    out_queue: Any,
    on_epoch: Callable[[EpochStats], None] | None,
    on_status: Callable[[str], None] | None,
) -> tuple[list[EpochStats], dict[int, dict[str, Any]]]:
    """Gather the workers' reports until every rank is done; raise on failure or silence."""
    workers = cfg.workers
    pending: dict[int, dict[int, dict[str, Any]]] = {}
    epochs: list[EpochStats] = []
    done: dict[int, dict[str, Any]] = {}
    reached_epoch = [0] * workers
    last_report = time.monotonic()
    while len(done) < workers:
        try:
            kind, rank, payload = out_queue.get(timeout=0.2)
        except queue_mod.Empty:
            dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode is not None and r not in done]
            if dead:
                _fail(procs, out_queue, dead_hint=dead)
            if time.monotonic() - last_report > cfg.timeout_s:
                reached = [reached_epoch[r] if r not in done else "done" for r in range(workers)]
                behind = [r for r in range(workers) if r not in done and reached_epoch[r] == min(reached_epoch)]
                _dump_stacks(procs, behind)
                raise TrainingError(
                    f"no report from any worker for timeout_s={cfg.timeout_s:g} s; epochs completed per rank: "
                    f"{reached}; slowest rank(s): {behind} (their Python stacks went to stderr)"
                )
            continue
        last_report = time.monotonic()
        if kind == "error":
            _fail(procs, out_queue, first=(rank, payload))
        elif kind == "status":
            if on_status is not None:
                on_status(_status_text(payload))
        elif kind == "epoch":
            reached_epoch[rank] = payload["epoch"]
            pending.setdefault(payload["epoch"], {})[rank] = payload
            while len(epochs) < cfg.epochs and len(pending.get(len(epochs) + 1, {})) == workers:
                reports = pending.pop(len(epochs) + 1)
                stats = EpochStats(
                    epoch=len(epochs) + 1,
                    steps=reports[0]["steps"],
                    train_loss=sum(r["loss_sum"] for r in reports.values())
                    / max(1, sum(r["seen"] for r in reports.values())),
                    test_accuracy=reports[0]["test_accuracy"],
                    seconds=max(r["seconds"] for r in reports.values()),
                    bytes_sent_per_worker=sum(r["bytes_sent"] for r in reports.values()) / workers,
                    tcp_bytes_sent_per_worker=_mean_or_none([r.get("tcp_bytes_sent") for r in reports.values()]),
                )
                epochs.append(stats)
                if on_epoch is not None:
                    on_epoch(stats)
        elif kind == "done":
            done[rank] = payload
    return epochs, done


def _dump_stacks(procs: list[Any], ranks: list[int]) -> None:
    """Ask the given workers to print their Python stacks (faulthandler, SIGUSR1) to stderr."""
    if not hasattr(signal, "SIGUSR1"):
        return
    for rank in ranks:
        pid = getattr(procs[rank], "pid", None)
        if pid is not None and procs[rank].exitcode is None:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass
    time.sleep(0.5)


def _mean_or_none(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]


def _fail(
    procs: list[Any],
    out_queue: Any,
    first: tuple[int, dict[str, Any]] | None = None,
    dead_hint: list[tuple[int, int]] | None = None,
) -> None:
    """Raise a TrainingError naming every failed rank (waits briefly to gather the others)."""
    errors: dict[int, dict[str, Any]] = {}
    if first is not None:
        errors[first[0]] = first[1]
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            kind, rank, payload = out_queue.get(timeout=0.1)
        except queue_mod.Empty:
            continue
        if kind == "error":
            errors.setdefault(rank, payload)
    # Ranks that died silently first: they are usually the cause of the others' errors.
    lines = [
        f"worker rank {rank} exited with code {p.exitcode} without reporting an error"
        for rank, p in enumerate(procs)
        if rank not in errors and p.exitcode not in (None, 0)
    ]
    lines += [f"worker rank {rank} failed: {errors[rank]['error']}" for rank in sorted(errors)]
    if not lines and dead_hint:
        lines = [f"worker rank {r} exited with code {code} before finishing" for r, code in dead_hint]
    detail = ""
    if errors:
        rank = min(errors)
        detail = f"\n--- traceback of rank {rank} ---\n{errors[rank]['traceback']}"
    raise TrainingError("; ".join(lines) + detail)


def _stop(procs: list[Any], grace_s: float = 10.0) -> None:
    """Join every worker (bounded); terminate, then kill, the ones still running."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5.0)
        if p.is_alive():  # pragma: no cover - ignores SIGTERM
            p.kill()
            p.join(timeout=5.0)


# --------------------------------------------------------------------------- public entry


def train(
    config: TrainConfig,
    *,
    dataset: Dataset | None = None,
    on_epoch: Callable[[EpochStats], None] | None = None,
    on_status: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train LeNet data-parallel as configured; returns per-epoch statistics and the replica check.

    ``dataset`` overrides ``config.data_dir`` (already loaded data). ``on_epoch`` is called
    with each finished epoch's row, ``on_status`` with a progress line at most every
    5 s. Raises :class:`TrainingError` when a worker fails or stays silent longer than
    ``config.timeout_s``, :class:`panama.training.data.IdxFormatError` for bad data files.
    """
    data = dataset if dataset is not None else load_dataset(config.data_dir)
    if data.num_train < config.workers:
        raise FieldError(
            "workers", f"{config.workers} workers need as many training examples, dataset has {data.num_train}"
        )
    if config.allreduce == "local":
        return _train_local(config, data, on_epoch, on_status)
    return _train_processes(config, data, on_epoch, on_status)
