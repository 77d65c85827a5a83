"""``panama bench allreduce``: PANAMA allreduce through a local cluster vs gloo, in one run.

``workers`` processes (spawned) each hold a PANAMA communicator and a gloo process group
(``torch.distributed``, FileStore on a temporary file, 127.0.0.1). For every size they run
one warm-up allreduce of each, then ``rounds`` rounds of [``iters`` timed PANAMA
allreduces, ``iters`` timed gloo allreduces]. Each phase starts and ends at a barrier and
rank 0's time between the two, divided by ``iters``, is the time per allreduce (so the
slowest rank counts). The phases never overlap, so the two never compete for the CPU;
alternating them makes background load on a shared machine hit both alike. Reported:
the median over rounds of each time per allreduce, and ``ratio``, the median over rounds
of the round's ``gloo time / PANAMA time`` (= PANAMA algbw / gloo algbw), with its
smallest and largest round. Algorithm bandwidth is ``size_bytes / time`` (as nccl-tests'
*algbw*). PANAMA writes into a result buffer reused across calls (``allreduce(x, out=y)``)
as gloo reduces in place. The switches' aggregated throughput is the sum over daemons of
the bytes they received during the PANAMA phases, per second of them; datagrams per
allreduce counts what daemons and workers received in them (each crossed loopback once,
see :func:`loopback_datagrams`). CPU time is summed
over the phases of each implementation (PANAMA: workers, daemons and controller). The
warm-up result of PANAMA is checked on rank 0 against a float64 reference (every rank's
data is regenerated there from its seed).

The loopback floor (``floor``, on by default): before the cluster starts and after it
stops, :mod:`panama.benchmarks.loopback_floor` measures what the kernel alone charges for
one datagram sent and received by UDP and for the same bytes streamed by TCP (the least
of the two measurements is kept: another tenant's load only ever adds); PANAMA's
datagrams sent and received per allreduce (counted by the daemons and workers) and gloo's
ring (``2 (n - 1) / n`` of the vector sent and received per rank) at those costs give each
implementation's CPU with zero user-space work, their quotient the ratio this host
allows when the kernel is all either does (``floor.ratio``), and how far above its floor
each ran (``floor.panama_over_floor``, ``floor.gloo_over_floor``).
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from panama.benchmarks import loopback_floor
from panama.benchmarks.settings import BenchConfig
from panama.core import codec
from panama.runtime.control.tokens import new_token
from panama.runtime.net.udp import RUNTIME_PAYLOAD_ELEMS
from panama.tables import format_table as draw_table

__all__ = ["BenchConfig", "format_table", "loopback_datagrams", "run_bench", "summarize", "write_results"]

MB = 1_000_000


def loopback_datagrams(
    size_bytes: int, workers: int, switches_per_tree: int, payload_elems: int = RUNTIME_PAYLOAD_ELEMS, trees: int = 1
) -> int:
    """Datagrams one allreduce sends over loopback: every tree edge carries each of its packets
    up and down, and one closing ack (header only) up.

    A tree spans the ``workers`` ranks and ``switches_per_tree`` daemons (1 for one rack,
    3 for a leaf-spine tree over 2 leaves), so it has ``workers + switches_per_tree - 1``
    edges; each rank's vector is ``ceil(size / payload)`` packets spread over the ``trees``.
    """
    packets = -(-(size_bytes // 4) // payload_elems)
    edges = workers + switches_per_tree - 1
    return 2 * packets * edges + trees * edges


def _data(seed: int, rank: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, rank]).standard_normal(n, dtype=np.float32)


def _switch_counters(controls: dict[str, tuple[str, int]], token: str | None = None) -> dict[str, Any]:
    """Datagrams and bytes received and datagrams sent so far, summed over the switch
    daemons (``rx_packets``, ``rx_bytes``, ``tx_packets``), and the contributions each
    daemon's accelerator summed (``contributions``, per daemon name)."""
    from panama.runtime.control.client import request_json

    out: dict[str, Any] = {"rx_packets": 0, "rx_bytes": 0, "tx_packets": 0, "contributions": {}}
    for name, addr in controls.items():
        status, body = request_json(addr, "GET", "/stats", timeout_s=10.0, what="switch", token=token)
        if status == 200:
            for key in ("rx_packets", "rx_bytes", "tx_packets"):
                out[key] += int(body[key])
            out["contributions"][name] = int(body["accelerator"]["contributions"])
    return out


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


