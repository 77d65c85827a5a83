"""In-memory fabric: run the PANAMA protocol core without a network.

This is the smallest driver of the core: workers (:class:`WorkerTransport`) and
accelerators (:class:`Accelerator`) joined by in-memory links that can lose, duplicate,
reorder and CE-mark packets, over simulated integer-picosecond time. Links have a fixed
delay and no bandwidth limit (the packet-level simulator in :mod:`panama.sim` models
rates, queues and PFC). Use it for experiments on the protocol itself and for tests.

Layout: ``leaves`` leaf accelerators; worker ``r`` of every job sits under leaf
``r % leaves``. With one leaf, that leaf is the root of all trees. With several, tree
``t`` of every job is rooted at root accelerator ``root{t}`` above all leaves (two tiers).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from panama.core.accelerator import Accelerator, cwnd_cap_for_slots
from panama.core.codec import DEFAULT_PAYLOAD_ELEMS
from panama.core.packet import CE, FLAG_RESULT, NOT_ECT, Packet
from panama.core.transport import TransportError, WorkerTransport
from panama.core.units import ms, us


class FabricError(RuntimeError):
    """The in-memory run could not finish (retries exhausted, stalled, or event budget spent)."""


@dataclass
class FabricReport:
    """What happened in one :func:`allreduce` run of the in-memory fabric."""

    simulated_ps: int = 0
    events: int = 0
    link_packets: int = 0
    lost: int = 0
    duplicated: int = 0
    marked: int = 0
    accelerators: dict[str, dict] = field(default_factory=dict)
    occupancy_before_release: dict[str, dict] = field(default_factory=dict)
    occupancy_after_release: dict[str, int] = field(default_factory=dict)
    peak_tree_use: dict[str, list[dict]] = field(default_factory=dict)
    workers: dict[Hashable, list[dict]] = field(default_factory=dict)

    def total_retransmissions(self) -> int:
        return sum(w["retransmissions"] for ws in self.workers.values() for w in ws)


_DELIVER_ACC = 0
_DELIVER_WORKER = 1
_TIMER = 2
_START = 3  # a job arrives: its trees are installed and its workers start their first call
_NEXT_CALL = 4  # a worker starts its next call (``calls`` > 1)


class _Rand:
    """Batched uniform draws from a seeded Generator (per-packet calls into numpy are slow)."""

    def __init__(self, rng: np.random.Generator, batch: int = 8192):
        self._rng = rng
        self._batch = batch
        self._buf: list[float] = []

    def __call__(self) -> float:
        if not self._buf:
            self._buf = self._rng.random(self._batch).tolist()
        return self._buf.pop()


def _check_prob(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")


def allreduce(
    inputs: Sequence[np.ndarray] | Mapping[Hashable, Sequence[np.ndarray]],
    *,
    trees: int = 1,
    leaves: int = 1,
    loss: float = 0.0,
    duplicate: float = 0.0,
    reorder: bool = False,
    ecn: float = 0.0,
    ecn_down: float = 0.0,
    seed: int = 0,
    cc: str = "dctcp",
    cc_options: dict | None = None,
    path_window: int | None = None,
    payload_elems: int = DEFAULT_PAYLOAD_ELEMS,
    packet_memory: int = 4096,
    link_delay_ps: int = us(1),
    max_events: int = 50_000_000,
    max_retries: int = 30,
    start_ps: Mapping[Hashable, int] | None = None,
    calls: int = 1,
    gap_ps: int = 0,
    trace_windows: bool = False,
    return_report: bool = False,
    in_place: bool = False,
):
    """Sum float32 vectors across workers through in-memory accelerators.

    ``inputs``: a list (one float32 array per worker, rank order) or a dict
    ``job -> list`` to run several jobs at once through the same accelerators.
    ``loss``/``duplicate``: per-packet probabilities on every link; ``reorder``: random
    extra link delay (up to 8x the base delay) so packets overtake each other; ``ecn``:
    probability that a link marks an ECT packet CE; ``ecn_down``: the same for result
    packets only (congestion on the way down, below the roots). ``start_ps``: when each job (by key)
    arrives, default 0: its trees are installed then, as at admission, and its workers
    begin. ``calls``: consecutive allreduces of the same input per worker, each started
    ``gap_ps`` after that worker's previous one finished (an idle gap, e.g. compute).
    ``max_retries``: per packet, as in :class:`WorkerTransport`. ``path_window``: every
    tree's path window (``WorkerTransport(path_windows=...)``, the ceiling of
    ``cc="dctcp-path"``; None: none). ``in_place``: each
    worker reduces its own copy of its input in place (``start(now, buf, out=buf)``, as
    DDP reduces its buckets), refilled from the input at every call. Returns the per-worker
    outputs of the last call (list, or dict of lists), plus a :class:`FabricReport` when
    ``return_report`` (its ``workers`` entries list ``finished_ps``, when each call
    ended). Raises :class:`FabricError` when the run cannot finish.
    """
    single = not isinstance(inputs, Mapping)
    jobs_in: dict[Hashable, Sequence[np.ndarray]] = {0: inputs} if single else dict(inputs)  # type: ignore[dict-item]
    if not jobs_in:
        raise ValueError("no jobs given")
    if trees < 1:
        raise ValueError(f"trees must be >= 1, got {trees}")
    if leaves < 1:
        raise ValueError(f"leaves must be >= 1, got {leaves}")
    for name, value in (("loss", loss), ("duplicate", duplicate), ("ecn", ecn), ("ecn_down", ecn_down)):
        _check_prob(name, value)
    for key, arrays in jobs_in.items():
        if len(arrays) < 1:
            raise ValueError(f"job {key!r} has no workers")
        for rank, a in enumerate(arrays):
            a = np.asarray(a)
            if a.dtype != np.float32 or a.ndim != 1:
                raise TypeError(f"job {key!r} rank {rank}: need a 1-D float32 array, got {a.dtype} {a.shape}")
            if a.shape != np.shape(arrays[0]):
                raise ValueError(f"job {key!r} rank {rank}: length {a.shape[0]} differs from rank 0's {len(arrays[0])}")

    starts = {key: 0 for key in jobs_in}
    for key, at in (start_ps or {}).items():
        if key not in starts:
            raise ValueError(f"start_ps names unknown job {key!r}")
        if not isinstance(at, int) or at < 0:
            raise ValueError(f"start_ps of job {key!r} must be an integer >= 0 ps, got {at!r}")
        starts[key] = at
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    if gap_ps < 0:
        raise ValueError(f"gap_ps must be >= 0, got {gap_ps}")

    rand = _Rand(np.random.default_rng(seed))
    report = FabricReport()

    # ---- accelerators; a job's trees are installed when it starts (its admission)
    leaf_names = [f"leaf{i}" for i in range(leaves)]
    root_names = [f"root{t}" for t in range(trees)] if leaves > 1 else []
    accs: dict[str, Accelerator] = {
        name: Accelerator(packet_memory, payload_elems, name=name) for name in leaf_names + root_names
    }
    job_ids = {key: i + 1 for i, key in enumerate(jobs_in)}
    workers: dict[tuple[int, int], WorkerTransport] = {}
    worker_leaf: dict[tuple[int, int], str] = {}
    calls_done: dict[tuple[int, int], list[int]] = {}
    own: dict[tuple[int, int], np.ndarray] = {}  # in_place: each worker's buffer, reduced in place
    jobs_at: dict[str, int] = {}  # switch -> installed jobs (a job's trees there split its share)

    def install(key: Hashable) -> None:
        """Install job ``key``'s trees and build its workers with the caps a controller's
        plan would give them (the accelerators' own rule, as shares stand now)."""
        job_id, arrays = job_ids[key], jobs_in[key]
        by_leaf: dict[str, list[tuple[int, int]]] = {}
        for rank in range(len(arrays)):
            node = (job_id, rank)
            worker_leaf[node] = leaf_names[rank % leaves]
            by_leaf.setdefault(worker_leaf[node], []).append(node)
        tree_switches = []
        for t in range(trees):
            if leaves == 1:
                accs[leaf_names[0]].install_tree(job_id, t, by_leaf[leaf_names[0]], None)
                tree_switches.append([leaf_names[0]])
            else:
                root = root_names[t]
                accs[root].install_tree(job_id, t, list(by_leaf), None)
                for leaf, nodes in by_leaf.items():
                    accs[leaf].install_tree(job_id, t, nodes, root)
                tree_switches.append([root, *by_leaf])
        for sw in {sw for switches in tree_switches for sw in switches}:
            jobs_at[sw] = jobs_at.get(sw, 0) + 1
        caps = [
            min(
                cwnd_cap_for_slots(packet_memory // jobs_at[sw] // (1 if sw in root_names else trees)) for sw in sw_list
            )
            for sw_list in tree_switches
        ]
        for rank in range(len(arrays)):
            workers[(job_id, rank)] = WorkerTransport(
                job_id,
                rank,
                trees,
                payload_elems=payload_elems,
                cwnd_caps=caps,
                path_windows=None if path_window is None else [path_window] * trees,
                cc=cc,
                cc_options=cc_options,
                initial_rto_ps=link_delay_ps * 40,
                min_rto_ps=link_delay_ps * 20,
                max_rto_ps=ms(100),
                max_retries=max_retries,
                trace_windows=trace_windows,
            )
            calls_done[(job_id, rank)] = []

    # ---- event loop
    heap: list[tuple] = []
    seq = 0
    timer_at: dict[tuple[int, int], int] = {}
    delay = link_delay_ps
    jitter = 8 * link_delay_ps if reorder else 0

    def transmit(src: Hashable, dst: Hashable, pkt: Packet, now: int, kind: int) -> None:
        # The codepoint travels beside the packet (set on delivery): one packet object
        # may be on several links at once (a result sent to every child).
        nonlocal seq
        report.link_packets += 1
        if loss and rand() < loss:
            report.lost += 1
            return
        codepoint = pkt.ecn
        if codepoint != NOT_ECT and codepoint != CE:
            mark = ecn + ecn_down if pkt.flags & FLAG_RESULT else ecn
            if mark and rand() < mark:
                codepoint = CE
                report.marked += 1
        at = now + delay + (int(rand() * jitter) if jitter else 0)
        seq += 1
        heapq.heappush(heap, (at, seq, kind, dst, pkt, src, codepoint))
        if duplicate and rand() < duplicate:
            report.duplicated += 1
            seq += 1
            again = at + (int(rand() * jitter) if jitter else delay)
            heapq.heappush(heap, (again, seq, kind, dst, pkt, src, codepoint))

    def pump(node: tuple[int, int], now: int) -> None:
        nonlocal seq
        w = workers[node]
        leaf = worker_leaf[node]
        for pkt in w.poll(now):
            transmit(node, leaf, pkt, now, _DELIVER_ACC)
        deadline = w.timer()
        if deadline is not None and timer_at.get(node) != deadline:
            timer_at[node] = deadline
            seq += 1
            heapq.heappush(heap, (deadline, seq, _TIMER, node, None, None, 0))

    def start_call(node: tuple[int, int], now: int) -> None:
        key = keys[node[0]]
        w = workers[node]
        data = np.asarray(jobs_in[key][node[1]])
        if in_place:
            buf = own.get(node)
            if buf is None:
                buf = own[node] = np.empty_like(data)
            buf[:] = data
            w.start(now, buf, out=buf)
        else:
            w.start(now, data)
        if w.done:  # an empty vector: nothing to send
            call_finished(node, now)
        pump(node, now)

    def call_finished(node: tuple[int, int], now: int) -> None:
        nonlocal remaining, finished_ps, seq
        done = calls_done[node]
        done.append(now)
        if len(done) == calls:
            remaining -= 1
            finished_ps = now
        else:
            seq += 1
            heapq.heappush(heap, (now + gap_ps, seq, _NEXT_CALL, node, None, None, 0))

    keys = {job_id: key for key, job_id in job_ids.items()}
    remaining = sum(len(a) for a in jobs_in.values())  # workers with calls left
    finished_ps = 0
    for key in jobs_in:  # jobs present from the start are admitted together, then begin
        if starts[key] == 0:
            install(key)
    for key in jobs_in:
        seq += 1
        heapq.heappush(heap, (starts[key], seq, _START, key, None, None, 0))

    now = 0
    events = 0
    # Run until every worker finished its calls and every packet in flight has arrived
    # (the closing acks free what the accelerators retained for the workers).
    while remaining or heap:
        if not heap:
            raise FabricError(f"stalled at t={now} ps with {remaining} workers unfinished: {_missing(workers)}")
        now, _, kind, dst, pkt, src, codepoint = heapq.heappop(heap)
        events += 1
        if events > max_events:
            raise FabricError(
                f"event budget {max_events} spent with {remaining} workers unfinished: {_missing(workers)}"
            )
        if kind == _DELIVER_ACC:
            pkt.ecn = codepoint
            for destinations, out in accs[dst].receive(pkt, src):
                for to in destinations:
                    transmit(dst, to, out, now, _DELIVER_WORKER if to in workers else _DELIVER_ACC)
        elif kind == _DELIVER_WORKER:
            pkt.ecn = codepoint
            w = workers[dst]
            was_done = w.done
            w.receive(pkt, now)
            pump(dst, now)
            if w.done and not was_done:
                call_finished(dst, now)
        elif kind == _TIMER:
            if timer_at.get(dst) != now:
                continue  # superseded timer (lazy cancellation)
            del timer_at[dst]
            w = workers[dst]
            try:
                w.handle_timer(now)
            except TransportError as exc:
                raise FabricError(f"worker {dst}: {exc}") from exc
            pump(dst, now)
        elif kind == _NEXT_CALL:
            start_call(dst, now)
        else:  # _START: a job arrives (installed now unless it was there from t=0)
            job_id = job_ids[dst]
            if (job_id, 0) not in workers:
                install(dst)
            for rank in range(len(jobs_in[dst])):
                start_call((job_id, rank), now)

    report.simulated_ps = finished_ps
    report.events = events
    for name, acc in accs.items():
        acc.check_invariants()
        report.occupancy_before_release[name] = acc.occupancy()
        report.peak_tree_use[name] = [
            {"job": key, "tree": t, **acc.tree_status(job_ids[key], t)}
            for key in jobs_in
            for t in range(trees)
            if acc.has_tree(job_ids[key], t)
        ]
    for name, acc in accs.items():
        for job_id in list(acc.jobs()):
            acc.remove_job(job_id)
        acc.check_invariants()
        report.occupancy_after_release[name] = acc.used_slots
        report.accelerators[name] = acc.stats()
    outputs: dict[Hashable, list[np.ndarray]] = {}
    for key, arrays in jobs_in.items():
        job_id = job_ids[key]
        outputs[key] = [workers[(job_id, r)].result() for r in range(len(arrays))]
        report.workers[key] = [
            {**_worker_stats(workers[(job_id, r)]), "finished_ps": calls_done[(job_id, r)]} for r in range(len(arrays))
        ]
    result = outputs[0] if single else outputs
    return (result, report) if return_report else result


def _worker_stats(w: WorkerTransport) -> dict:
    return {
        "rank": w.rank,
        "packets_sent": w.stats["packets_sent"],
        "retransmissions": w.stats["retransmissions"],
        "timeouts": w.stats["timeouts"],
        "results": w.stats["results"],
        "ece_results": w.stats["ece_results"],
        "ignored": dict(w.stats["ignored"]),
        "windows": w.windows(),
        "alphas": w.alphas(),
        "window_trace": list(w.window_trace),
    }


def _missing(workers: Mapping[tuple[int, int], WorkerTransport]) -> str:
    parts = []
    for (job_id, rank), w in workers.items():
        if not w.done:
            miss = w.missing()
            parts.append(f"job {job_id} rank {rank} lacks {len(miss)} results, first (tree, seq) {miss[:3]}")
    return "; ".join(parts[:5])
