"""Per-hop attribution of short-flow queueing: at every hop, how long a short flow's packet
waits and behind which kind of traffic.

How it is measured (issue 18): the data packets of tracked flows (the background flows
below ``SHORT_FLOW_BYTES``) carry :data:`panama.sim.packet.FLAG_TRACKED`; the ports'
enqueue paths test that one bit and, for a tracked packet only, call
:meth:`QueueAhead.add` with the port and the time. Queues are FIFO, so everything a
packet will wait for at that port is already in it: the packets of the port's pipe whose
transmission has not ended (the one on the wire counts only for its remaining
serialisation time) and, on a paused lossless port, the held packets before it. Their
serialisation times on that port are summed per *kind of traffic ahead* and per port
direction (``tor->host``, ``host->tor``, ...). The result is the queueing delay the
packet meets, exactly, when the port is not paused; a PFC pause adds to it (reported
apart as ``pfc_by_tier``). Every other packet pays one bit test per hop. The module is
compiled with the simulator (``qahead.pxd``: the walk reads the packets' and the port's
fields in C) and gives the same numbers interpreted.

Kinds of traffic ahead (:data:`KINDS`):

* ``own``: earlier packets (and ACKs) of the same flow (its own window);
* ``short``: other background flows below ``SHORT_FLOW_BYTES``;
* ``bulk``: background flows of at least ``SHORT_FLOW_BYTES``;
* ``ring``: TCP of ring allreduce (jobs below the in-network threshold, every job under
  the ``ring`` scheme);
* ``panama``: in-network aggregation packets (gradients up the trees, results down);
* ``other``: anything else (packets of unknown origin; none in the built-in scenarios).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from panama.sim.packet import KIND_ACK, KIND_DATA, KIND_PANAMA

__all__ = ["KINDS", "QueueAhead", "short_flow_queueing"]

KINDS = ("own", "short", "bulk", "ring", "panama", "other")
_OWN, _SHORT, _BULK, _RING, _PANAMA, _OTHER = range(len(KINDS))
_NK = len(KINDS)
_KIND_ACK, _KIND_DATA, _KIND_PANAMA = KIND_ACK, KIND_DATA, KIND_PANAMA  # C constants when compiled


class _Track:
    """The accumulators of one tracked flow id: ``row[direction * _NK + kind]`` (ps; a C
    int64 array, so the compiled walk adds to it without boxing) and ``hops``, the
    flow's tracked packet-hops."""

    def __init__(self, n: int):
        self.row = array("q", bytes(8 * n))
        self.hops = 0

    def ps(self) -> list[int]:
        """A copy of ``row``, as a list of ints."""
        return list(self.row)


class _Source:
    """What the packets with one ``deliver`` callback are: their ``flow`` (None: not a
    flow's), its ``kind`` of traffic (never ``own``: that depends on the packet charged),
    and, once a packet of theirs is tracked, the flow id's :class:`_Track`."""

    def __init__(self, flow: Any, kind: int):
        self.flow = flow
        self.kind = kind
        self.track: _Track | None = None


