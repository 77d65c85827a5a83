"""The pieces every training mode shares: seeded batches and shards, evaluation, the
reference allreduce, byte counters, thread settings and the throttled status.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from panama.progress import Throttle
from panama.training.config import EVAL_BATCH, STATUS_INTERVAL_S


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
    """Calls ``emit`` with the position at most every STATUS_INTERVAL_S seconds."""

    def __init__(self, emit: Callable[[dict[str, Any]], None] | None):
        self.emit = emit
        self.throttle = Throttle(STATUS_INTERVAL_S, first_after_s=STATUS_INTERVAL_S)

    def step(self, epoch: int, step: int, steps: int) -> None:
        if self.emit is not None and self.throttle.ready():
            self.emit({"epoch": epoch, "step": step, "steps": steps})
