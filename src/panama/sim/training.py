"""Data-parallel training jobs in the simulator.

Model
-----
A job has ``N`` workers (one per host). Each worker repeats ``iterations`` times:
compute for ``compute_ps`` (no network traffic), then allreduce its ``gradient_bytes``
gradient. Workers progress independently: a worker starts computing iteration ``i + 1``
as soon as *its* allreduce ``i`` is done (the allreduce itself keeps them in step).

At its start time the job asks the controller (:class:`panama.core.controller.Controller`)
for a plan. In-network schemes (``panama``: ``num_trees`` trees, cc ``dctcp``;
``ina-single``: one tree, cc ``dctcp``; ``ina-fixed``: ``num_trees`` trees, cc
``fixed``) install the plan on the PSwitch accelerators and run one core
:class:`~panama.core.transport.WorkerTransport` per worker through
:class:`~panama.sim.panama_host.PanamaWorker`. A job the controller does not admit
(gradient below the threshold, no room on an accelerator, one rack with one host...)
and every ``ring`` job use :class:`~panama.sim.ring.RingAllreduce` over DCTCP. When the
last worker finishes, the plan is uninstalled and released.

Records
-------
One :class:`IterationRecord` per iteration: ``start_ps`` (first worker starts
computing), ``comm_start_ps`` (last worker enters the allreduce), ``end_ps`` (last
worker has the result), ``time_ps`` (``end_ps`` minus the previous iteration's
``end_ps``, or minus the job start for the first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from panama.core.controller import Controller, JobPlan, install, uninstall
from panama.core.errors import FieldError
from panama.core.paths import path_windows
from panama.core.transport import TransportError, WorkerTransport
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import Network
from panama.sim.packet import PANAMA_OVERHEAD_BYTES
from panama.sim.panama_host import PanamaHost, PanamaWorker
from panama.sim.ring import RingAllreduce
from panama.sim.scenario import SCHEMES

__all__ = ["IterationRecord", "TrainingJob", "TransportSettings", "IN_NETWORK_SCHEMES", "SCHEMES"]

IN_NETWORK_SCHEMES = tuple(s for s in SCHEMES if s != "ring")  # summed by the accelerators
FLOAT_BYTES = 4


@dataclass(frozen=True)
class TransportSettings:
    """Worker-transport settings of in-network schemes (see ``WorkerTransport``)."""

    num_trees: int = 4
    payload_elems: int = 361
    initial_window: float = 10.0
    fixed_window: float = 64.0
    dctcp_g: float = 1 / 16
    initial_rto_ps: int = 1_000_000_000
    min_rto_ps: int = 500_000_000
    max_rto_ps: int = 100_000_000_000
    min_pto_ps: int | None = None  # tail-loss probes off (the scenario's panama.min_pto_us)
    max_retries: int = 30
    cc: str = "dctcp-path"  # the reaction of panama and ina-single (the scenario's panama.cc)
    path_floor_share: float = 1.0  # dctcp-path: the floor as a share of the path window
    hop_latency_ps: int = 0  # accelerator latency per hop, for the path windows

    def trees_for(self, scheme: str) -> int:
        return 1 if scheme == "ina-single" else self.num_trees

    def cc_for(self, scheme: str) -> tuple[str, dict[str, Any]]:
        if scheme == "ina-fixed":
            return "fixed", {"initial_window": self.fixed_window}
        if self.cc == "dctcp-path":
            return self.cc, {
                "initial_window": self.initial_window,
                "g": self.dctcp_g,
                "floor_share": self.path_floor_share,
            }
        return self.cc, {"initial_window": self.initial_window, "g": self.dctcp_g}

    def packet_bytes(self) -> int:
        """Wire bytes of a full PANAMA packet (what the path windows are counted in)."""
        return PANAMA_OVERHEAD_BYTES + FLOAT_BYTES * self.payload_elems


@dataclass
class IterationRecord:
    job: str
    iteration: int
    scheme: str
    start_ps: int
    comm_start_ps: int
    end_ps: int
    time_ps: int

    def row(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "iteration": self.iteration,
            "scheme": self.scheme,
            "start_us": self.start_ps / 1e6,
            "comm_start_us": self.comm_start_ps / 1e6,
            "end_us": self.end_ps / 1e6,
            "iteration_time_us": self.time_ps / 1e6,
            "comm_time_us": (self.end_ps - self.comm_start_ps) / 1e6,
        }


@dataclass
class _Iter:
    start_ps: int | None = None
    comm_start_ps: int = 0
    done: int = 0


@dataclass
class TrainingJob:
    """One data-parallel job (see module docstring). Build it, then call :meth:`schedule`."""

    name: str
    hosts: Sequence[str]
    gradient_bytes: int
    compute_ps: int
    iterations: int
    start_ps: int
    scheme: str
    # filled while running
    scheme_used: str | None = None
    plan: JobPlan | None = None
    admission: str = ""
    records: list[IterationRecord] = field(default_factory=list)
    finish_ps: int | None = None
    error: str | None = None
    initial_cwnd_cap: int | None = None

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise FieldError("scheme", f"must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if len(set(self.hosts)) != len(self.hosts) or len(self.hosts) < 2:
            raise FieldError("hosts", f"job {self.name} needs at least two distinct hosts, got {list(self.hosts)}")
        self.hosts = list(self.hosts)
        self.n = len(self.hosts)
        self.num_elems = -(-self.gradient_bytes // FLOAT_BYTES)
        self._iters: dict[int, _Iter] = {}
        self._rank_iter = [0] * self.n
        self._finished_ranks = 0
        self._prev_end = self.start_ps
        self._workers: list[PanamaWorker] = []
        self._dispatchers: list[PanamaHost] = []
        self._ring: RingAllreduce | None = None
        self._env: _Env | None = None
        # Per rank, built once at the start: the callback that enters its allreduce after
        # computing (no closure per iteration).
        self._allreduce_of: list[Callable[[], None]] = []
        self.on_finish: Callable[[TrainingJob], None] | None = None

    # ------------------------------------------------------------------ setup
    def schedule(
        self,
        engine: Engine,
        net: Network,
        controller: Controller,
        accelerators: Mapping[str, Any],
        dispatchers: Mapping[str, PanamaHost],
        ring_stack: Dctcp,
        settings: TransportSettings,
        on_finish: Callable[[TrainingJob], None] | None = None,
    ) -> None:
        """Arrange for the job to start at ``start_ps``."""
        self._env = _Env(engine, net, controller, accelerators, dispatchers, ring_stack, settings)
        self.on_finish = on_finish
        engine.at(max(self.start_ps, engine.now), self._start)

    @property
    def done(self) -> bool:
        return self.finish_ps is not None

    @property
    def in_network(self) -> bool:
        return self.scheme_used in IN_NETWORK_SCHEMES

    def _start(self) -> None:
        env = self._env
        assert env is not None
        self.start_ps = env.engine.now
        self._prev_end = self.start_ps
        scheme = self.scheme
        if scheme in IN_NETWORK_SCHEMES:
            trees = env.settings.trees_for(scheme)
            plan = env.controller.admit(self.name, self.hosts, self.gradient_bytes, trees)
            self.plan = plan
            self.admission = plan.reason
            if plan.admitted:
                install(plan, env.accelerators)
                self._setup_in_network(plan, scheme)
                self.scheme_used = scheme
            else:
                self.scheme_used = "ring"
        else:
            self.admission = "ring requested"
            self.scheme_used = "ring"
        if self.scheme_used == "ring":
            self._ring = RingAllreduce(env.ring_stack, self.hosts, self.gradient_bytes, self._rank_done, name=self.name)
        self._allreduce_of = [partial(self._allreduce, rank) for rank in range(self.n)]
        for rank in range(self.n):
            self._begin_iteration(rank)

    def _setup_in_network(self, plan: JobPlan, scheme: str) -> None:
        self._workers = [None] * self.n
        self._dispatchers = [self._env.dispatchers[h] for h in self.hosts]
        self._cc = self._env.settings.cc_for(scheme)
        # The trees' path windows: fixed by the topology and the plan, the same for every worker.
        s = self._env.settings
        self._path_windows = path_windows(
            self._env.controller.topology, plan.trees, s.packet_bytes(), hop_latency_ps=s.hop_latency_ps
        )

    def _make_worker(self, rank: int) -> PanamaWorker:
        """The worker of ``rank``, built when it joins its first allreduce.

        Workers learn their trees from the controller at that moment and, with them,
        each tree's cwnd_cap as the controller's shares stand then
        (``Controller.tree_caps``), as a real worker registering late would: the first
        window never exceeds it (later caps come with every result). Building the
        transport at the first allreduce rather than at admission lets jobs admitted at
        the same time see each other's share. No accelerator state is read.
        """
        env = self._env
        s = env.settings
        plan = self.plan
        cc, cc_options = self._cc
        caps = env.controller.tree_caps(self.name)
        cap = min(caps)
        self.initial_cwnd_cap = cap if self.initial_cwnd_cap is None else min(cap, self.initial_cwnd_cap)
        host = self.hosts[rank]
        tr = WorkerTransport(
            plan.job_id,
            rank,
            [t.tree_id for t in plan.trees],
            payload_elems=s.payload_elems,
            cwnd_caps=caps,
            path_windows=self._path_windows,
            cc=cc,
            cc_options=cc_options,
            initial_rto_ps=s.initial_rto_ps,
            min_rto_ps=s.min_rto_ps,
            max_rto_ps=s.max_rto_ps,
            min_pto_ps=s.min_pto_ps,
            max_retries=s.max_retries,
        )
        w = PanamaWorker(
            env.engine,
            env.net,
            self._dispatchers[rank],
            env.controller.topology.tor_of(host),
            tr,
            on_done=partial(self._rank_done, rank),  # called with the worker: the rank is bound
            on_error=self._worker_error,
        )
        self._workers[rank] = w
        return w

    # ------------------------------------------------------------------ per-rank progress
    def _begin_iteration(self, rank: int) -> None:
        it = self._rank_iter[rank]
        rec = self._iters.get(it)
        if rec is None:
            rec = self._iters[it] = _Iter()
        engine = self._env.engine
        if rec.start_ps is None:
            rec.start_ps = engine.now
        if self.compute_ps > 0:
            engine.after(self.compute_ps, self._allreduce_of[rank])
        else:
            self._allreduce(rank)

    def _allreduce(self, rank: int) -> None:
        if self.error is not None:
            return
        it = self._rank_iter[rank]
        rec = self._iters[it]
        now = self._env.engine.now
        if now > rec.comm_start_ps:
            rec.comm_start_ps = now
        if self._ring is not None:
            self._ring.start(rank, it)
        else:
            w = self._workers[rank]
            if w is None:
                w = self._make_worker(rank)
            w.start(self.num_elems)

    def _worker_error(self, worker: PanamaWorker, exc: TransportError) -> None:
        if self.error is None:
            self.error = str(exc)
            self._finish()

    def _rank_done(self, rank: int, worker: PanamaWorker | None = None) -> None:
        """Rank ``rank`` has this iteration's result (``worker``: the in-network worker
        calling back, unused; the ring calls with the rank alone)."""
        it = self._rank_iter[rank]
        rec = self._iters[it]
        rec.done += 1
        now = self._env.engine.now
        if rec.done == self.n:
            self.records.append(
                IterationRecord(
                    self.name,
                    it,
                    self.scheme_used or "?",
                    rec.start_ps or 0,
                    rec.comm_start_ps,
                    now,
                    now - self._prev_end,
                )
            )
            self._prev_end = now
            del self._iters[it]
        self._rank_iter[rank] = it + 1
        if it + 1 < self.iterations:
            self._begin_iteration(rank)
        else:
            self._finished_ranks += 1
            if self._finished_ranks == self.n:
                self._finish()

    def _finish(self) -> None:
        env = self._env
        if self.finish_ps is not None:
            return
        self.finish_ps = env.engine.now
        for w, disp in zip(self._workers, self._dispatchers):
            if w is not None:
                w.detach(disp)
        if self.plan is not None:
            if self.plan.admitted:
                uninstall(self.plan, env.accelerators)
            env.controller.release(self.name)
        if self.on_finish is not None:
            self.on_finish(self)

    # ------------------------------------------------------------------ results
    @property
    def iterations_done(self) -> int:
        return len(self.records)

    def mean_iteration_ps(self) -> float | None:
        if not self.records:
            return None
        return sum(r.time_ps for r in self.records) / len(self.records)

    def training_time_ps(self) -> int | None:
        """Job start to the end of its last iteration (None while unfinished)."""
        if self.finish_ps is None or self.error is not None:
            return None
        return self.finish_ps - self.start_ps

    def worker_stats(self) -> list[dict[str, Any]]:
        """Per worker: packets/bytes sent and transport counters (in-network jobs only)."""
        out = []
        for w in self.workers:
            st = w.transport.stats
            out.append(
                {
                    "host": w.host.name,
                    "packets_out": w.packets_out,
                    "bytes_out": w.bytes_out,
                    "retransmissions": st["retransmissions"],
                    "timeouts": st["timeouts"],
                    "ece_results": st["ece_results"],
                }
            )
        return out

    @property
    def ring(self) -> RingAllreduce | None:
        return self._ring

    @property
    def workers(self) -> list[PanamaWorker]:
        """Workers built so far (in-network jobs; rank order)."""
        return [w for w in self._workers if w is not None]


@dataclass
class _Env:
    engine: Engine
    net: Network
    controller: Controller
    accelerators: Mapping[str, Any]
    dispatchers: Mapping[str, PanamaHost]
    ring_stack: Dctcp
    settings: TransportSettings
