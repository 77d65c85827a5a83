"""Mechanism diagnostics of one run: where queues build, how long PFC pauses, what short flows wait for.

Computed after the run from state the simulator keeps anyway (the queue sampler's
samples of every switch output port, the ports' pause counters, the flows' completion
times), so they cost nothing on the hot path (except ``short_flow_queueing``, below).
``summary.json`` carries them under
``diagnostics`` (documented in docs/simulator.md):

* ``queues_by_tier``: per *direction* of a tier (``tor->host`` is the last hop to a
  host, where incast and result fan-out queue; ``tor->agg`` an uplink), over every
  sample of every port of that direction: occupancy ``mean_bytes``, ``p50_bytes``,
  ``p99_bytes``, ``max_bytes``; ``above_k_share``, the share of samples in which the
  port's backlog exceeded its ECN threshold K (time above K, as a fraction of the
  sampled time); and the busiest port's name and mean.
* ``pfc_by_tier``: per direction, ``paused_s`` (sum over its ports of the time each was
  paused by its downstream) and ``pauses`` (PAUSE frames that port received).
* ``short_flow_delay``: per size bucket of the short background flows (below
  ``SHORT_FLOW_BYTES``; finer than ``fct_by_size`` because queueing dominates tiny flows
  and bandwidth the larger short ones), FCT p50/p99 and the *extra delay* over the
  flow's ideal (unloaded) FCT, mean and p99: the time the network added.
* ``short_flow_queueing``: per bucket, where that time was spent: queueing delay per port
  direction and per kind of traffic ahead (``own``, ``short``, ``bulk``, ``ring``,
  ``panama``, ``other``), mean µs per flow and share, for all the bucket's flows
  (``all``) and for its tail (``tail``: flows at or above the bucket's FCT p99). Measured
  at enqueue by :mod:`panama.sim.qahead` (the one diagnostic that touches the hot path: a
  bit test per packet hop).
* ``panama_bursts``: aggregation packets per µs per switch output port, gradients and
  results apart (:mod:`panama.sim.bursts`, measured at the switches' PANAMA hook).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from panama.core.units import PS_PER_US
from panama.sim.qahead import short_flow_queueing

__all__ = ["SHORT_BUCKETS", "diagnostics", "pfc_by_tier", "queues_by_tier", "short_flow_delay"]

# Short-flow size buckets: (key, label, [low, high) bytes). The label names the bucket in
# ``short_flow_delay`` and in tables; the key names per-bucket metrics of the experiments
# (``short_fct_p99_us_<key>``).
SHORT_BUCKETS: tuple[tuple[str, str, int, int], ...] = (
    ("lt2k", "<2KB", 0, 2_000),
    ("2k_10k", "2-10KB", 2_000, 10_000),
    ("10k_50k", "10-50KB", 10_000, 50_000),
    ("50k_100k", "50-100KB", 50_000, 100_000),
)


def direction(port: Any) -> str:
    """``owner kind -> peer kind`` of a port (``tor->host``, ``agg->tor``, ...)."""
    return f"{port.owner.kind}->{port.peer.kind}"


def _k_bytes(port: Any) -> int | None:
    """The port's ECN threshold in bytes (None when it never marks)."""
    k_ps = port.k_ps
    if k_ps >= 1 << 60:  # the "never" sentinel
        return None
    return int(k_ps // port.ps_per_byte)


def queues_by_tier(ports: Sequence[Any], samples: Sequence[Sequence[int]]) -> dict[str, dict[str, Any]]:
    """Occupancy statistics per port direction from a sampler's ``ports`` and ``samples``."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, port in enumerate(ports):
        groups[direction(port)].append(i)
    out: dict[str, dict[str, Any]] = {}
    for tier in sorted(groups):
        idx = groups[tier]
        cols = [np.asarray(samples[i], dtype=np.int64) for i in idx]
        if not cols or not cols[0].size:
            continue
        pooled = np.concatenate(cols)
        above, counted = 0, 0
        for i, col in zip(idx, cols):
            k = _k_bytes(ports[i])
            if k is not None:
                above += int(np.count_nonzero(col > k))
                counted += col.size
        means = [float(c.mean()) for c in cols]
        busiest = int(np.argmax(means))
        out[tier] = {
            "ports": len(idx),
            "samples": int(pooled.size),
            "mean_bytes": float(pooled.mean()),
            "p50_bytes": float(np.percentile(pooled, 50)),
            "p99_bytes": float(np.percentile(pooled, 99)),
            "max_bytes": int(pooled.max()),
            "above_k_share": above / counted if counted else None,
            "busiest_port": ports[idx[busiest]].name,
            "busiest_mean_bytes": means[busiest],
        }
    return out


def pfc_by_tier(ports: Iterable[Any], ps_per_s: int) -> dict[str, dict[str, Any]]:
    """Paused time (s) and PAUSE frames received, per port direction (only directions that paused)."""
    paused: dict[str, int] = defaultdict(int)
    pauses: dict[str, int] = defaultdict(int)
    for port in ports:
        if port.paused_ps or port.pauses:
            tier = direction(port)
            paused[tier] += port.paused_ps
            pauses[tier] += port.pauses
    return {t: {"paused_s": paused[t] / ps_per_s, "pauses": pauses[t]} for t in sorted(paused)}


def short_flow_delay(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per :data:`SHORT_BUCKETS` bucket of completed background flows: FCT and extra delay (µs)."""
    done = [r for r in rows if r["kind"] == "background" and r["fct_us"] is not None]
    out = []
    for _, label, lo, hi in SHORT_BUCKETS:
        sel = [r for r in done if lo <= r["size_bytes"] < hi]
        fct = np.asarray([r["fct_us"] for r in sel], dtype=np.float64)
        extra = np.asarray(
            [r["fct_us"] - r["ideal_fct_us"] for r in sel if r["ideal_fct_us"] is not None], dtype=np.float64
        )
        out.append(
            {
                "bucket": label,
                "flows": len(sel),
                "fct_p50_us": float(np.percentile(fct, 50)) if fct.size else None,
                "fct_p99_us": float(np.percentile(fct, 99)) if fct.size else None,
                "extra_delay_mean_us": float(extra.mean()) if extra.size else None,
                "extra_delay_p99_us": float(np.percentile(extra, 99)) if extra.size else None,
            }
        )
    return out


def diagnostics(sim: Any, flow_rows: Iterable[dict[str, Any]], ps_per_s: int) -> dict[str, Any]:
    """The ``diagnostics`` block of summary.json for a finished :class:`~panama.sim.runner.Simulation`."""
    sampler = sim.sampler
    qa = getattr(sim, "queue_ahead", None)
    flow_rows = list(flow_rows)
    return {
        "queues_by_tier": queues_by_tier(sampler.ports, sampler.samples) if sampler is not None else {},
        "pfc_by_tier": pfc_by_tier(sim.net.ports, ps_per_s),
        "short_flow_delay": short_flow_delay(flow_rows),
        "panama_bursts": sim.bursts.summary() if getattr(sim, "bursts", None) is not None else {},
        "short_flow_queueing": short_flow_queueing(qa, flow_rows, SHORT_BUCKETS, PS_PER_US) if qa is not None else [],
    }
