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
   - ``panama``: the same DDP model with :func:`~panama.runtime.ddp_hook.register_panama_hook`:
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
import faulthandler
import json
import os
import queue as queue_mod
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch.nn import functional as F

from panama.runtime.data import Dataset, load_dataset
from panama.runtime.ddp_hook import register_panama_hook
from panama.runtime.models import INIT_SCHEMES, flat_parameters, make_lenet, num_parameters, parameter_digest

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


class TrainConfig(BaseModel):
    """What ``panama train`` runs. Field errors name the field (CLI option ``--field-name``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: int = Field(2, ge=1, le=64, description="data-parallel workers W (processes, or replicas for local)")
    epochs: int = Field(5, ge=1, le=100_000, description="passes over the training set")
    batch_size: int = Field(64, ge=1, description="global minibatch size B, split across the workers")
    lr: float = Field(0.1, gt=0.0, allow_inf_nan=False, description="SGD learning rate")
    seed: int = Field(0, ge=0, lt=2**63, description="seed of model initialisation and batch order")
    data_dir: Path | None = Field(None, description="directory of Fashion-MNIST IDX files; default: sklearn digits")
    allreduce: Literal["panama", "gloo", "local"] = Field("panama", description="how gradients are summed")
    controller: str | None = Field(None, description="HOST:PORT of a running controller (panama only)")
    job: str | None = Field(None, description="job name at the controller (panama only); default: unique")
    threads: int = Field(1, ge=1, le=256, description="torch intra-op threads per worker")
    init: Literal["he", "reference"] = Field("he", description="weight initialisation scheme")
    timeout_s: float = Field(120.0, gt=0.0, allow_inf_nan=False, description="longest silence tolerated from a worker")

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


# --------------------------------------------------------------------------- shared pieces


def seed_generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """``(init_rng, shuffle_rng)``: independent streams for weights and batch order."""
    init_seq, shuffle_seq = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(init_seq), np.random.default_rng(shuffle_seq)


def epoch_batches(num_samples: int, batch_size: int, workers: int, rng: np.random.Generator) -> list[torch.Tensor]:
    """One epoch's global minibatches (index tensors) in ``rng``'s order.

    Consumes exactly one permutation from ``rng``. The last batch is kept when it has at
    least ``workers`` examples (every worker must take part in every step), else dropped.
    """
    perm = torch.from_numpy(rng.permutation(num_samples))
    batches = list(torch.split(perm, batch_size))
    if batches and batches[-1].numel() < workers:
        batches.pop()
    return batches


def shard(batch: torch.Tensor, workers: int, rank: int) -> torch.Tensor:
    """The part of ``batch`` that worker ``rank`` computes (sizes differ by at most one)."""
    return torch.tensor_split(batch, workers)[rank]


@torch.no_grad()
def evaluate_accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of ``images`` whose arg-max logit equals the label."""
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, images.shape[0], EVAL_BATCH):
        logits = model(images[start : start + EVAL_BATCH])
        correct += int((logits.argmax(dim=1) == labels[start : start + EVAL_BATCH]).sum())
    model.train(was_training)
    return correct / max(1, images.shape[0])


def reference_allreduce(tensors: list[torch.Tensor]) -> None:
    """Sum ``tensors`` into the first one, then copy the sum into the others (in place)."""
    for t in tensors[1:]:
        tensors[0].add_(t)
    for t in tensors[1:]:
        t.copy_(tensors[0])


def ring_bytes_per_worker(gradient_bytes: int, workers: int) -> float:
    """Bytes each worker sends in one ring allreduce of ``gradient_bytes``: 2(W-1)/W x size."""
    return 2.0 * (workers - 1) / workers * gradient_bytes


_TCPI_BYTES_SENT_OFFSET = 200  # struct tcp_info.tcpi_bytes_sent (u64), Linux >= 4.19


