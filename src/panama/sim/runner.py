"""Run a scenario: build the fabric, PSwitches, controller, traffic and jobs; simulate; report.

Python API
----------
``run_scenario(scenario, out_dir=None, progress=True) -> SimResult`` runs one scenario
(a :class:`~panama.sim.scenario.Scenario`, a file path or None for the built-in
default) and, with ``out_dir``, writes the output files (see :mod:`panama.sim.outputs`).
To compare schemes on the same traffic::

    base = load_scenario("examples/shared_cluster.toml")
    results = {s: run_scenario(base.with_scheme(s)) for s in SCHEMES}

Randomness: the master seed is split (``numpy.random.SeedSequence(seed).spawn``) into
independent streams for the background workload, job placement, ECMP salts, the
background TCP flows' hash salt and the ring flows' hash salt. The background flows
(times, sizes, sources, destinations, flow ids and so ECMP paths) are therefore
identical for every scheme with the same seed, and so is job placement.

Stop rule: background flows arrive during ``[background.start_ms, background.stop_ms or
duration_ms)``; the run ends when every job has finished and every background flow has
completed, or at ``max_time_ms`` (then unfinished flows and jobs are reported as such).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import numpy as np

from panama.core.controller import Controller, ControllerError
from panama.core.errors import FieldError
from panama.core.topology import HOST, Topology, TopologyError, parse_topology
from panama.core.units import PS_PER_MS, PS_PER_US
from panama.progress import StatusLine
from panama.sim import outputs
from panama.sim.bursts import BurstMeter
from panama.sim.dctcp import Dctcp, DctcpConfig, Flow
from panama.sim.engine import Engine
from panama.sim.netconfig import NetworkConfig, scenario_key
from panama.sim.network import Network, QueueSampler
from panama.sim.outputs import SimResult
from panama.sim.packet import FLAG_TRACKED
from panama.sim.panama_host import PanamaHost
from panama.sim.pswitch import PSwitchFabric
from panama.sim.qahead import QueueAhead
from panama.sim.scenario import Scenario, ScenarioError, default_scenario, load_scenario
from panama.sim.training import TrainingJob, TransportSettings
from panama.sim.workload import FlowSpec, WorkloadError, load_cdf, poisson_flows
from panama.topology_file import load_topology

__all__ = ["Simulation", "SimResult", "run_scenario", "build_topology", "frozen_gc"]

# Indices of the independent random streams spawned from the master seed.
_STREAMS = ("workload", "placement", "network", "background_tcp", "ring_tcp")


@contextlib.contextmanager
def frozen_gc() -> Iterator[None]:
    """Run the block with every object that exists now out of the cyclic garbage
    collector's sight (``gc.freeze``), back at the end (``gc.unfreeze``): the network,
    its tables and the jobs' state live as long as the run, and without this every full
    collection during the run traverses all of them again (about 60 ms each on the k=8
    fat-tree). Results do not depend on it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def build_topology(sc: Scenario) -> Topology:
    """The scenario's topology, with the scenario's rate/delay overrides applied."""
    t = sc.topology
    try:
        topo = load_topology(t.spec)
    except TopologyError as exc:
        raise ScenarioError("topology.spec", str(exc)) from None
    if t.host_rate_gbps is None and t.fabric_rate_gbps is None and t.link_delay_us is None:
        return topo
    g = nx.Graph()
    g.add_nodes_from(topo.graph.nodes(data=True))
    for a, b, d in topo.graph.edges(data=True):
        d = dict(d)
        is_host_link = topo.graph.nodes[a]["kind"] == HOST or topo.graph.nodes[b]["kind"] == HOST
        if is_host_link and t.host_rate_gbps is not None:
            d["rate_bps"] = t.host_rate_gbps * 1e9
        if not is_host_link and t.fabric_rate_gbps is not None:
            d["rate_bps"] = t.fabric_rate_gbps * 1e9
        if t.link_delay_us is not None:
            d["delay_ps"] = round(t.link_delay_us * PS_PER_US)
        g.add_edge(a, b, **d)
    params = dict(topo.params)
    params.update({k: v for k, v in t.model_dump().items() if k != "spec" and v is not None})
    try:
        return Topology(g, name=_name_as_run(topo.name, t), params=params)
    except TopologyError as exc:
        raise ScenarioError("topology", str(exc)) from None


