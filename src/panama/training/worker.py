"""One training worker process (gloo or PANAMA allreduce) and how workers are started."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from torch.nn import functional as F

from panama.distributed.ddp_hook import register_panama_hook
from panama.training.config import TrainConfig
from panama.training.data import Dataset
from panama.training.models import flat_parameters, make_lenet, num_parameters, parameter_digest
from panama.training.steps import (
    TcpByteCounter,
    _Status,
    epoch_batches,
    evaluate_accuracy,
    ring_bytes_per_worker,
    seed_generators,
    shard,
)


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
    job_token: str | None = None,
) -> None:
    """Process entry point: run one rank, report every outcome on ``out_queue``."""
    if hasattr(signal, "SIGUSR1"):  # the parent asks a silent worker for its stacks (stderr)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        cfg = TrainConfig.model_validate(cfg_dict)
        _worker(rank, cfg, data, store_path, out_queue, controller, job, token, job_token)
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
    job_token: str | None = None,
) -> None:
    """One rank: join the gloo group, build the replica (and its PANAMA communicator),
    train every epoch reporting each on ``out_queue``, then report the final parameters."""
    _join_group(cfg, rank, store_path)
    comm = None
    try:
        init_rng, shuffle_rng = seed_generators(cfg.seed)
        model = make_lenet(init_rng, cfg.init)
        n_params = num_parameters(model)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if cfg.allreduce == "panama":
            comm = _communicator(cfg, rank, n_params, controller, job, token, job_token)
            register_panama_hook(ddp, comm, cfg.workers)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=cfg.lr)
        status = _Status((lambda s: out_queue.put(("status", rank, s))) if rank == 0 else None)
        tcp_counter = TcpByteCounter(_peer(controller))
        for epoch in range(1, cfg.epochs + 1):
            record = _epoch(cfg, rank, epoch, data, ddp, optimizer, comm, tcp_counter, status, shuffle_rng)
            record["test_accuracy"] = (
                evaluate_accuracy(model, data.test_images, data.test_labels) if rank == 0 else None
            )
            out_queue.put(("epoch", rank, record))
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


def _join_group(cfg: TrainConfig, rank: int, store_path: str) -> None:
    """The gloo process group over a file store (on loopback), every rank of the run."""
    torch.set_num_threads(cfg.threads)
    ifname = _loopback_ifname()
    if ifname is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname)
    store = dist.FileStore(store_path, cfg.workers)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=cfg.workers, timeout=timedelta(seconds=cfg.timeout_s)
    )


def _communicator(cfg: TrainConfig, rank: int, n_params: int, controller, job, token, job_token) -> Any:
    """This rank's PANAMA communicator, registered with the controller before it returns
    (``job_token``: the run's, drawn by the parent and shared by every rank)."""
    from panama.runtime.worker.communicator import Communicator

    assert controller is not None and job is not None
    # size_bytes makes the constructor register now (a barrier over the ranks),
    # so the trees are installed before the first timed step.
    return Communicator(
        controller,
        job,
        rank,
        cfg.workers,
        size_bytes=4 * n_params,
        timeout_s=cfg.timeout_s,
        token=token,
        job_token=job_token,
    )


def _epoch(cfg, rank, epoch, data, ddp, optimizer, comm, tcp_counter, status, shuffle_rng) -> dict[str, Any]:
    """Train one epoch of this rank's shards; its record (loss, time, bytes sent)."""
    workers = cfg.workers
    x, y = data.train_images, data.train_labels
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
        sent = len(batches) * ring_bytes_per_worker(4 * num_parameters(ddp.module), workers)
    return {
        "epoch": epoch,
        "steps": len(batches),
        "loss_sum": loss_sum,
        "seen": seen,
        "seconds": seconds,
        "bytes_sent": sent,
        "tcp_bytes_sent": tcp,
    }


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
    "panama.training.run",
    "panama.training.worker",
    "panama.runtime.worker.communicator",
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