@dataclass
class _Rank:
    """What the phases of one rank share (see :func:`_worker`)."""

    rank: int
    cfg: BenchConfig
    controls: dict[str, tuple[str, int]]
    pids: dict[str, int]
    token: str
    barrier: Any
    queue: Any


def _worker(
    rank: int,
    cfg: BenchConfig,
    controller: str,
    controls,
    pids,
    store_path: str,
    token: str,
    job: str,
    job_token: str,
    barrier,
    queue,
) -> None:
    """One rank: both implementations, alternating phases (module docstring); reports to ``queue``."""
    try:
        from panama.runtime.worker.communicator import Communicator

        dist = _init_gloo(rank, cfg, store_path) if cfg.gloo else None
        me = _Rank(rank, cfg, controls, pids, token, barrier, queue)
        with Communicator(
            controller,
            job,
            rank,
            cfg.workers,
            size_bytes=int(max(cfg.sizes_mb) * MB),
            timeout_s=cfg.timeout_s,
            trees=cfg.trees,
            payload_elems=cfg.payload_elems,
            cc=cfg.cc,
            min_rto_s=cfg.min_rto_s,
            min_pto_s=cfg.min_pto_s,
            token=token,
            job_token=job_token,
        ) as comm:
            for size_mb in cfg.sizes_mb:
                _one_size(me, comm, dist, size_mb)
        if cfg.gloo:
            dist.destroy_process_group()
        queue.put({"impl": "done", "rank": rank})
    except BaseException as exc:  # report, never hang the parent
        queue.put({"impl": "error", "error": f"rank {rank}: {type(exc).__name__}: {exc}"})
        barrier.abort()


def _init_gloo(rank: int, cfg: BenchConfig, store_path: str):
    """Join the gloo process group (FileStore at ``store_path``); returns ``torch.distributed``."""
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
    return dist