# The spec keys of the fabric and host link rates of the built-in topology kinds.
_RATE_KEYS = {"fat-tree": ("gbps", "host_gbps"), "leaf-spine": ("fabric_gbps", "host_gbps")}


def _name_as_run(name: str, t) -> str:
    """The name of a topology with the scenario's rate and delay overrides ``t`` applied: the
    canonical spec of what runs for a built-in kind (``fat-tree:k=8,gbps=100,...`` when the
    spec said 10 but both rates are set to 100), else the file's name with the overrides."""
    kind, _, rest = name.partition(":")
    keys = _RATE_KEYS.get(kind)
    if keys is None or "=" not in rest:
        given = [
            f"{what} {v:g} {unit}"
            for what, v, unit in (
                ("host links", t.host_rate_gbps, "Gb/s"),
                ("fabric links", t.fabric_rate_gbps, "Gb/s"),
                ("link delay", t.link_delay_us, "us"),
            )
            if v is not None
        ]
        return f"{name} ({', '.join(given)})"
    items = dict(part.split("=", 1) for part in rest.split(","))
    if kind == "fat-tree":  # without host_gbps, the spec's gbps is the hosts' rate too
        items.setdefault("host_gbps", items["gbps"])
    for key, value in ((keys[0], t.fabric_rate_gbps), (keys[1], t.host_rate_gbps), ("delay_us", t.link_delay_us)):
        if value is not None:
            items[key] = f"{value:g}"
    return parse_topology(f"{kind}:" + ",".join(f"{k}={v}" for k, v in items.items())).name


def _network_error(exc: ValueError) -> ScenarioError:
    if not isinstance(exc, FieldError):
        return ScenarioError("network", str(exc))
    return ScenarioError(scenario_key(exc.field), exc.detail)


def network_config(sc: Scenario) -> NetworkConfig:
    """The simulator's network configuration of the scenario's ``[network]`` table."""
    try:
        return NetworkConfig.from_scenario(sc.network.model_dump())
    except ValueError as exc:
        raise _network_error(exc) from None


def dctcp_config(sc: Scenario) -> DctcpConfig:
    """The hosts' TCP of the scenario: its ``network.dctcp_*`` keys (timeouts in microseconds;
    the initial timeout is the minimum) and the segment size of its MTU."""
    n = sc.network
    rto_min = round(n.dctcp_min_rto_us * PS_PER_US)
    return DctcpConfig(
        mss_bytes=n.mtu_bytes - 40,
        header_bytes=40,
        init_cwnd_pkts=n.dctcp_initial_window_packets,
        initial_rto_ps=rto_min,
        min_rto_ps=rto_min,
        max_rto_ps=max(rto_min, round(n.dctcp_max_rto_us * PS_PER_US)),
    )


# The [panama] keys that are not TransportSettings' fields by the same name: renamed ones, and
# the controller's (panama.core.controller.Controller, built by Simulation). A key ending in
# ``_us`` is the field ending in ``_ps`` (rounded picoseconds).
_TRANSPORT_RENAMED = {"initial_window_packets": "initial_window", "fixed_window_packets": "fixed_window"}
_CONTROLLER_KEYS = frozenset({"threshold_bytes", "max_jobs_per_switch"})


def transport_settings(sc: Scenario) -> TransportSettings:
    """The worker-transport settings of the scenario's ``[panama]`` table, with the
    accelerators' latency (``pswitch.processing_latency_ns``) as the path windows' hop latency."""
    values = {}
    for key, value in sc.panama.model_dump().items():
        if key in _CONTROLLER_KEYS:
            continue
        if key.endswith("_us"):
            key, value = key.removesuffix("_us") + "_ps", None if value is None else round(value * PS_PER_US)
        values[_TRANSPORT_RENAMED.get(key, key)] = value
    return TransportSettings(**values, hop_latency_ps=round(sc.pswitch.processing_latency_ns * 1000))


