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
import inspect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields

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


@dataclass(frozen=True)
class Links:
    """What every in-memory link does to a packet: ``loss`` and ``duplicate``
    probabilities, ``reorder`` (a random extra delay up to 8x the base one), ``ecn``
    (probability of a CE mark on an ECT packet) and ``ecn_down`` (added for results), a
    fixed ``delay_ps``."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: bool = False
    ecn: float = 0.0
    ecn_down: float = 0.0
    delay_ps: int = us(1)

    def check(self) -> None:
        for name, value in (("loss", self.loss), ("duplicate", self.duplicate), ("ecn", self.ecn)):
            _check_prob(name, value)
        _check_prob("ecn_down", self.ecn_down)


@dataclass(frozen=True)
class FabricOptions:
    """Everything about an in-memory run but its links and its inputs (see
    :func:`allreduce`'s docstring for each field); the one place their defaults live."""

    trees: int = 1
    leaves: int = 1
    seed: int = 0
    cc: str = "dctcp-or"
    cc_options: dict | None = None
    path_window: int | None = None
    payload_elems: int = DEFAULT_PAYLOAD_ELEMS
    packet_memory: int = 4096
    max_events: int = 50_000_000
    max_retries: int = 30
    start_ps: Mapping[Hashable, int] | None = None
    calls: int = 1
    gap_ps: int = 0
    trace_windows: bool = False
    in_place: bool = False


# allreduce's link keywords and the Links fields they set.
_LINK_KEYWORDS = {f.name: f.name for f in fields(Links) if f.name != "delay_ps"} | {"link_delay_ps": "delay_ps"}


def _allreduce_signature() -> inspect.Signature:
    """allreduce's keywords as introspection (help, IDEs) shows them: the fields of
    :class:`Links` and :class:`FabricOptions` with their defaults."""
    params = [inspect.Parameter("inputs", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    link_defaults = {f.name: f.default for f in fields(Links)}
    for keyword, field_name in _LINK_KEYWORDS.items():
        params.append(inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY, default=link_defaults[field_name]))
    for f in fields(FabricOptions):
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default))
    params.append(inspect.Parameter("return_report", inspect.Parameter.KEYWORD_ONLY, default=False))
    return inspect.Signature(params)