def _tcp_socket_counters(exclude_peers: tuple[tuple[str, int], ...]) -> dict[int, int] | None:
    """``{socket inode: tcpi_bytes_sent}`` of this process's open TCP sockets, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return None
    counters: dict[int, int] = {}
    for fd in fds:
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
            if not link.startswith("socket:["):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:  # closed meanwhile (e.g. the fd listdir itself used)
            continue
        try:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            if exclude_peers and sock.getpeername()[:2] in exclude_peers:
                continue
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
            if len(info) < _TCPI_BYTES_SENT_OFFSET + 8:
                return None
            counters[int(link[8:-1])] = struct.unpack_from("=Q", info, _TCPI_BYTES_SENT_OFFSET)[0]
        except OSError:  # a listening socket (no peer), or closed meanwhile
            continue
        finally:
            sock.detach()  # the fd belongs to its owner (gloo, the communicator): never close it
    return counters


class TcpByteCounter:
    """Bytes sent by this process's TCP sockets (``tcp_info.tcpi_bytes_sent``, Linux >= 4.19).

    :meth:`sent` returns the bytes sent since the previous call (or since construction)
    by the sockets open now, tracked per socket: a socket that a sample misses keeps its
    last count, a new socket counts from zero. Sockets whose peer is in ``exclude_peers``
    (e.g. the controller's HTTP API) are ignored. Counts TCP payload (gloo's framing
    included), retransmissions excluded. ``available`` is False (and :meth:`sent` returns
    None) where the kernel does not report it.
    """

    def __init__(self, exclude_peers: tuple[tuple[str, int], ...] = ()):
        self.exclude_peers = exclude_peers
        self._last = _tcp_socket_counters(exclude_peers)
        self.available = self._last is not None

    def sent(self) -> int | None:
        now = _tcp_socket_counters(self.exclude_peers) if self._last is not None else None
        if now is None or self._last is None:
            return None
        delta = 0
        for inode, count in now.items():
            before = self._last.get(inode, 0)
            delta += count - before if count >= before else count  # smaller: a new socket reusing the inode
        self._last.update(now)
        return delta


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Status:
    """Calls ``on_status`` at most every STATUS_INTERVAL_S seconds."""

    def __init__(self, emit: Callable[[dict[str, Any]], None] | None):
        self.emit = emit
        self.last = time.monotonic()

    def step(self, epoch: int, step: int, steps: int) -> None:
        if self.emit is None:
            return
        now = time.monotonic()
        if now - self.last >= STATUS_INTERVAL_S:
            self.last = now
            self.emit({"epoch": epoch, "step": step, "steps": steps})


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


# --------------------------------------------------------------------------- worker processes


def _loopback_ifname() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:  # pragma: no cover - platforms without if_nameindex
        return None
    return next((name for name in names if name.startswith("lo")), None)  # "lo" on Linux, "lo0" on BSDs


def _worker_entry(
    rank: int,
    cfg_dict: dict[str, Any],
    data: Dataset,
    store_path: str,
    out_queue: Any,
    controller: str | None,
    job: str | None,
    token: str | None = None,
) -> None:
    """Process entry point: run one rank, report every outcome on ``out_queue``."""
    if hasattr(signal, "SIGUSR1"):  # the parent asks a silent worker for its stacks (stderr)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        _worker(rank, TrainConfig.model_validate(cfg_dict), data, store_path, out_queue, controller, job, token)
    except BaseException as exc:
        report = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        try:
            out_queue.put(("error", rank, report))
        except (ValueError, OSError):  # queue already closed: the failure came after "done"
            print(f"panama train: rank {rank} failed after reporting:\n{report['traceback']}", file=sys.stderr)
        raise SystemExit(1) from None


def _worker(
    rank: int,
    cfg: TrainConfig,
    data: Dataset,
    store_path: str,
    out_queue: Any,
    controller: str | None,
    job: str | None,
    token: str | None = None,
) -> None:
    workers = cfg.workers
    torch.set_num_threads(cfg.threads)
    ifname = _loopback_ifname()
    if ifname is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname)
    store = dist.FileStore(store_path, workers)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=workers, timeout=timedelta(seconds=cfg.timeout_s)
    )
    comm = None
    try:
        init_rng, shuffle_rng = seed_generators(cfg.seed)
        model = make_lenet(init_rng, cfg.init)
        n_params = num_parameters(model)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if cfg.allreduce == "panama":
            from panama.runtime.communicator import Communicator

            assert controller is not None and job is not None
            # size_bytes makes the constructor register now (a barrier over the ranks),
            # so the trees are installed before the first timed step.
            comm = Communicator(
                controller, job, rank, workers, size_bytes=4 * n_params, timeout_s=cfg.timeout_s, token=token
            )
            register_panama_hook(ddp, comm, workers)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
        status = _Status((lambda s: out_queue.put(("status", rank, s))) if rank == 0 else None)
        x, y = data.train_images, data.train_labels
        tcp_counter = TcpByteCounter(_peer(controller))
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.perf_counter()
            sent_before = _bytes_sent(comm)
            tcp_counter.sent()  # start of the epoch's count
            batches = epoch_batches(data.num_train, cfg.batch_size, workers, shuffle_rng)
            loss_sum, seen = 0.0, 0
            for step, batch in enumerate(batches):
                idx = shard(batch, workers, rank)
                loss = F.cross_entropy(ddp(x[idx]), y[idx], reduction="sum")
                # DDP averages over ranks: scale so the average is the global batch's mean gradient.
                (loss * (workers / batch.numel())).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
                loss_sum += float(loss.detach())
                seen += idx.numel()
                status.step(epoch, step + 1, len(batches))
            seconds = time.perf_counter() - t0
            tcp_sent = tcp_counter.sent()
            tcp = None if tcp_sent is None else float(tcp_sent)
            if cfg.allreduce == "panama":
                sent = float(_bytes_sent(comm) - sent_before)
            elif tcp is not None:
                sent = tcp
            else:
                sent = len(batches) * ring_bytes_per_worker(4 * n_params, workers)
            accuracy = evaluate_accuracy(model, data.test_images, data.test_labels) if rank == 0 else None
            out_queue.put(
                (
                    "epoch",
                    rank,
                    {
                        "epoch": epoch,
                        "steps": len(batches),
                        "loss_sum": loss_sum,
                        "seen": seen,
                        "seconds": seconds,
                        "bytes_sent": sent,
                        "tcp_bytes_sent": tcp,
                        "test_accuracy": accuracy,
                    },
                )
            )
        done = {
            "sha256": parameter_digest(model),
            "num_parameters": n_params,
            "parameters": flat_parameters(model).numpy() if rank == 0 else None,
            "communicator_stats": _jsonable(comm.stats()) if comm is not None else None,
        }
        out_queue.put(("done", rank, done))
        # Flush the report before tearing down: gloo's teardown may block without
        # releasing the GIL, which would starve the queue's feeder thread.
        out_queue.close()
        out_queue.join_thread()
    finally:
        if comm is not None:
            comm.close()
        dist.destroy_process_group()


def _peer(addr: str | None) -> tuple[tuple[str, int], ...]:
    if addr is None:
        return ()
    host, _, port = addr.rpartition(":")
    return ((socket.gethostbyname(host), int(port)),)


def _bytes_sent(comm: Any) -> int:
    return int(comm.stats().get("bytes_sent", 0)) if comm is not None else 0


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def _status_text(s: dict[str, Any]) -> str:
    return f"epoch {s['epoch']}: step {s['step']}/{s['steps']}"


# Imported once by the fork server, so that each worker starts in milliseconds instead
# of re-importing torch (DistributedDataParallel alone pulls in torch._dynamo: seconds).
WORKER_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "panama.runtime.training",
    "panama.runtime.communicator",
]


def worker_context() -> Any:
    """Multiprocessing context for workers: ``forkserver`` with torch preloaded, else ``spawn``.

    The fork server is a clean single-threaded process (no torch thread pools, no
    sockets), so forking from it is safe; it is started once per parent process and
    reused by later runs. Where it does not exist (Windows) workers are spawned.
    """
    if "forkserver" in tmp.get_all_start_methods():
        ctx = tmp.get_context("forkserver")
        ctx.set_forkserver_preload(WORKER_PRELOAD)
        return ctx
    return tmp.get_context("spawn")


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
    ctx = worker_context()
    if on_status is not None:
        cluster = " and a local PANAMA cluster" if cfg.allreduce == "panama" and cfg.controller is None else ""
        on_status(f"starting {workers} worker processes{cluster}")
    with tempfile.TemporaryDirectory(prefix="panama-train-") as tmpdir, _controller_for(cfg) as (controller, token):
        out_queue = ctx.Queue()
        store_path = os.path.join(tmpdir, "gloo-store")
        procs = [
            ctx.Process(
                target=_worker_entry,
                args=(rank, cfg.model_dump(mode="json"), data, store_path, out_queue, controller, job, token),
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
    ``config.timeout_s``, :class:`panama.runtime.data.IdxFormatError` for bad data files.
    """
    data = dataset if dataset is not None else load_dataset(config.data_dir)
    if data.num_train < config.workers:
        raise ValueError(
            f"workers: {config.workers} workers need as many training examples, dataset has {data.num_train}"
        )
    if config.allreduce == "local":
        return _train_local(config, data, on_epoch, on_status)
    return _train_processes(config, data, on_epoch, on_status)


def format_bytes(n: float) -> str:
    """``1.23 MB`` style (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


__all__ = [
    "ALLREDUCE_MODES",
    "INIT_SCHEMES",
    "EpochStats",
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
    "TcpByteCounter",
]
