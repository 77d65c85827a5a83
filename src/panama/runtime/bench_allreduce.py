"""``panama bench allreduce``: PANAMA allreduce through a local cluster vs gloo, in one run.

For every size, ``workers`` processes (spawned) run one warm-up allreduce, meet at a
barrier, run ``iters`` timed allreduces and meet again; rank 0's time between the two
barriers divided by ``iters`` is the time per allreduce (so the slowest rank counts).
Algorithm bandwidth is ``size_bytes / time`` (as nccl-tests' *algbw*). PANAMA writes into
a result buffer reused across calls (``allreduce(x, out=y)``) as gloo reduces in place;
PANAMA runs first, then gloo (``torch.distributed``, FileStore on a temporary file, 127.0.0.1), so
the two never compete for the CPU. The switches' aggregated throughput is the sum over
daemons of the bytes they received during the timed section, per second. The warm-up
result of PANAMA is checked on rank 0 against a float64 reference (every rank's data is
regenerated there from its seed).
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from panama.runtime.udp import RUNTIME_PAYLOAD_ELEMS

MB = 1_000_000


@dataclass
class BenchConfig:
    workers: int = 4
    sizes_mb: list[float] = field(default_factory=lambda: [1.0, 16.0, 100.0])
    iters: int = 5
    leaves: int = 2
    spines: int = 2
    trees: int | None = None
    payload_elems: int = RUNTIME_PAYLOAD_ELEMS
    packet_memory: int = 512
    cc: str = "dctcp"
    ecn_threshold_pkts: int = 48
    min_rto_s: float = 0.1
    gloo: bool = True
    seed: int = 0
    timeout_s: float = 120.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _data(seed: int, rank: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, rank]).standard_normal(n, dtype=np.float32)


def _switch_rx_bytes(controls: list[tuple[str, int]]) -> int:
    from panama.runtime.http import request_json

    total = 0
    for addr in controls:
        status, body = request_json(addr, "GET", "/stats", timeout_s=10.0, what="switch")
        total += int(body["rx_bytes"]) if status == 200 else 0
    return total


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _panama_worker(rank: int, cfg: BenchConfig, controller: str, controls, pids, barrier, queue) -> None:
    try:
        from panama.runtime.communicator import Communicator

        with Communicator(
            controller,
            "bench",
            rank,
            cfg.workers,
            size_bytes=int(max(cfg.sizes_mb) * MB),
            timeout_s=cfg.timeout_s,
            trees=cfg.trees,
            payload_elems=cfg.payload_elems,
            cc=cfg.cc,
            min_rto_s=cfg.min_rto_s,
        ) as comm:
            for size_mb in cfg.sizes_mb:
                n = max(1, int(size_mb * MB) // 4)
                x = _data(cfg.seed, rank, n)
                y = np.empty_like(x)  # reused result buffer, as gloo reduces in place
                out = comm.allreduce(x, out=y)  # warm-up (and correctness check)
                err = None
                if rank == 0:
                    ref = np.zeros(n, dtype=np.float64)
                    for r in range(cfg.workers):
                        ref += _data(cfg.seed, r, n)
                    err = float(np.max(np.abs(out - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
                    del ref
                del out
                barrier.wait()
                rx0 = _switch_rx_bytes(controls) if rank == 0 else 0
                cpu0 = {name: _proc_cpu_s(pid) for name, pid in pids.items()} if rank == 0 else {}
                retx0 = comm.stats()["retransmissions"]
                barrier.wait()
                t0 = time.perf_counter()
                c0 = _own_cpu_s()
                for _ in range(cfg.iters):
                    comm.allreduce(x, out=y)
                own = _own_cpu_s() - c0
                barrier.wait()
                elapsed = time.perf_counter() - t0
                queue.put({"impl": "cpu", "size_mb": size_mb, "role": "worker", "cpu_s": own})
                if rank == 0:
                    rx1 = _switch_rx_bytes(controls)
                    cpu = {name: _proc_cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
                    queue.put(
                        {
                            "impl": "panama",
                            "size_mb": size_mb,
                            "seconds": elapsed,
                            "switch_rx_bytes": rx1 - rx0,
                            "max_rel_err": err,
                            "retransmissions_rank0": comm.stats()["retransmissions"] - retx0,
                            "cpu_s": cpu,
                        }
                    )
    except BaseException as exc:  # report, never hang the parent
        queue.put({"impl": "panama", "error": f"rank {rank}: {type(exc).__name__}: {exc}"})
        barrier.abort()


def _gloo_worker(rank: int, cfg: BenchConfig, store_path: str, barrier, queue) -> None:
    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store_path}",
            rank=rank,
            world_size=cfg.workers,
            timeout=datetime.timedelta(seconds=cfg.timeout_s),
        )
        for size_mb in cfg.sizes_mb:
            n = max(1, int(size_mb * MB) // 4)
            base = torch.from_numpy(_data(cfg.seed, rank, n))
            t = base.clone()
            dist.all_reduce(t)  # warm-up
            barrier.wait()
            t0 = time.perf_counter()
            c0 = _own_cpu_s()
            for _ in range(cfg.iters):
                t.copy_(base)  # gloo reduces in place (PANAMA writes into a reused buffer)
                dist.all_reduce(t)
            own = _own_cpu_s() - c0
            barrier.wait()
            elapsed = time.perf_counter() - t0
            queue.put({"impl": "cpu", "size_mb": size_mb, "role": "worker", "cpu_s": own})
            if rank == 0:
                queue.put({"impl": "gloo", "size_mb": size_mb, "seconds": elapsed})
        dist.destroy_process_group()
    except BaseException as exc:
        queue.put({"impl": "gloo", "error": f"rank {rank}: {type(exc).__name__}: {exc}"})
        barrier.abort()


def _run_workers(ctx, target, args_for_rank, cfg: BenchConfig, label: str, progress: bool) -> list[dict]:
    queue = ctx.Queue()
    barrier = ctx.Barrier(cfg.workers)
    procs = [ctx.Process(target=target, args=(*args_for_rank(r), barrier, queue), daemon=True) for r in range(cfg.workers)]
    for p in procs:
        p.start()
    rows: list[dict] = []
    cpu_by_size: dict[float, float] = {}
    cpu_counts: dict[float, int] = {}
    deadline = time.monotonic() + cfg.timeout_s * (len(cfg.sizes_mb) * (cfg.iters + 2)) + 60
    try:
        while len(rows) < len(cfg.sizes_mb):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{label}: no result within the benchmark deadline")
            try:
                row = queue.get(timeout=min(left, 1.0))
            except Exception:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(f"{label}: worker rank(s) {dead} died (exit codes {[procs[r].exitcode for r in dead]})") from None
                continue
            if "error" in row:
                raise RuntimeError(f"{label}: {row['error']}")
            if row["impl"] == "cpu":  # per-rank CPU seconds of the timed calls
                cpu_by_size[row["size_mb"]] = cpu_by_size.get(row["size_mb"], 0.0) + row["cpu_s"]
                cpu_counts[row["size_mb"]] = cpu_counts.get(row["size_mb"], 0) + 1
                continue
            rows.append(row)
            if progress:
                per = row["seconds"] / cfg.iters
                print(
                    f"  {label:<6} {row['size_mb']:>8g} MB: {per * 1e3:9.2f} ms per allreduce",
                    file=sys.stderr,
                    flush=True,
                )
        # The other ranks' CPU reports follow rank 0's rows; collect them too.
        end = time.monotonic() + 30
        while any(cpu_counts.get(size, 0) < cfg.workers for size in cfg.sizes_mb):
            if time.monotonic() > end:
                break
            try:
                row = queue.get(timeout=1.0)
            except Exception:
                continue
            if row.get("impl") == "cpu":
                cpu_by_size[row["size_mb"]] = cpu_by_size.get(row["size_mb"], 0.0) + row["cpu_s"]
                cpu_counts[row["size_mb"]] = cpu_counts.get(row["size_mb"], 0) + 1
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    for row in rows:
        complete = cpu_counts.get(row["size_mb"], 0) == cfg.workers
        row["workers_cpu_s"] = cpu_by_size[row["size_mb"]] if complete else float("nan")
    return rows


def run_bench(cfg: BenchConfig, progress: bool = True) -> list[dict[str, Any]]:
    """Run both implementations for every size; return one row per size (see ``format_table``)."""
    from panama.runtime.cluster import LocalCluster

    ctx = mp.get_context("spawn")
    hosts_per_leaf = max(1, math.ceil(cfg.workers / cfg.leaves))
    rows: dict[float, dict[str, Any]] = {s: {"size_mb": s, "size_bytes": int(s * MB)} for s in cfg.sizes_mb}
    if progress:
        print(f"panama bench allreduce: {cfg.workers} workers, sizes {cfg.sizes_mb} MB, {cfg.iters} iterations", file=sys.stderr)
    with LocalCluster(
        leaves=cfg.leaves,
        spines=cfg.spines,
        hosts_per_leaf=hosts_per_leaf,
        trees=cfg.trees,
        payload_elems=cfg.payload_elems,
        packet_memory=cfg.packet_memory,
        ecn_threshold_pkts=cfg.ecn_threshold_pkts,
        threshold_bytes=0,
        heartbeat_timeout_s=max(10.0, cfg.timeout_s / 4),
        log_level="WARNING",
    ) as lc:
        controls = [lc.procs[n].control for n in lc.switch_names]
        pids = {name: p.pid for name, p in lc.procs.items()}
        for r in _run_workers(
            ctx, _panama_worker, lambda rank: (rank, cfg, lc.controller, controls, pids), cfg, "panama", progress
        ):
            row = rows[r["size_mb"]]
            per = r["seconds"] / cfg.iters
            per_call_ms = {name: 1e3 * v / cfg.iters for name, v in r["cpu_s"].items()}
            workers_ms = 1e3 * r["workers_cpu_s"] / cfg.iters
            row.update(
                panama_ms=per * 1e3,
                panama_algbw_gbps=row["size_bytes"] / per / 1e9,
                switch_gbps=r["switch_rx_bytes"] / r["seconds"] / 1e9,
                panama_max_rel_err=r["max_rel_err"],
                panama_retransmissions_rank0=r["retransmissions_rank0"],
                panama_cpu_ms=workers_ms + sum(per_call_ms.values()),
                panama_cpu_ms_by_process=dict(per_call_ms, workers=workers_ms),
            )
    if cfg.gloo:
        with tempfile.TemporaryDirectory(prefix="panama-gloo-") as tmp:
            store = str(Path(tmp) / "store")
            for r in _run_workers(ctx, _gloo_worker, lambda rank: (rank, cfg, store), cfg, "gloo", progress):
                row = rows[r["size_mb"]]
                per = r["seconds"] / cfg.iters
                row.update(
                    gloo_ms=per * 1e3,
                    gloo_algbw_gbps=row["size_bytes"] / per / 1e9,
                    gloo_cpu_ms=1e3 * r["workers_cpu_s"] / cfg.iters,
                )
                row["ratio"] = row["panama_algbw_gbps"] / row["gloo_algbw_gbps"]
    return list(rows.values())


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'size MB':>8} {'PANAMA ms':>10} {'PANAMA GB/s':>12} {'gloo ms':>9} {'gloo GB/s':>10} {'ratio':>6} "
        f"{'switch GB/s':>12} {'max rel err':>12} {'PANAMA CPU ms':>14} {'gloo CPU ms':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        gloo_ms = f"{r['gloo_ms']:9.2f}" if "gloo_ms" in r else f"{'-':>9}"
        gloo_bw = f"{r['gloo_algbw_gbps']:10.3f}" if "gloo_algbw_gbps" in r else f"{'-':>10}"
        ratio = f"{r['ratio']:6.2f}" if "ratio" in r else f"{'-':>6}"
        lines.append(
            f"{r['size_mb']:>8g} {r['panama_ms']:10.2f} {r['panama_algbw_gbps']:12.3f} {gloo_ms} {gloo_bw} {ratio} "
            f"{r['switch_gbps']:12.3f} {r['panama_max_rel_err']:12.2e} {r['panama_cpu_ms']:14.1f} "
            + (f"{r['gloo_cpu_ms']:12.1f}" if "gloo_cpu_ms" in r else f"{'-':>12}")
        )
    lines.append("ratio = PANAMA algbw / gloo algbw (same run); algbw = size / time per allreduce")
    lines.append("CPU ms = CPU time per allreduce summed over all processes (PANAMA: workers, daemons, controller)")
    for r in rows:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in r["panama_cpu_ms_by_process"].items())
        lines.append(f"  PANAMA CPU ms per allreduce at {r['size_mb']:g} MB: {parts}")
    return "\n".join(lines)


def write_results(rows: list[dict[str, Any]], cfg: BenchConfig, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"config": cfg.to_dict(), "results": rows}, indent=2))
    flat = []
    for r in rows:
        r = dict(r)
        for name, ms in r.pop("panama_cpu_ms_by_process", {}).items():
            r[f"panama_cpu_ms_{name}"] = ms
        flat.append(r)
    keys = sorted({k for r in flat for k in r})
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(flat)