def allreduce(
    inputs: Sequence[np.ndarray] | Mapping[Hashable, Sequence[np.ndarray]],
    *,
    return_report: bool = False,
    **options,
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

    The run itself is a :class:`FabricRun`: build, :meth:`~FabricRun.run`,
    :meth:`~FabricRun.outputs`.
    """
    single = not isinstance(inputs, Mapping)
    jobs_in: dict[Hashable, Sequence[np.ndarray]] = {0: inputs} if single else dict(inputs)  # type: ignore[dict-item]
    link_options = {_LINK_KEYWORDS[k]: options.pop(k) for k in list(options) if k in _LINK_KEYWORDS}
    unknown = sorted(set(options) - {f.name for f in fields(FabricOptions)})
    if unknown:
        raise TypeError(f"allreduce() got unexpected keyword argument(s): {', '.join(unknown)}")
    fab = FabricRun(jobs_in, links=Links(**link_options), options=FabricOptions(**options))
    fab.run()
    outputs = fab.outputs()
    result = outputs[0] if single else outputs
    return (result, fab.report) if return_report else result


allreduce.__signature__ = _allreduce_signature()  # type: ignore[attr-defined]


class FabricRun:
    """One run of the in-memory fabric (see :func:`allreduce`), in named steps:
    :meth:`_check` the inputs, :meth:`_build_accelerators`, :meth:`install` a job's trees
    and workers at its admission, then :meth:`run` the event loop (its handlers:
    :meth:`_deliver_to_accelerator`, :meth:`_deliver_to_worker`, :meth:`_timer`,
    :meth:`start_call`, :meth:`_start_job`; links are :meth:`transmit`), and finally
    :meth:`outputs` (which also completes :attr:`report`).

    Events are ``(time_ps, seq, kind, dst, packet, src, codepoint)`` tuples on a heap; the
    random draws and the pushes happen in one fixed order, so a seed gives one run."""

    def __init__(
        self,
        jobs_in: dict[Hashable, Sequence[np.ndarray]],
        *,
        links: Links = Links(),
        options: FabricOptions = FabricOptions(),
    ):
        self.jobs_in = jobs_in
        self.links = links
        self.options = options
        self.starts = self._check(options.start_ps)
        self.rand = _Rand(np.random.default_rng(options.seed))
        self.report = FabricReport()
        self._build_accelerators()
        self.job_ids = {key: i + 1 for i, key in enumerate(jobs_in)}
        self.keys = {job_id: key for key, job_id in self.job_ids.items()}
        self.workers: dict[tuple[int, int], WorkerTransport] = {}
        self.worker_leaf: dict[tuple[int, int], str] = {}
        self.calls_done: dict[tuple[int, int], list[int]] = {}
        self.own: dict[tuple[int, int], np.ndarray] = {}  # in_place: each worker's buffer, reduced in place
        self.jobs_at: dict[str, int] = {}  # switch -> installed jobs (a job's trees there split its share)
        self.heap: list[tuple] = []
        self.seq = 0
        self.timer_at: dict[tuple[int, int], int] = {}
        self.delay = links.delay_ps
        self.jitter = 8 * links.delay_ps if links.reorder else 0
        self.remaining = sum(len(a) for a in jobs_in.values())  # workers with calls left
        self.finished_ps = 0
        self.events = 0

    # ------------------------------------------------------------------ set-up
    def _check(self, start_ps: Mapping[Hashable, int] | None) -> dict[Hashable, int]:
        """Validate the inputs (ValueError/TypeError naming what is wrong); the jobs' start times."""
        jobs_in = self.jobs_in
        if not jobs_in:
            raise ValueError("no jobs given")
        if self.options.trees < 1:
            raise ValueError(f"trees must be >= 1, got {self.options.trees}")
        if self.options.leaves < 1:
            raise ValueError(f"leaves must be >= 1, got {self.options.leaves}")
        self.links.check()
        for key, arrays in jobs_in.items():
            if len(arrays) < 1:
                raise ValueError(f"job {key!r} has no workers")
            for rank, a in enumerate(arrays):
                a = np.asarray(a)
                if a.dtype != np.float32 or a.ndim != 1:
                    raise TypeError(f"job {key!r} rank {rank}: need a 1-D float32 array, got {a.dtype} {a.shape}")
                if a.shape != np.shape(arrays[0]):
                    raise ValueError(
                        f"job {key!r} rank {rank}: length {a.shape[0]} differs from rank 0's {len(arrays[0])}"
                    )
        starts = {key: 0 for key in jobs_in}
        for key, at in (start_ps or {}).items():
            if key not in starts:
                raise ValueError(f"start_ps names unknown job {key!r}")
            if not isinstance(at, int) or at < 0:
                raise ValueError(f"start_ps of job {key!r} must be an integer >= 0 ps, got {at!r}")
            starts[key] = at
        if self.options.calls < 1:
            raise ValueError(f"calls must be >= 1, got {self.options.calls}")
        if self.options.gap_ps < 0:
            raise ValueError(f"gap_ps must be >= 0, got {self.options.gap_ps}")
        return starts

    def _build_accelerators(self) -> None:
        """One accelerator per leaf, and one root per tree above them when there are several
        leaves; a job's trees are installed when it starts (its admission)."""
        self.leaf_names = [f"leaf{i}" for i in range(self.options.leaves)]
        self.root_names = [f"root{t}" for t in range(self.options.trees)] if self.options.leaves > 1 else []
        self.accs: dict[str, Accelerator] = {
            name: Accelerator(self.options.packet_memory, self.options.payload_elems, name=name)
            for name in self.leaf_names + self.root_names
        }

    def install(self, key: Hashable) -> None:
        """Install job ``key``'s trees and build its workers with the caps a controller's
        plan would give them (the accelerators' own rule, as shares stand now)."""
        job_id, arrays = self.job_ids[key], self.jobs_in[key]
        leaves, trees, leaf_names, root_names, accs = (
            self.options.leaves,
            self.options.trees,
            self.leaf_names,
            self.root_names,
            self.accs,
        )
        by_leaf: dict[str, list[tuple[int, int]]] = {}
        for rank in range(len(arrays)):
            node = (job_id, rank)
            self.worker_leaf[node] = leaf_names[rank % leaves]
            by_leaf.setdefault(self.worker_leaf[node], []).append(node)
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
        jobs_at = self.jobs_at
        for sw in {sw for switches in tree_switches for sw in switches}:
            jobs_at[sw] = jobs_at.get(sw, 0) + 1
        caps = [
            min(
                cwnd_cap_for_slots(self.options.packet_memory // jobs_at[sw] // (1 if sw in root_names else trees))
                for sw in sw_list
            )
            for sw_list in tree_switches
        ]
        delay = self.links.delay_ps
        for rank in range(len(arrays)):
            self.workers[(job_id, rank)] = WorkerTransport(
                job_id,
                rank,
                trees,
                payload_elems=self.options.payload_elems,
                cwnd_caps=caps,
                path_windows=None if self.options.path_window is None else [self.options.path_window] * trees,
                cc=self.options.cc,
                cc_options=self.options.cc_options,
                initial_rto_ps=delay * 40,
                min_rto_ps=delay * 20,
                max_rto_ps=ms(100),
                max_retries=self.options.max_retries,
                trace_windows=self.options.trace_windows,
            )
            self.calls_done[(job_id, rank)] = []

    # ------------------------------------------------------------------ links and workers
    def _push(self, event: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (event[0], self.seq, *event[1:]))

    def transmit(self, src: Hashable, dst: Hashable, pkt: Packet, now: int, kind: int) -> None:
        """Put ``pkt`` on the link ``src`` -> ``dst``: lost, CE-marked, delayed (jitter) and
        duplicated as the links say. The codepoint travels beside the packet (set on
        delivery): one packet object may be on several links at once (a result sent to
        every child)."""
        links, rand, report = self.links, self.rand, self.report
        report.link_packets += 1
        if links.loss and rand() < links.loss:
            report.lost += 1
            return
        codepoint = pkt.ecn
        if codepoint != NOT_ECT and codepoint != CE:
            mark = links.ecn + links.ecn_down if pkt.flags & FLAG_RESULT else links.ecn
            if mark and rand() < mark:
                codepoint = CE
                report.marked += 1
        jitter = self.jitter
        at = now + self.delay + (int(rand() * jitter) if jitter else 0)
        self._push((at, kind, dst, pkt, src, codepoint))
        if links.duplicate and rand() < links.duplicate:
            report.duplicated += 1
            again = at + (int(rand() * jitter) if jitter else self.delay)
            self._push((again, kind, dst, pkt, src, codepoint))

    def pump(self, node: tuple[int, int], now: int) -> None:
        """Send what worker ``node`` wants sent and re-arm its timer."""
        w = self.workers[node]
        leaf = self.worker_leaf[node]
        for pkt in w.poll(now):
            self.transmit(node, leaf, pkt, now, _DELIVER_ACC)
        deadline = w.timer()
        if deadline is not None and self.timer_at.get(node) != deadline:
            self.timer_at[node] = deadline
            self._push((deadline, _TIMER, node, None, None, 0))

    def start_call(self, node: tuple[int, int], now: int) -> None:
        """Worker ``node`` starts an allreduce of its input."""
        key = self.keys[node[0]]
        w = self.workers[node]
        data = np.asarray(self.jobs_in[key][node[1]])
        if self.options.in_place:
            buf = self.own.get(node)
            if buf is None:
                buf = self.own[node] = np.empty_like(data)
            buf[:] = data
            w.start(now, buf, out=buf)
        else:
            w.start(now, data)
        if w.done:  # an empty vector: nothing to send
            self.call_finished(node, now)
        self.pump(node, now)

    def call_finished(self, node: tuple[int, int], now: int) -> None:
        """Worker ``node`` has its result: its next call after ``gap_ps``, or it is done."""
        done = self.calls_done[node]
        done.append(now)
        if len(done) == self.options.calls:
            self.remaining -= 1
            self.finished_ps = now
        else:
            self._push((now + self.options.gap_ps, _NEXT_CALL, node, None, None, 0))

    # ------------------------------------------------------------------ event loop
    def run(self) -> None:
        """Admit the jobs present from the start together, schedule every job's start, and
        run until every worker finished its calls and every packet in flight has arrived
        (the closing acks free what the accelerators retained for the workers)."""
        for key in self.jobs_in:
            if self.starts[key] == 0:
                self.install(key)
        for key in self.jobs_in:
            self._push((self.starts[key], _START, key, None, None, 0))
        heap = self.heap
        now = 0
        handlers = {
            _DELIVER_ACC: self._deliver_to_accelerator,
            _DELIVER_WORKER: self._deliver_to_worker,
            _TIMER: self._timer,
            _NEXT_CALL: self._next_call,
            _START: self._start_job,
        }
        while self.remaining or heap:
            if not heap:
                raise FabricError(
                    f"stalled at t={now} ps with {self.remaining} workers unfinished: {_missing(self.workers)}"
                )
            now, _, kind, dst, pkt, src, codepoint = heapq.heappop(heap)
            self.events += 1
            if self.events > self.options.max_events:
                raise FabricError(
                    f"event budget {self.options.max_events} spent with {self.remaining} workers unfinished: "
                    f"{_missing(self.workers)}"
                )
            handlers[kind](now, dst, pkt, src, codepoint)

    def _deliver_to_accelerator(self, now: int, dst: str, pkt: Packet, src: Hashable, codepoint: int) -> None:
        pkt.ecn = codepoint
        workers = self.workers
        for destinations, out in self.accs[dst].receive(pkt, src):
            for to in destinations:
                self.transmit(dst, to, out, now, _DELIVER_WORKER if to in workers else _DELIVER_ACC)

    def _deliver_to_worker(self, now: int, dst: tuple[int, int], pkt: Packet, src: Hashable, codepoint: int) -> None:
        pkt.ecn = codepoint
        w = self.workers[dst]
        was_done = w.done
        w.receive(pkt, now)
        self.pump(dst, now)
        if w.done and not was_done:
            self.call_finished(dst, now)

    def _timer(self, now: int, dst: tuple[int, int], *_: object) -> None:
        if self.timer_at.get(dst) != now:
            return  # superseded timer (lazy cancellation)
        del self.timer_at[dst]
        try:
            self.workers[dst].handle_timer(now)
        except TransportError as exc:
            raise FabricError(f"worker {dst}: {exc}") from exc
        self.pump(dst, now)

    def _next_call(self, now: int, dst: tuple[int, int], *_: object) -> None:
        self.start_call(dst, now)

    def _start_job(self, now: int, key: Hashable, *_: object) -> None:
        """A job arrives (installed now unless it was there from t=0); its workers begin."""
        job_id = self.job_ids[key]
        if (job_id, 0) not in self.workers:
            self.install(key)
        for rank in range(len(self.jobs_in[key])):
            self.start_call((job_id, rank), now)

    # ------------------------------------------------------------------ results
    def outputs(self) -> dict[Hashable, list[np.ndarray]]:
        """Every worker's result by job, after :meth:`run`; completes :attr:`report`
        (accelerator occupancy and tree use before the jobs are released, then after)."""
        report, accs, workers = self.report, self.accs, self.workers
        report.simulated_ps = self.finished_ps
        report.events = self.events
        for name, acc in accs.items():
            acc.check_invariants()
            report.occupancy_before_release[name] = acc.occupancy()
            report.peak_tree_use[name] = [
                {"job": key, "tree": t, **acc.tree_status(self.job_ids[key], t)}
                for key in self.jobs_in
                for t in range(self.options.trees)
                if acc.has_tree(self.job_ids[key], t)
            ]
        for name, acc in accs.items():
            for job_id in list(acc.jobs()):
                acc.remove_job(job_id)
            acc.check_invariants()
            report.occupancy_after_release[name] = acc.used_slots
            report.accelerators[name] = acc.stats()
        outputs: dict[Hashable, list[np.ndarray]] = {}
        for key, arrays in self.jobs_in.items():
            job_id = self.job_ids[key]
            outputs[key] = [workers[(job_id, r)].result() for r in range(len(arrays))]
            report.workers[key] = [
                {**_worker_stats(workers[(job_id, r)]), "finished_ps": self.calls_done[(job_id, r)]}
                for r in range(len(arrays))
            ]
        return outputs


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
