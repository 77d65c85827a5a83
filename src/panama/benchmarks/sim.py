"""``panama bench sim``: simulator speed against a minimal heapq loop, plus a DCTCP sanity check.

Reference scenario (fixed): ``n_senders`` (4) long-lived DCTCP flows from 4 hosts through
one switch to one receiver; every link 10 Gbps with 10 us propagation delay; step ECN
marking at K = 65 packets of 1500 B; 0.1 simulated seconds. The bottleneck is the
switch port towards the receiver.

Baseline (same run): a minimal store-and-forward loop on ``heapq`` that moves the same
number of packet hops over the same links: per hop one heap pop, the link's
``busy_until`` update, one heap push; packets circulate data->ACK->data on fixed routes
with a fixed window per flow. It has no queues to mark, no transport, no counters: it
is the floor any heap-based packet simulator in Python pays per hop.

Reported: packet hops per second (CPU seconds, see ``_clock``) for both, their ratio (simulator / loop), goodput
of the scenario, Jain fairness of the per-flow goodputs, mean / p99 occupancy of the
bottleneck queue (sampled every 10 us), drops. The loop is timed in several slices
interleaved with slices of the simulation (see :func:`run_bench`), so that load on a
shared machine affects both sides alike.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from heapq import heappop, heappush
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from panama._ext import child_env, compiled
from panama.benchmarks.settings import SimBenchConfig
from panama.core.errors import FieldError
from panama.core.units import PS_PER_S, ms, us
from panama.sim.dctcp import Dctcp, DctcpConfig, goodput_bps, jain
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig
from panama.sim.runner import frozen_gc

__all__ = [
    "reference_graph",
    "build_reference",
    "summarize_reference",
    "run_reference",
    "minimal_loop",
    "run_bench",
    "compare_pure",
    "bench_sim_report",
    "format_bench_sim",
    "PANAMA_SCENARIO",
    "SimBenchConfig",
]

# The clock of every rate here: CPU seconds of the process that runs the side. On an
# idle machine that is its wall time; on a shared one it leaves out the time other
# processes held the core, which made two runs of the wall-clock version disagree by
# up to 2x (docs/performance.md). The keys keep their ``wall_s`` names.
_clock = time.process_time

RATE_BPS = 10e9
DELAY_PS = us(10)
DATA_BYTES = 1500
ACK_BYTES = 64


def reference_graph(n_senders: int = 4, rate_bps: float = RATE_BPS, delay_ps: int = DELAY_PS) -> nx.Graph:
    """Star: hosts ``h0..h{n-1}`` (senders) and ``h{n}`` (receiver) on switch ``tor0``."""
    g = nx.Graph()
    g.add_node("tor0", kind="tor")
    for i in range(n_senders + 1):
        g.add_node(f"h{i}", kind="host")
        g.add_edge(f"h{i}", "tor0", rate_bps=rate_bps, delay_ps=delay_ps)
    return g


def build_reference(n_senders: int = 4, seed: int = 1, *, sample_interval_ps: int = us(10)) -> dict[str, Any]:
    """Set up the reference scenario (nothing run yet): engine, network, flows, sampler."""
    rng = np.random.default_rng(seed)
    eng = Engine()
    net = Network(eng, reference_graph(n_senders), NetworkConfig(), rng=rng)
    tcp = Dctcp(net, DctcpConfig(), rng=rng)
    rx = f"h{n_senders}"
    flows = [tcp.start_flow(f"h{i}", rx, None, 0) for i in range(n_senders)]
    bottleneck = net.port("tor0", rx)
    sampler = net.sample_queues(sample_interval_ps, [bottleneck])
    return {
        "engine": eng,
        "network": net,
        "flows": flows,
        "bottleneck": bottleneck,
        "sampler": sampler,
        "n_senders": n_senders,
    }


def summarize_reference(ref: dict[str, Any], duration_ps: int, events: int, wall_s: float) -> dict[str, Any]:
    """Results of a finished reference run (see :func:`run_reference`)."""
    net = ref["network"]
    flows = ref["flows"]
    hops = net.hops()
    gp = [goodput_bps(f, duration_ps) for f in flows]
    q = ref["sampler"].stats(ref["bottleneck"], DATA_BYTES)
    counters = net.counters()
    return {
        "duration_ps": duration_ps,
        "n_senders": ref["n_senders"],
        "goodput_gbps": sum(gp) / 1e9,
        "flow_goodput_gbps": [x / 1e9 for x in gp],
        "goodput_fraction": sum(gp) / RATE_BPS,
        "jain": jain(gp),
        "queue_mean_pkts": q["mean_pkts"],
        "queue_p99_pkts": q["p99_pkts"],
        "queue_max_pkts": q["max_bytes"] / DATA_BYTES,
        "ecn_k_pkts": NetworkConfig().ecn_k_for(RATE_BPS) / DATA_BYTES,
        "drops": counters["drops_total"],
        "ecn_marks": counters["ecn_marks"],
        "timeouts": sum(f.timeouts for f in flows),
        "packet_hops": hops,
        "events": events,
        "sim_wall_s": wall_s,
        "sim_hops_per_s": hops / wall_s if wall_s > 0 else float("inf"),
    }


def run_reference(
    duration_ps: int = ms(100), n_senders: int = 4, seed: int = 1, *, sample_interval_ps: int = us(10)
) -> dict[str, Any]:
    """Run the reference DCTCP scenario; returns results and simulator speed."""
    ref = build_reference(n_senders, seed, sample_interval_ps=sample_interval_ps)
    t0 = _clock()
    events = ref["engine"].run(duration_ps)
    wall = _clock() - t0
    return summarize_reference(ref, duration_ps, events, wall)


def ps_per_byte(rate_bps: float) -> int:
    """Serialisation time of one byte at ``rate_bps``, rounded up as the simulator's ports do."""
    return -(-8 * PS_PER_S // int(rate_bps))


def minimal_loop(
    n_hops: int,
    n_flows: int = 4,
    window: int = 32,
    rate_bps: float = RATE_BPS,
    delay_ps: int = DELAY_PS,
    busy_out: list[int] | None = None,
) -> tuple[int, float]:
    """Move ``n_hops`` packet hops through a bare heapq store-and-forward loop over the
    reference topology. Returns (hops, wall seconds); ``busy_out``, if given, receives each
    link's final busy-until time (ps), so that another implementation of the same loop
    (``bench/sim_c_floor.py``, in C) can be checked against this one."""
    ppb = ps_per_byte(rate_bps)
    tx_data, tx_ack = DATA_BYTES * ppb, ACK_BYTES * ppb
    # Links: sender i -> switch (i), switch -> receiver (n), receiver -> switch (n+1),
    # switch -> sender i (n+2+i). Route of flow i: data up, data down, ACK up, ACK down.
    n = n_flows
    routes = [((i, tx_data), (n, tx_data), (n + 1, tx_ack), (n + 2 + i, tx_ack)) for i in range(n)]
    busy = [0] * (2 * n + 2)
    heap: list[tuple[int, int, int, int]] = []
    seq = 0
    for f in range(n):
        for _ in range(window):
            seq += 1
            heap.append((0, seq, f, 0))
    heap.sort()
    pop, push = heappop, heappush
    hops = 0
    t0 = _clock()
    while hops < n_hops:
        t, _, f, hop = pop(heap)
        link, tx = routes[f][hop]
        b = busy[link]
        if b < t:
            b = t
        b += tx
        busy[link] = b
        hops += 1
        seq += 1
        push(heap, (b + delay_ps, seq, f, (hop + 1) & 3))
    wall = _clock() - t0
    if busy_out is not None:
        busy_out.extend(busy)
    return hops, wall


def _interleaved(duration_ps: int, seed: int, slices: int) -> dict[str, Any]:
    """One repetition of :func:`run_bench`: the reference scenario in ``slices`` pieces
    of simulated time, the loop moving as many hops as each piece did right after it."""
    ref = build_reference(seed=seed)
    eng, net = ref["engine"], ref["network"]
    sim_wall = loop_wall = 0.0
    loop_hops = events = 0
    for k in range(1, slices + 1):
        before = net.hops()
        t0 = _clock()
        events += eng.run(duration_ps * k // slices)
        sim_wall += _clock() - t0
        h, w = minimal_loop(max(1_000, net.hops() - before))
        loop_hops += h
        loop_wall += w
    res = summarize_reference(ref, duration_ps, events, sim_wall)
    res["loop_hops"] = loop_hops
    res["loop_hops_per_s"] = loop_hops / loop_wall
    res["ratio"] = res["sim_hops_per_s"] / res["loop_hops_per_s"]
    return res


def run_bench(duration_ps: int = ms(100), seed: int = 1, slices: int = 10, repeats: int = 5) -> dict[str, Any]:
    """The reference scenario and the baseline loop in one process, interleaved: the
    simulation runs in ``slices`` consecutive pieces of simulated time, and after each
    piece the loop moves as many hops as the piece did, so a machine whose load changes
    during the run slows both sides alike. The whole is repeated ``repeats`` times (a
    compiled run of the default 100 ms lasts about 0.06 s of wall time, too short to
    time once): the rates and ratio reported are those of the repetition with the median
    ratio, ``ratio_min``/``ratio_max`` the spread. Every repetition gives the same
    figures (asserted)."""
    if repeats < 1:
        raise FieldError("repeats", f"must be >= 1, got {repeats!r}")
    minimal_loop(20_000)  # warm-up
    runs = [_interleaved(duration_ps, seed, slices) for _ in range(repeats)]
    for r in runs[1:]:
        assert all(r[k] == runs[0][k] for k in REFERENCE_FIGURES), "reference run not deterministic"
    ratios = [r["ratio"] for r in runs]
    res = dict(sorted(runs, key=lambda r: r["ratio"])[(repeats - 1) // 2])
    res["repeats"] = repeats
    res["ratio_min"] = min(ratios)
    res["ratio_max"] = max(ratios)
    res["compiled"] = compiled()
    return res


# ---------------------------------------------------------------------- compiled vs pure
# Figures of the reference run that depend on the simulation only (not on the machine).
REFERENCE_FIGURES = (
    "packet_hops",
    "events",
    "goodput_gbps",
    "flow_goodput_gbps",
    "jain",
    "queue_mean_pkts",
    "queue_p99_pkts",
    "queue_max_pkts",
    "drops",
    "ecn_marks",
    "timeouts",
)

PANAMA_SCENARIO = Path(__file__).resolve().parents[1] / "data" / "scenarios" / "panama_heavy.toml"


def paper_100g_scenario(duration_ms: float, seed: int):
    """The ``paper-100g`` benchmark scenario: the shared-cluster ``paper`` preset
    (``panama.experiments.cluster_scenario``) at 100 Gb/s on every link, scheme ``panama``,
    cut at ``duration_ms``: the background flows from 0, the first allreduce at about
    6.5 ms (seed 1), so the default 10 ms holds about 77,000 accelerator contributions
    among 31 million packet hops."""
    from panama.experiments.cluster_scenario import experiment_scenario

    return experiment_scenario("paper").with_overrides(
        [
            "scheme=panama",
            "topology.host_rate_gbps=100",
            "topology.fabric_rate_gbps=100",
            f"seed={seed}",
            f"duration_ms={duration_ms!r}",
            f"max_time_ms={duration_ms!r}",
        ]
    )


class _SlicedRun:
    """One benchmark scenario run slice by slice: ``step(k)`` simulates slice ``k`` of
    ``slices`` and returns (packet hops, wall seconds); ``figures()`` the deterministic
    results."""

    def __init__(self, scenario: str, duration_ps: int, seed: int, slices: int):
        self.scenario = scenario
        self.duration_ps = duration_ps
        self.slices = slices
        self.events = 0
        self.wall = 0.0
        if scenario == "reference":
            self.ref = build_reference(seed=seed)
            self.net = self.ref["network"]
            self.engine = self.ref["engine"]
        else:
            from panama.sim.runner import Simulation
            from panama.sim.scenario import load_scenario

            ms_ = duration_ps / 1e9
            if scenario == "paper-100g":
                sc = paper_100g_scenario(ms_, seed)
            else:
                sc = load_scenario(PANAMA_SCENARIO, [f"seed={seed}", f"duration_ms={ms_!r}", f"max_time_ms={ms_!r}"])
            self.sim = Simulation(sc)
            self.sim.start()
            self.net = self.sim.net
            self.engine = self.sim.engine

    def events_per_hop(self) -> float:
        """Engine events per packet hop so far."""
        hops = self.net.hops()
        return self.engine.events / hops if hops else 0.0

    def step(self, k: int) -> tuple[int, float]:
        before = self.net.hops()
        until = self.duration_ps * k // self.slices
        t0 = _clock()
        if self.scenario == "reference":
            with frozen_gc():
                self.events += self.engine.run(until)
        else:
            self.sim.advance(until)
        w = _clock() - t0
        self.wall += w
        return self.net.hops() - before, w

    def figures(self) -> dict[str, Any]:
        if self.scenario == "reference":
            res = summarize_reference(self.ref, self.duration_ps, self.events, self.wall)
            return {k: res[k] for k in REFERENCE_FIGURES}
        from panama.sim import outputs

        self.sim.sampler.stop()
        self.sim.wall_s = self.wall
        result = outputs.collect(self.sim)
        figures = {k: v for k, v in result.summary.items() if k not in outputs.NONDETERMINISTIC_KEYS}
        # Every flow's and every job iteration's completion (the rows of flows.csv and jobs.csv),
        # by digest: "identical" means these too, not only the summary's aggregates.
        rows = json.dumps([result.flow_rows, result.iteration_rows], sort_keys=True, default=str)
        figures["completions"] = len(result.flow_rows) + len(result.iteration_rows)
        figures["completions_sha256"] = hashlib.sha256(rows.encode()).hexdigest()
        return figures


def _pure_child() -> None:
    """The pure-Python side of :func:`compare_pure`: a child process with
    ``PANAMA_NO_EXTENSIONS=1`` that runs one slice per line read on stdin."""
    scenario, duration_ps, seed, slices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    run = _SlicedRun(scenario, duration_ps, seed, slices)
    print(json.dumps({"compiled": compiled()}), flush=True)
    for line in sys.stdin:
        k = int(line)
        if k == 0:
            print(json.dumps(run.figures()), flush=True)
            return
        hops, wall = run.step(k)
        print(json.dumps([hops, wall]), flush=True)


def _compare_once(scenario: str, duration_ps: int, seed: int, slices: int, copies: int) -> dict[str, Any]:
    """One repetition of :func:`compare_pure`: ``copies`` compiled runs here and one pure
    run in a child process, slice by slice in turn."""
    code = "import sys; from panama.benchmarks.sim import _pure_child; _pure_child()"
    child = subprocess.Popen(
        [sys.executable, "-c", code, scenario, str(duration_ps), str(seed), str(slices)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(True),
    )
    try:
        assert json.loads(child.stdout.readline())["compiled"] is False
        runs = [_SlicedRun(scenario, duration_ps, seed, slices) for _ in range(copies)]
        hops = pure_hops = 0
        wall = pure_wall = 0.0
        for k in range(1, slices + 1):
            for run in runs:
                h, w = run.step(k)
                hops += h
                wall += w
            child.stdin.write(f"{k}\n")
            child.stdin.flush()
            ph, pw = json.loads(child.stdout.readline())
            pure_hops += ph
            pure_wall += pw
        child.stdin.write("0\n")
        child.stdin.flush()
        pure_figures = json.loads(child.stdout.readline())
    finally:
        child.stdin.close()
        child.wait()
    figures = [json.loads(json.dumps(run.figures())) for run in runs]
    rate, pure_rate = hops / wall, pure_hops / pure_wall
    return {
        "scenario": scenario,
        "duration_ps": duration_ps,
        "compiled": compiled(),
        "packet_hops": hops // copies,
        "hops_per_s": rate,
        "wall_s": wall,
        "pure_hops_per_s": pure_rate,
        "pure_wall_s": pure_wall,
        "speedup_vs_pure": rate / pure_rate,
        "events_per_hop": runs[0].events_per_hop(),
        "identical_to_pure": all(f == pure_figures for f in figures) and hops == copies * pure_hops,
        "figures": figures[0],
    }


def compare_pure(
    scenario: str = "reference",
    duration_ps: int = ms(100),
    seed: int = 1,
    slices: int = 10,
    copies: int = 1,
    repeats: int = 1,
) -> dict[str, Any]:
    """Packet hops per wall second of this process (compiled when the extensions are
    built) and of a child process on the pure-Python path (``PANAMA_NO_EXTENSIONS=1``),
    on the same scenario, slice by slice in turn so that load on a shared machine hits
    both alike; and whether their results are identical.

    The compiled side runs ``copies`` independent copies of the scenario (each slice of
    each in turn), so that it lasts about as long as the pure side instead of a few
    hundredths of a second; the whole is repeated ``repeats`` times, each with a new
    child, and the repetition with the median speed-up is reported
    (``speedup_min``/``speedup_max`` the spread; ``identical_to_pure`` holds for all)."""
    for field, value in (("copies", copies), ("repeats", repeats)):
        if value < 1:
            raise FieldError(field, f"must be >= 1, got {value!r}")
    rounds = [_compare_once(scenario, duration_ps, seed, slices, copies) for _ in range(repeats)]
    speedups = [r["speedup_vs_pure"] for r in rounds]
    res = dict(sorted(rounds, key=lambda r: r["speedup_vs_pure"])[(repeats - 1) // 2])
    res["identical_to_pure"] = all(r["identical_to_pure"] for r in rounds)
    res["copies"] = copies
    res["repeats"] = repeats
    res["speedup_min"] = min(speedups)
    res["speedup_max"] = max(speedups)
    return res


# Repetitions of ``panama bench sim`` by scenario (run_bench's, compare_pure's copies and
# repeats): enough that two runs on one machine agree within 10 % (docs/performance.md).
BENCH_REPEATS = {"reference": (5, 5, 3), "panama": (None, 1, 3), "paper-100g": (None, 1, 3)}


def bench_sim_report(cfg: SimBenchConfig | None = None) -> dict[str, Any]:
    """``panama bench sim``'s measurements (see the command's help): the reference dumbbell
    against a heapq loop, or the PANAMA-heavy scenario; with the compiled fast path and
    ``cfg.compare_pure``, the pure path in a child process in turn, its rate, the speed-up
    and whether the results are identical."""
    cfg = (cfg or SimBenchConfig()).resolved()
    scenario, duration_ms, seed, with_pure = cfg.scenario, cfg.duration_ms, cfg.seed, cfg.compare_pure
    is_compiled = compiled()
    bench_repeats, copies, repeats = BENCH_REPEATS[scenario]
    if scenario == "reference":
        res = run_bench(ms(duration_ms), seed, repeats=bench_repeats)
    else:
        res = {"compiled": is_compiled}
    if is_compiled and with_pure or scenario != "reference":
        cmp = None
        if is_compiled and with_pure:
            cmp = compare_pure(scenario, ms(duration_ms), seed, copies=copies, repeats=repeats)
        if cmp is None:  # panama scenario without a compiled path to compare
            run = _SlicedRun(scenario, ms(duration_ms), seed, 1)
            hops, wall = run.step(1)
            cmp = {
                "scenario": scenario,
                "compiled": is_compiled,
                "packet_hops": hops,
                "hops_per_s": hops / wall,
                "wall_s": wall,
                "events_per_hop": run.events_per_hop(),
                "figures": json.loads(json.dumps(run.figures())),
            }
        if scenario == "reference":
            keys = ("pure_hops_per_s", "speedup_vs_pure", "identical_to_pure", "speedup_min", "speedup_max")
            res.update({k: cmp[k] for k in keys})
            res["compiled_hops_per_s_vs_pure_run"] = cmp["hops_per_s"]
            res["pure_repeats"], res["copies"] = cmp["repeats"], cmp["copies"]
        else:
            res = cmp
    res.setdefault("scenario", scenario)
    res.setdefault("duration_ms", duration_ms)
    res.setdefault("seed", seed)
    return res


def _spread(res: dict[str, Any], key: str, fmt: str, unit: str = "") -> str:
    """`` (median of N: lo-hi)`` for a figure measured in several repetitions."""
    lo, hi = res.get(f"{key}_min"), res.get(f"{key}_max")
    if lo is None:
        return ""
    n = res["repeats"] if key == "ratio" else res.get("pure_repeats", res.get("repeats"))
    return f" (median of {n}: {lo:{fmt}}{unit} to {hi:{fmt}}{unit})"


def format_bench_sim(res: dict[str, Any]) -> str:
    """The terminal table of :func:`bench_sim_report`."""
    scenario, duration_ms, seed = res["scenario"], res["duration_ms"], res["seed"]
    is_compiled = res.get("compiled", compiled())
    mode = "compiled (Cython)" if is_compiled else "pure Python"
    if scenario == "reference":
        rows = [
            ("simulator", mode),
            ("simulated time", f"{duration_ms:g} ms"),
            ("packet hops", f"{res['packet_hops']:,}"),
            ("simulator hops/s", f"{res['sim_hops_per_s']:,.0f}"),
            ("heapq loop hops/s", f"{res['loop_hops_per_s']:,.0f}"),
            ("ratio sim/loop", f"{res['ratio']:.3f}" + _spread(res, "ratio", ".3f")),
        ]
    else:
        f = res["figures"]
        rows = [
            ("simulator", mode),
            ("scenario", f"{scenario}: {f['topology']}, {len(f['jobs'])} jobs, seed {seed}"),
            ("simulated time", f"{duration_ms:g} ms"),
            ("packet hops", f"{res['packet_hops']:,}"),
            ("events per hop", f"{res['events_per_hop']:.3f}"),
            ("simulator hops/s", f"{res['hops_per_s']:,.0f}"),
        ]
    if "speedup_vs_pure" in res:
        if scenario == "reference":
            rows.append(
                ("compiled hops/s", f"{res['compiled_hops_per_s_vs_pure_run']:,.0f} (in turn with the pure run)")
            )
        rows += [
            ("pure Python hops/s", f"{res['pure_hops_per_s']:,.0f}"),
            ("speed-up vs pure", f"{res['speedup_vs_pure']:.2f}x" + _spread(res, "speedup", ".2f", "x")),
            ("identical results", "yes" if res["identical_to_pure"] else "NO"),
        ]
    if scenario == "reference":
        rows += [
            ("goodput", f"{res['goodput_gbps']:.3f} Gbps ({100 * res['goodput_fraction']:.1f}% of the link)"),
            ("Jain fairness", f"{res['jain']:.4f}"),
            (
                "queue mean / p99",
                f"{res['queue_mean_pkts']:.1f} / {res['queue_p99_pkts']:.1f} pkts (K = {res['ecn_k_pkts']:.0f})",
            ),
            ("drops / timeouts", f"{res['drops']} / {res['timeouts']}"),
        ]
    else:
        f = res["figures"]
        done = sum(j["iterations_done"] for j in f["jobs"].values())
        rows += [
            ("iterations done", f"{done} (all jobs)"),
            ("background flows", f"{f['background_completed']}/{f['background_flows']} done"),
            ("drops / PFC pauses", f"{f['drops']} / {f['pfc_pauses']}"),
        ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