class QueueAhead:
    """Accumulates, per tracked flow, the serialisation time (ps) of the traffic ahead of its
    packets at every hop, per (port direction, kind). ``background`` is the Dctcp stack of
    the background flows (flows of any other stack are ``ring``); ``short_bytes`` splits
    background flows into ``short`` and ``bulk``.

    Per tracked packet: one dict lookup for its callback, one for its port's direction;
    per packet ahead: none when its callback is one of the last three the walk met (a
    window of one flow, an ACK train, a few flows interleaved), else one."""

    def __init__(self, ports: Sequence[Any], background: Any, short_bytes: int):
        self.background = background
        self.short_bytes = short_bytes
        dirs: dict[str, int] = {}
        # port -> its direction's first index in a row (direction * _NK; ports hash by identity)
        self._base: dict[Any, int] = {}
        for p in ports:
            d = f"{p.owner.kind}->{p.peer.kind}"
            self._base[p] = dirs.setdefault(d, len(dirs)) * _NK
        self.directions = list(dirs)
        self._tracks: dict[int, _Track] = {}  # flow id -> accumulators, in first-tracked order
        # A flow's callback (SimPacket.deliver) -> what its packets are: worked out once.
        self._by_callback: dict[Any, _Source] = {}

    @property
    def rows(self) -> dict[int, list[int]]:
        """Flow id -> its accumulators (``[direction * len(KINDS) + kind]``, ps; a copy), for
        the tracked flows in the order their first packet was tracked."""
        return {fid: t.ps() for fid, t in self._tracks.items()}

    @property
    def hops(self) -> dict[int, int]:
        """Flow id -> its tracked packet-hops (a copy), keyed as :attr:`rows`."""
        return {fid: t.hops for fid, t in self._tracks.items()}

    def _source(self, d: Any) -> _Source:
        """The :class:`_Source` of the packets whose ``deliver`` is ``d``."""
        s = self._by_callback.get(d)
        if s is None:
            s = self._by_callback[d] = self._classify(d)
        return s

    def _classify(self, d: Any) -> _Source:
        """What the packets whose ``deliver`` is ``d`` (a flow's callback) are."""
        f = getattr(d, "__self__", None)
        if f is None:
            return _Source(None, _OTHER)
        if f.stack is not self.background:
            return _Source(f, _RING)
        size = f.size_bytes
        return _Source(f, _SHORT if size is not None and size < self.short_bytes else _BULK)

    def _track(self, src: _Source) -> _Track:
        """The accumulators of ``src``'s flow (tracked): created at its first tracked packet."""
        fid = src.flow.id
        t = self._tracks.get(fid)
        if t is None:
            t = self._tracks[fid] = _Track(len(self.directions) * _NK)
        src.track = t
        return t

    def _kind(self, q: Any, own: Any) -> int:
        """The kind of ``q`` (a packet ahead) for a packet of flow ``own``."""
        k = q.kind
        if k == _KIND_PANAMA:
            return _PANAMA
        if k != _KIND_DATA and k != _KIND_ACK:
            return _OTHER
        return self._flow_kind(q.deliver, own)

    def _flow_kind(self, d: Any, own: Any) -> int:
        """The kind of a data or ACK packet whose ``deliver`` is ``d``, for a packet of flow ``own``."""
        s = self._source(d)
        return _OWN if s.flow is own else s.kind

    def add(self, port: Any, pkt: Any, now: int) -> None:
        """``pkt`` (tracked) was just queued at ``port`` at time ``now``: charge what is ahead."""
        src = self._source(pkt.deliver)
        own = src.flow
        t = src.track
        if t is None:
            t = self._track(src)
        t.hops += 1
        row = t.row
        base = self._base[port]
        ppb = port.ps_per_byte
        delay = port.delay_ps
        if port.paused:
            # The packet is the last one held; everything held before it and the rest of
            # the packet on the wire are ahead.
            held = port.waiting
            n = len(held) - 1
            for i, (q, _) in enumerate(held):
                if i == n:
                    break
                row[base + self._kind(q, own)] += q.size_bytes * ppb
            i = len(port.pipe) - 1
        else:
            i = len(port.pipe) - 2  # the last one is the packet itself, just pushed
        pipe = port.pipe
        # The kinds of the last three callbacks met (a, then b, then c; the packet's own
        # first): queues are runs of one flow's window, or a few flows' packets interleaved
        # (one's data, another's ACKs), so few packets ahead need a dict lookup (on the
        # 2 ms 100 Gb/s slice 28 k of 1.28 M; 102 k remembering two, 485 k remembering one).
        a = pkt.deliver
        ka = _OWN
        b = c = None
        kb = kc = _OTHER
        while i >= 0:
            q = pipe.at(i)
            i -= 1
            end = q.arrive_ps - delay
            if end <= now:
                break
            k = q.kind
            if k == _KIND_PANAMA:
                k = _PANAMA
            elif k != _KIND_DATA and k != _KIND_ACK:
                k = _OTHER
            else:
                d = q.deliver
                if d is a:
                    k = ka
                elif d is b:
                    k = kb
                    b, kb, a, ka = a, ka, d, k
                else:
                    if d is c:
                        k = kc
                    else:
                        k = self._flow_kind(d, own)
                    c, kc, b, kb, a, ka = b, kb, a, ka, d, k
            tx = q.size_bytes * ppb
            row[base + k] += tx if end - now > tx else end - now

    def flow_ps(self, flow_id: int) -> list[int] | None:
        """The accumulators of one flow (``[direction * len(KINDS) + kind]``, ps), or None."""
        t = self._tracks.get(flow_id)
        return None if t is None else t.ps()


def short_flow_queueing(
    qa: QueueAhead, rows: Iterable[dict[str, Any]], buckets: Sequence[tuple[str, str, int, int]], ps_per_us: int
) -> list[dict[str, Any]]:
    """Per size bucket of the finished short background flows: queueing delay per port
    direction and per kind of traffic ahead, summed over the flow's hops and packets
    (packet-µs per flow, mean over the bucket's flows; a multi-packet flow's packets wait in
    parallel, so this exceeds its FCT), with each part's share of the total; and the same for
    the bucket's *tail*, the flows at or above its FCT p99."""
    dirs = qa.directions
    out = []
    done = [r for r in rows if r["kind"] == "background" and r["fct_us"] is not None]
    for _, label, lo, hi in buckets:
        sel = [r for r in done if lo <= r["size_bytes"] < hi]
        mats = [qa.flow_ps(r["flow_id"]) for r in sel]
        pairs = [(r, m) for r, m in zip(sel, mats) if m is not None]
        entry: dict[str, Any] = {"bucket": label, "flows": len(pairs)}
        if pairs:
            fct = np.asarray([r["fct_us"] for r, _ in pairs], dtype=np.float64)
            arr = np.asarray([m for _, m in pairs], dtype=np.float64).reshape(len(pairs), len(dirs), _NK) / ps_per_us
            p99 = float(np.percentile(fct, 99))
            entry["all"] = _split(arr, dirs)
            entry["tail"] = _split(arr[fct >= p99], dirs)
            entry["tail"]["fct_min_us"] = p99
        out.append(entry)
    return out


def _split(arr: np.ndarray, dirs: Sequence[str]) -> dict[str, Any]:
    """Mean per flow (µs) of total queueing, per direction, per kind, per (direction, kind), with shares."""
    n = arr.shape[0]
    mean = arr.mean(axis=0) if n else np.zeros(arr.shape[1:])
    total = float(mean.sum())

    def part(x: np.ndarray) -> dict[str, Any]:
        v = float(x.sum())
        return {"mean_us": v, "share": v / total if total > 0 else None}

    by_dir = {d: part(mean[i]) for i, d in enumerate(dirs)}
    by_kind = {k: part(mean[:, j]) for j, k in enumerate(KINDS)}
    cells = {
        f"{d}/{k}": round(float(mean[i, j]), 3)
        for i, d in enumerate(dirs)
        for j, k in enumerate(KINDS)
        if mean[i, j] > 0
    }
    return {
        "flows": int(n),
        "queueing_mean_us": total,
        "by_direction": {d: v for d, v in by_dir.items() if v["mean_us"] > 0},
        "by_kind": by_kind,
        "by_direction_kind_us": cells,
    }