class Simulation:
    """Everything one scenario run is made of (built in ``__init__``, run by :meth:`run`).

    Attributes useful to tests and experiments: ``engine``, ``net``, ``topology``,
    ``background`` (Dctcp of background flows), ``ring_tcp`` (Dctcp of ring allreduce
    flows), ``pswitches`` (:class:`PSwitchFabric`), ``controller``, ``jobs``
    (:class:`TrainingJob` list), ``flow_specs`` (the generated background flows),
    ``sampler`` (queue occupancy).
    """

    def __init__(self, scenario: Scenario):
        self.scenario = sc = scenario
        streams = dict(zip(_STREAMS, np.random.SeedSequence(sc.seed).spawn(len(_STREAMS)), strict=True))
        self.rngs = {k: np.random.default_rng(v) for k, v in streams.items()}
        self.topology = build_topology(sc)
        self.engine = Engine()
        try:
            self.net = Network(self.engine, self.topology, network_config(sc), rng=self.rngs["network"])
        except ValueError as exc:
            raise _network_error(exc) from None
        dcfg = dctcp_config(sc)
        self.background = Dctcp(self.net, dcfg, rng=self.rngs["background_tcp"], on_complete=self._bg_done)
        self.ring_tcp = Dctcp(self.net, dcfg, rng=self.rngs["ring_tcp"])
        # Short background flows' queueing, per hop and kind of traffic ahead (diagnostics).
        self.queue_ahead = QueueAhead(self.net.ports, self.background, outputs.SHORT_FLOW_BYTES)
        self.net.queue_ahead = self.queue_ahead
        ps = sc.pswitch
        self.pswitches = PSwitchFabric(
            self.net,
            ps.packet_memory_slots,
            latency_ps=round(ps.processing_latency_ns * 1000),
            payload_elems=sc.panama.payload_elems,
            reserve_shares=ps.reserve_shares,
        )
        try:
            self.controller = Controller(
                self.topology,
                threshold_bytes=sc.panama.threshold_bytes,
                max_jobs_per_switch=sc.panama.max_jobs_per_switch,
                packet_memory=ps.packet_memory_slots,
                reserve_shares=ps.reserve_shares,  # the same reserve the accelerators keep
            )
        except ControllerError as exc:
            key = {"packet_memory": "pswitch.packet_memory_slots"}.get(exc.field, f"panama.{exc.field}")
            raise ScenarioError(key, exc.detail if hasattr(exc, "detail") else str(exc)) from None
        # PANAMA packets per bin per switch output port (diagnostics; wraps the hooks above).
        self.bursts: BurstMeter | None = None
        if sc.burst_bin_us > 0:
            self.bursts = BurstMeter(self.engine, max(1, round(sc.burst_bin_us * PS_PER_US)))
            self.bursts.install(self.net, self.pswitches.accelerators)
        self.dispatchers = {h: PanamaHost(self.net, h) for h in self.topology.hosts}
        self.settings = transport_settings(sc)
        self.flow_specs = self._make_background()
        self.jobs = self._make_jobs()
        self._next_flow = 0
        self._jobs_left = len(self.jobs)
        self._arrivals_done = not self.flow_specs
        self._finished = False
        self.sampler: QueueSampler | None = None
        self.wall_s = 0.0

    # ------------------------------------------------------------------ construction
    def _make_background(self) -> list[FlowSpec]:
        sc = self.scenario
        b = sc.background
        if b.load == 0:
            return []
        try:
            cdf = load_cdf(b.workload)
        except WorkloadError as exc:
            raise ScenarioError("background.workload", str(exc)) from None
        hosts = self.topology.hosts
        if b.hosts is not None:
            for h in b.hosts:
                if h not in self.topology or not self.topology.is_host(h):
                    raise ScenarioError("background.hosts", f"{h!r} is not a host of {self.topology.name}")
            hosts = list(b.hosts)
        rates = {self.topology.rate_bps(h, self.topology.tor_of(h)) for h in hosts}
        stop_ms = b.stop_ms if b.stop_ms is not None else sc.duration_ms
        specs = poisson_flows(
            self.rngs["workload"],
            cdf,
            hosts,
            link_rate_bps=min(rates),
            load=b.load,
            start_ps=round(b.start_ms * PS_PER_MS),
            stop_ps=round(stop_ms * PS_PER_MS),
        )
        if b.max_flow_bytes is not None:
            cap = b.max_flow_bytes
            specs = [s if s.size_bytes <= cap else FlowSpec(s.flow_id, s.src, s.dst, cap, s.start_ps) for s in specs]
        return specs

    def _make_jobs(self) -> list[TrainingJob]:
        sc = self.scenario
        rng = self.rngs["placement"]
        hosts = self.topology.hosts
        index = {h: i for i, h in enumerate(hosts)}
        jobs = []
        free = self._placement_order(rng)  # disjoint and packed: hosts not yet given to a job
        for i, jc in enumerate(sc.jobs):
            if jc.hosts is not None:
                for h in jc.hosts:
                    if h not in index:
                        raise ScenarioError(f"jobs.{i}.hosts", f"{h!r} is not a host of {self.topology.name}")
                chosen = list(jc.hosts)
                if free is not None:
                    free = [h for h in free if h not in chosen]
            elif free is not None:
                if jc.workers > len(free):
                    raise ScenarioError(
                        f"jobs.{i}.workers",
                        f"{jc.workers} workers but only {len(free)} of {len(hosts)} hosts are left with "
                        f"placement = {sc.placement!r} (every worker on its own host)",
                    )
                chosen = sorted(free[: jc.workers], key=index.__getitem__)
                free = free[jc.workers :]
            else:
                if jc.workers > len(hosts):
                    raise ScenarioError(
                        f"jobs.{i}.workers", f"{jc.workers} workers but the topology has {len(hosts)} hosts"
                    )
                pick = rng.choice(len(hosts), size=jc.workers, replace=False)
                chosen = [hosts[k] for k in sorted(pick.tolist())]
            jobs.append(
                TrainingJob(
                    name=sc.job_name(i),
                    hosts=chosen,
                    gradient_bytes=jc.gradient_bytes,
                    compute_ps=round(jc.compute_us * PS_PER_US),
                    iterations=jc.iterations,
                    start_ps=round(jc.start_us * PS_PER_US),
                    scheme=sc.job_scheme(i),
                )
            )
        return jobs

    def _placement_order(self, rng) -> list[str] | None:
        """The order in which jobs take hosts under ``placement`` (None for ``random``): a random
        permutation (``disjoint``), or racks in topology order starting at a random rack, each
        rack's hosts in order (``packed``)."""
        placement = self.scenario.placement
        hosts = self.topology.hosts
        if placement == "random":
            return None
        if placement == "disjoint":
            return [hosts[k] for k in rng.permutation(len(hosts)).tolist()]
        racks: dict[str, list[str]] = {}
        for h in hosts:
            racks.setdefault(self.topology.tor_of(h), []).append(h)
        order = list(racks.values())
        first = int(rng.integers(len(order)))
        return [h for rack in order[first:] + order[:first] for h in rack]

    def settings_for(self, scheme: str) -> TransportSettings:
        """The worker-transport settings of a job of ``scheme``: the scenario's, with the
        source's tree reaction for ``panama-or`` (:meth:`Scenario.congestion_control`)."""
        cc = self.scenario.congestion_control(scheme)
        if scheme == "panama-or" and self.settings.cc != cc:
            return dataclasses.replace(self.settings, cc=cc)
        return self.settings

    # ------------------------------------------------------------------ running
    def _arrive(self) -> None:
        specs = self.flow_specs
        i = self._next_flow
        now = self.engine.now
        start = self.background.start_flow
        short = outputs.SHORT_FLOW_BYTES
        n = len(specs)
        while i < n and specs[i].start_ps <= now:
            s = specs[i]
            flow = start(s.src, s.dst, s.size_bytes, None)
            if s.size_bytes < short:
                flow.data_flags = FLAG_TRACKED
            i += 1
        self._next_flow = i
        if i < n:
            self.engine.at(specs[i].start_ps, self._arrive)
        else:
            self._arrivals_done = True
            self._check_end()

    def _bg_done(self, flow: Flow) -> None:
        if self._arrivals_done and self.background.active == 0:
            self._check_end()

    def _job_done(self, job: TrainingJob) -> None:
        self._jobs_left -= 1
        self._check_end()

    def _check_end(self) -> None:
        if not self._finished and self._jobs_left == 0 and self._arrivals_done and self.background.active == 0:
            self._finished = True
            self.engine.stop()

    def start(self) -> None:
        """Schedule the jobs, the background arrivals and the queue sampler (done by
        :meth:`run`; call it directly to drive the run with :meth:`advance`)."""
        sc = self.scenario
        eng = self.engine
        for job in self.jobs:
            job.schedule(
                eng,
                self.net,
                self.controller,
                self.pswitches.accelerators,
                self.dispatchers,
                self.ring_tcp,
                self.settings_for(job.scheme),
                on_finish=self._job_done,
            )
        if self.flow_specs:
            eng.at(self.flow_specs[0].start_ps, self._arrive)
        self.sampler = self.net.sample_queues(round(sc.sample_interval_us * PS_PER_US))
        self._check_end()
        self._slice_ps = max(PS_PER_US * 50, round(sc.duration_ms * PS_PER_MS / 200))

    def advance(self, until_ps: int | None = None) -> bool:
        """Simulate up to ``until_ps`` (default: the stop rule) in slices of simulated time;
        returns True once the run is over (stop rule or ``max_time_ms``)."""
        eng = self.engine
        stop = self.scenario.stop_ps
        end = stop if until_ps is None else min(stop, until_ps)
        with frozen_gc():
            while not self._finished and eng.pending() and eng.now < end:
                eng.run(until_ps=min(end, eng.now + self._slice_ps))
        return self._finished or not eng.pending() or eng.now >= stop

    def run(self, progress: bool = True) -> None:
        """Simulate until every job and flow is done or ``max_time_ms`` (see module docstring)."""
        eng = self.engine
        self.start()
        stop = self.scenario.stop_ps
        wall0 = time.perf_counter()
        status = _Status(self) if progress else None
        with frozen_gc():
            while not self._finished and eng.pending() and eng.now < stop:
                eng.run(until_ps=min(stop, eng.now + self._slice_ps))
                if status is not None:
                    status.tick()
        self.sampler.stop()
        self.wall_s = time.perf_counter() - wall0
        if status is not None:
            status.close()

    @property
    def finished(self) -> bool:
        """True when the run ended by itself (every job and background flow done)."""
        return self._finished