def _one_size(me: _Rank, comm, dist, size_mb: float) -> None:
    """Warm-up (and rank 0's correctness check) and every round of one size, reported to ``me.queue``."""
    cfg = me.cfg
    n = max(1, int(size_mb * MB) // 4)
    x = _data(cfg.seed, me.rank, n)
    y = np.empty_like(x)  # reused result buffer, as gloo reduces in place
    comm.allreduce(x, out=y)  # warm-up (and correctness check)
    err = _max_rel_err(cfg, y) if me.rank == 0 else None
    if cfg.gloo:
        import torch

        base = torch.from_numpy(x)
        t = base.clone()
        dist.all_reduce(t)  # warm-up
    for rnd in range(cfg.rounds):
        me.queue.put(_panama_phase(me, comm, x, y, size_mb, rnd, err))
        if cfg.gloo:
            me.queue.put(_gloo_phase(me, dist, base, t, size_mb, rnd))


def _max_rel_err(cfg: BenchConfig, y: np.ndarray) -> float:
    """Largest error of the allreduce ``y`` relative to the float64 sum of every rank's data."""
    ref = np.zeros(y.shape[0], dtype=np.float64)
    for r in range(cfg.workers):
        ref += _data(cfg.seed, r, y.shape[0])
    return float(np.max(np.abs(y - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def _panama_phase(me: _Rank, comm, x: np.ndarray, y: np.ndarray, size_mb: float, rnd: int, err) -> dict[str, Any]:
    """One timed PANAMA phase: ``iters`` allreduces between barriers; rank 0 adds the
    elapsed time (read after the closing barrier and the counters) and the daemons' counters."""
    cfg, rank, barrier, controls, pids, token = me.cfg, me.rank, me.barrier, me.controls, me.pids, me.token
    barrier.wait()
    sw0 = _switch_counters(controls, token) if rank == 0 else {}
    cpu0 = {name: _proc_cpu_s(pid) for name, pid in pids.items()} if rank == 0 else {}
    st0 = comm.stats()
    barrier.wait()
    t0 = time.perf_counter()
    c0 = _own_cpu_s()
    for _ in range(cfg.iters):
        comm.allreduce(x, out=y)
    own = _own_cpu_s() - c0
    barrier.wait()
    st1 = comm.stats()
    row: dict[str, Any] = {
        "impl": "panama",
        "size_mb": size_mb,
        "round": rnd,
        "rank": rank,
        "cpu_s": own,
        "results": st1["results"] - st0["results"],  # datagrams this worker received
        "sent": st1["packets_sent"] - st0["packets_sent"],  # datagrams this worker sent
    }
    if rank == 0:
        elapsed = time.perf_counter() - t0
        sw1 = _switch_counters(controls, token)
        row.update(
            seconds=elapsed,
            switch_rx_packets=sw1["rx_packets"] - sw0["rx_packets"],
            switch_rx_bytes=sw1["rx_bytes"] - sw0["rx_bytes"],
            switch_tx_packets=sw1["tx_packets"] - sw0["tx_packets"],
            switch_contributions={n: c - sw0["contributions"].get(n, 0) for n, c in sw1["contributions"].items()},
            daemon_cpu_s={name: _proc_cpu_s(pid) - cpu0[name] for name, pid in pids.items()},
            retransmissions_rank0=st1["retransmissions"] - st0["retransmissions"],
            max_rel_err=err,
        )
    return row


def _gloo_phase(me: _Rank, dist, base, t, size_mb: float, rnd: int) -> dict[str, Any]:
    """One timed gloo phase: ``iters`` in-place allreduces of a fresh copy between barriers."""
    cfg, rank, barrier = me.cfg, me.rank, me.barrier
    barrier.wait()
    t0 = time.perf_counter()
    c0 = _own_cpu_s()
    for _ in range(cfg.iters):
        t.copy_(base)  # gloo reduces in place (PANAMA writes into a reused buffer)
        dist.all_reduce(t)
    own = _own_cpu_s() - c0
    barrier.wait()
    row = {"impl": "gloo", "size_mb": size_mb, "round": rnd, "rank": rank, "cpu_s": own}
    if rank == 0:
        row["seconds"] = time.perf_counter() - t0
    return row


def _collect(ctx, cfg: BenchConfig, args_for_rank, progress: bool) -> list[dict]:
    """Run the ranks and return every phase report (one per rank, size, round and implementation)."""
    queue = ctx.Queue()
    barrier = ctx.Barrier(cfg.workers)
    procs = [
        ctx.Process(target=_worker, args=(*args_for_rank(r), barrier, queue), daemon=True) for r in range(cfg.workers)
    ]
    for p in procs:
        p.start()
    reports: list[dict] = []
    done = 0
    phases = len(cfg.sizes_mb) * cfg.rounds * (2 if cfg.gloo else 1)
    deadline = time.monotonic() + cfg.timeout_s * (phases * cfg.iters + 2 * len(cfg.sizes_mb) + 2) + 60
    pending: dict[tuple[float, int], dict[str, float]] = {}
    try:
        while done < cfg.workers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no result within the benchmark deadline")
            try:
                row = queue.get(timeout=min(left, 1.0))
            except Exception:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(
                        f"worker rank(s) {dead} died (exit codes {[procs[r].exitcode for r in dead]})"
                    ) from None
                continue
            if row["impl"] == "error":
                raise RuntimeError(row["error"])
            if row["impl"] == "done":
                done += 1
                continue
            reports.append(row)
            if progress and row["rank"] == 0:
                key = (row["size_mb"], row["round"])
                per_ms = pending.setdefault(key, {})
                per_ms[row["impl"]] = 1e3 * row["seconds"] / cfg.iters
                if len(per_ms) == (2 if cfg.gloo else 1):
                    line = (
                        f"  {row['size_mb']:>8g} MB round {row['round'] + 1}/{cfg.rounds}: PANAMA "
                        f"{per_ms['panama']:8.2f} ms"
                    )
                    if cfg.gloo:
                        line += f", gloo {per_ms['gloo']:8.2f} ms, ratio {per_ms['gloo'] / per_ms['panama']:5.2f}"
                    print(line, file=sys.stderr, flush=True)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return reports


def run_bench(cfg: BenchConfig, progress: bool = True) -> list[dict[str, Any]]:
    """Run both implementations for every size; return one row per size (see ``format_table``)."""
    from panama.runtime.cluster import LocalCluster

    ctx = mp.get_context("spawn")
    hosts_per_leaf = max(1, math.ceil(cfg.workers / cfg.leaves))
    floors = [_floor(cfg, progress, "before")] if cfg.floor else []
    if progress:
        print(
            f"panama bench allreduce: {cfg.workers} workers, {cfg.leaves} leaves, {cfg.spines} spines, sizes "
            f"{cfg.sizes_mb} MB, {cfg.rounds} rounds of {cfg.iters} allreduces per implementation"
            + (f", {cfg.drop_prob:g} of datagrams dropped at every switch" if cfg.drop_prob else ""),
            file=sys.stderr,
        )
    with (
        LocalCluster(
            leaves=cfg.leaves,
            spines=cfg.spines,
            hosts_per_leaf=hosts_per_leaf,
            trees=cfg.trees,
            payload_elems=cfg.payload_elems,
            packet_memory=cfg.packet_memory,
            ecn_threshold_pkts=cfg.ecn_threshold_pkts,
            drop_prob=cfg.drop_prob,
            multicast_results=cfg.multicast_results,
            seed=cfg.seed,
            threshold_bytes=0,
            heartbeat_timeout_s=max(10.0, cfg.timeout_s / 4),
            log_level="WARNING",
        ) as lc,
        tempfile.TemporaryDirectory(prefix="panama-gloo-") as tmp,
    ):
        controls = {n: lc.procs[n].control for n in lc.switch_names}
        pids = {name: p.pid for name, p in lc.procs.items()}
        store = str(Path(tmp) / "store")
        job = f"bench-{uuid.uuid4().hex[:10]}"  # unique per run: a crashed run's name never blocks the next
        run_token = new_token()  # the run's job token, shared by its ranks
        reports = _collect(
            ctx, cfg, lambda rank: (rank, cfg, lc.controller, controls, pids, store, lc.token, job, run_token), progress
        )
    if cfg.floor:
        floors.append(_floor(cfg, progress, "after"))
    return summarize(reports, cfg, floors)


def _floor(cfg: BenchConfig, progress: bool, when: str) -> dict[str, Any]:
    """One :func:`panama.benchmarks.loopback_floor.measure` with blocks of one datagram."""
    if progress:
        print(f"  loopback floor ({when} the run): UDP and TCP, 3 x {cfg.floor_blocks:,} blocks each", file=sys.stderr)
    return loopback_floor.measure(cfg.floor_blocks, codec.datagram_size(cfg.payload_elems))


def summarize(
    reports: list[dict], cfg: BenchConfig, floors: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One row per size from the phase reports of :func:`_collect` (medians over rounds),
    with the loopback floor of ``floors`` (:func:`panama.benchmarks.loopback_floor.measure`
    runs: the least costs of any) when given."""
    rows = []
    for size_mb in cfg.sizes_mb:
        mine = [r for r in reports if r["size_mb"] == size_mb]
        lead = {(r["impl"], r["round"]): r for r in mine if r["rank"] == 0}
        calls = cfg.rounds * cfg.iters
        pan = [lead[("panama", k)] for k in range(cfg.rounds)]
        pan_s = [r["seconds"] / cfg.iters for r in pan]
        size_bytes = int(size_mb * MB)
        per = statistics.median(pan_s)
        daemon_ms = {name: 1e3 * sum(r["daemon_cpu_s"][name] for r in pan) / calls for name in pan[0]["daemon_cpu_s"]}
        workers_ms = 1e3 * sum(r["cpu_s"] for r in mine if r["impl"] == "panama") / calls
        pan_seconds = sum(r["seconds"] for r in pan)
        row: dict[str, Any] = {
            "size_mb": size_mb,
            "size_bytes": size_bytes,
            "panama_ms": per * 1e3,
            "panama_algbw_gbps": size_bytes / per / 1e9,
            "switch_gbps": sum(r["switch_rx_bytes"] for r in pan) / pan_seconds / 1e9,
            # Payload each daemon summed (contributions x datagram payload; the last datagram
            # of a vector is shorter), per second of the PANAMA phases and per second of
            # that daemon's CPU time (what one core of it sustains).
            "switch_payload_gbps_by_daemon": {
                name: 32 * cfg.payload_elems * sum(r["switch_contributions"][name] for r in pan) / pan_seconds / 1e9
                for name in pan[0]["switch_contributions"]
            },
            "switch_payload_gbps_per_cpu_by_daemon": {
                name: 32
                * cfg.payload_elems
                * sum(r["switch_contributions"][name] for r in pan)
                / max(1e-9, sum(r["daemon_cpu_s"][name] for r in pan))
                / 1e9
                for name in pan[0]["switch_contributions"]
                if sum(r["switch_contributions"][name] for r in pan)
            },
            "panama_max_rel_err": pan[0]["max_rel_err"],
            "panama_retransmissions_rank0": sum(r["retransmissions_rank0"] for r in pan),
            # Every datagram of the PANAMA phases, as received by a daemon or a worker.
            "datagrams_per_call": (
                sum(r["switch_rx_packets"] for r in pan) + sum(r["results"] for r in mine if r["impl"] == "panama")
            )
            / calls,
            # Every datagram the daemons and workers sent (a multicast send counts once).
            "sends_per_call": (
                sum(r["switch_tx_packets"] for r in pan) + sum(r["sent"] for r in mine if r["impl"] == "panama")
            )
            / calls,
            "panama_cpu_ms": workers_ms + sum(daemon_ms.values()),
            "panama_cpu_ms_by_process": dict(daemon_ms, workers=workers_ms),
            "panama_ms_by_round": [s * 1e3 for s in pan_s],
        }
        if cfg.gloo:
            glo_s = [lead[("gloo", k)]["seconds"] / cfg.iters for k in range(cfg.rounds)]
            g = statistics.median(glo_s)
            ratios = [gs / ps for gs, ps in zip(glo_s, pan_s)]
            row.update(
                gloo_ms=g * 1e3,
                gloo_algbw_gbps=size_bytes / g / 1e9,
                gloo_cpu_ms=1e3 * sum(r["cpu_s"] for r in mine if r["impl"] == "gloo") / calls,
                gloo_ms_by_round=[s * 1e3 for s in glo_s],
                ratio=statistics.median(ratios),
                ratio_min=min(ratios),
                ratio_max=max(ratios),
            )
        if floors:
            row["floor"] = _floor_row(row, cfg, floors)
        rows.append(row)
    return rows


def _floor_row(row: dict[str, Any], cfg: BenchConfig, floors: list[dict[str, Any]]) -> dict[str, Any]:
    """The loopback floor of one size (module docstring): per-block costs, each
    implementation's CPU at its floor, their ratio, and each measured CPU over its floor."""
    udp = loopback_floor.least_costs(floors, "udp")
    tcp = loopback_floor.least_costs(floors, "tcp")
    block = floors[0]["block_bytes"]
    ring = loopback_floor.ring_blocks(row["size_bytes"], cfg.workers, block)
    panama_ms = loopback_floor.floor_ms(row["sends_per_call"], row["datagrams_per_call"], udp)
    gloo_ms = loopback_floor.floor_ms(ring, ring, tcp)
    out = {
        "block_bytes": block,
        "udp_send_us": udp["send_us"],
        "udp_recv_us": udp["recv_us"],
        "tcp_send_us": tcp["send_us"],
        "tcp_recv_us": tcp["recv_us"],
        "panama_cpu_ms": panama_ms,
        "gloo_cpu_ms": gloo_ms,
        "ratio": gloo_ms / panama_ms if panama_ms > 0 else float("nan"),
        "panama_over_floor": row["panama_cpu_ms"] / panama_ms if panama_ms > 0 else float("nan"),
    }
    if "gloo_cpu_ms" in row:
        out["gloo_over_floor"] = row["gloo_cpu_ms"] / gloo_ms if gloo_ms > 0 else float("nan")
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    def opt(r: dict[str, Any], key: str, spec: str) -> str | None:
        return format(r[key], spec) if key in r else None

    table = [
        (
            f"{r['size_mb']:g}",
            f"{r['panama_ms']:.2f}",
            f"{r['panama_algbw_gbps']:.3f}",
            opt(r, "gloo_ms", ".2f"),
            opt(r, "gloo_algbw_gbps", ".3f"),
            opt(r, "ratio", ".2f"),
            f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if "ratio" in r else None,
            f"{r['switch_gbps']:.3f}",
            f"{r['panama_max_rel_err']:.2e}",
            f"{r['panama_cpu_ms']:.1f}",
            opt(r, "gloo_cpu_ms", ".1f"),
        )
        for r in rows
    ]
    headers = (
        "size MB", "PANAMA ms", "PANAMA GB/s", "gloo ms", "gloo GB/s", "ratio", "range", "switch GB/s",
        "max rel err", "PANAMA CPU ms", "gloo CPU ms",
    )  # fmt: skip
    lines = [draw_table(table, headers, align="r" * len(headers))]
    lines.append(
        "ms = median over rounds of the time per allreduce; algbw = size / time per allreduce; ratio = PANAMA algbw / "
        "gloo algbw, median over rounds (range: smallest-largest round), phases alternating in one run"
    )
    lines.append("CPU ms = CPU time per allreduce summed over all processes (PANAMA: workers, daemons, controller)")
    for r in rows:
        lines.append(
            f"  PANAMA datagrams per allreduce at {r['size_mb']:g} MB: {r['datagrams_per_call']:,.0f} "
            "(received by daemons and workers; each crossed loopback once)"
        )
    for r in rows:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in r["panama_cpu_ms_by_process"].items())
        lines.append(f"  PANAMA CPU ms per allreduce at {r['size_mb']:g} MB: {parts}")
    for r in rows:
        f = r.get("floor")
        if f is None:
            continue
        line = (
            f"  loopback floor at {r['size_mb']:g} MB (kernel work only; per {f['block_bytes']:,}-byte block UDP "
            f"{f['udp_send_us']:.1f} + {f['udp_recv_us']:.1f} us, TCP {f['tcp_send_us']:.1f} + "
            f"{f['tcp_recv_us']:.1f} us sent + received): PANAMA {f['panama_cpu_ms']:.1f} ms of CPU "
            f"({r['sends_per_call']:,.0f} sent, {r['datagrams_per_call']:,.0f} received; measured "
            f"{f['panama_over_floor']:.2f}x it)"
        )
        if "gloo_over_floor" in f:
            line += (
                f", gloo's ring {f['gloo_cpu_ms']:.1f} ms (measured {f['gloo_over_floor']:.2f}x it); "
                f"ratio at the floors {f['ratio']:.2f}"
            )
        lines.append(line)
    for r in rows:
        per = r.get("switch_payload_gbps_per_cpu_by_daemon", {})
        parts = ", ".join(
            f"{k} {v:.2f}" + (f" ({per[k]:.1f} per CPU s)" if k in per else "")
            for k, v in r.get("switch_payload_gbps_by_daemon", {}).items()
        )
        lines.append(f"  payload Gb/s summed per daemon at {r['size_mb']:g} MB: {parts}")
    return "\n".join(lines)


def write_results(rows: list[dict[str, Any]], cfg: BenchConfig, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"config": cfg.to_dict(), "results": rows}, indent=2))
    flat = []
    for r in rows:
        r = dict(r)
        for name, ms in r.pop("panama_cpu_ms_by_process", {}).items():
            r[f"panama_cpu_ms_{name}"] = ms
        for key, v in r.pop("floor", {}).items():
            r[f"floor_{key}"] = v
        for key in ("switch_payload_gbps_by_daemon", "switch_payload_gbps_per_cpu_by_daemon"):
            for name, v in r.pop(key, {}).items():
                r[f"{key.removesuffix('_by_daemon')}_{name}"] = v
        flat.append(r)
    keys = sorted({k for r in flat for k in r})
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(flat)
