"""Accelerator throughput against raw ``numpy.add`` on the same packet size.

The contributions of every worker are built before timing (packet objects with views
into each worker's gradient), so the timed loop measures what one accelerator does per
packet: look up the tree and slot, check the bitmap, add the payload, fold ECN and
cwnd_cap, take the ack, free acknowledged slots, and emit one result per completed slot
(one packet for all the tree's children, as every driver gets it: replicating it to
the children is the switch's multicast engine, as in the UDP daemon). The baseline loop
performs the same number of ``numpy.add`` calls on the same payload views into one
preallocated row: the floor any Python-driven per-packet design pays.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from panama.benchmarks.settings import CoreBenchConfig
from panama.core.accelerator import Accelerator
from panama.core.packet import ECT0, MAX_CWND_CAP, Packet

__all__ = ["CoreBenchConfig", "CoreBenchResult", "run_core_bench"]


@dataclass
class CoreBenchResult:
    workers: int
    size_mb: float
    payload_elems: int
    packets: int
    contributions: int
    accelerator_s: float
    numpy_s: float
    accelerator_gbps: float
    numpy_gbps: float
    accelerator_pps: float
    numpy_pps: float
    ratio: float
    exact: bool

    def as_dict(self) -> dict:
        return asdict(self)


def run_core_bench(cfg: CoreBenchConfig | None = None, **changes: Any) -> CoreBenchResult:
    """Aggregate ``cfg.workers`` gradients of ``cfg.size_mb`` MB each through one accelerator
    (the root); ``changes`` are fields of :class:`CoreBenchConfig` (``run_core_bench(size_mb=16)``)."""
    cfg = cfg or CoreBenchConfig()
    if changes:
        cfg = cfg.replace(**changes)
    workers, size_mb, payload_elems, window, seed = cfg.workers, cfg.size_mb, cfg.payload_elems, cfg.window, cfg.seed
    repeat = cfg.repeat
    rng = np.random.default_rng(seed)
    num_elems = int(size_mb * 1e6) // 4
    # small integers: float32 sums are exact, so the result can be checked bitwise
    grads = [rng.integers(-8, 8, num_elems, dtype=np.int8).astype(np.float32) for _ in range(workers)]
    npkts = -(-num_elems // payload_elems)
    packets = []
    for grad in grads:
        row = []
        for i in range(npkts):
            lo = i * payload_elems
            view = grad[lo : lo + payload_elems]
            row.append(Packet(1, 0, i, 1, view.shape[0], 0, MAX_CWND_CAP, max(0, i - window), ECT0, view))
        packets.append(row)
    # interleave the workers' contributions packet by packet, as a switch would see them
    order = [(packets[w][i], w) for i in range(npkts) for w in range(workers)]
    best_acc = best_np = float("inf")
    exact = True
    for _ in range(repeat):
        acc = Accelerator(4 * window + 8, payload_elems, name="bench")
        acc.install_tree(1, 0, list(range(workers)), None)
        results = []
        receive = acc.receive
        append = results.append
        t0 = time.perf_counter()
        for pkt, src in order:
            out = receive(pkt, src)
            if out:
                append(out[0][1].payload)
        best_acc = min(best_acc, time.perf_counter() - t0)
        got = np.concatenate(results)
        exact &= bool(np.array_equal(got, np.sum(np.stack(grads), axis=0, dtype=np.float32)))
        sink = np.zeros(payload_elems, dtype=np.float32)
        add = np.add
        t0 = time.perf_counter()
        for pkt, _ in order:
            payload = pkt.payload
            if payload.shape[0] == payload_elems:
                add(sink, payload, out=sink)
            else:
                part = sink[: payload.shape[0]]
                add(part, payload, out=part)
        best_np = min(best_np, time.perf_counter() - t0)
    contributions = len(order)
    payload_bytes = workers * num_elems * 4
    return CoreBenchResult(
        workers=workers,
        size_mb=size_mb,
        payload_elems=payload_elems,
        packets=npkts,
        contributions=contributions,
        accelerator_s=best_acc,
        numpy_s=best_np,
        accelerator_gbps=payload_bytes / best_acc / 1e9,
        numpy_gbps=payload_bytes / best_np / 1e9,
        accelerator_pps=contributions / best_acc,
        numpy_pps=contributions / best_np,
        ratio=best_np / best_acc,
        exact=exact,
    )