class _Status:
    """The simulation's status line on stderr, refreshed every second once a run lasts over 2 s."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.line = StatusLine(interval_s=1.0, first_after_s=2.0)
        self.total_iters = sum(j.iterations for j in sim.jobs)

    def tick(self) -> None:
        self.line.update(self._text)

    def _text(self, elapsed_s: float) -> str:
        sim = self.sim
        ev = sim.engine.events
        iters = sum(j.iterations_done for j in sim.jobs)
        bg = sim.background
        return (
            f"[simulate] t={sim.engine.now / PS_PER_MS:.3f} ms (arrivals until {sim.scenario.duration_ms:g} ms)"
            f" | {ev / 1e6:.2f}M events ({ev / max(elapsed_s, 1e-9) / 1e3:.0f}k/s)"
            f" | flows {bg.completed}/{len(sim.flow_specs)}"
            f" | iterations {iters}/{self.total_iters} | {elapsed_s:.0f}s"
        )

    def close(self) -> None:
        self.line.close()


def run_scenario(
    scenario: Scenario | str | Path | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    *,
    plots: bool = True,
    table: bool = False,
) -> SimResult:
    """Run one scenario (object, file path, or None = built-in default); write outputs to
    ``out_dir`` if given (``plots=False`` skips the PNGs); print the terminal table if
    ``table``. Raises :class:`ScenarioError` naming the key for invalid scenarios."""
    if scenario is None:
        scenario = default_scenario()
    elif not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    sim = Simulation(scenario)
    sim.run(progress=progress)
    result = outputs.collect(sim)
    if out_dir is not None:
        outputs.write(result, Path(out_dir), plots=plots)
    if table:
        print(outputs.terminal_table(result))
    return result
