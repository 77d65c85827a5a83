"""Settings of the benchmarks, declared once (pydantic models, :mod:`panama.settings`).

* :class:`BenchConfig`: ``panama bench allreduce`` (:mod:`panama.benchmarks.allreduce`);
* :class:`SwitchBenchConfig`: ``panama bench switch`` (:mod:`panama.benchmarks.switch`);
* :class:`SimBenchConfig`: ``panama bench sim`` (:mod:`panama.benchmarks.sim`);
* :class:`CoreBenchConfig`: ``panama bench core`` (:mod:`panama.benchmarks.core`).

Each command's options are derived from its model (``panama.cli.options``): the option
``--a-b`` is the field ``a_b``, with its description as help and its default shown; a bad
value is a one-line usage error naming the option. Knobs of the runtime take the
runtime's constants (datagram size, accelerator memory, ECN threshold), the others the
named constants below. This module imports no benchmark, so the CLI reads the models
without loading numpy, the simulator or a daemon.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from panama.core import codec
from panama.runtime.net.udp import RUNTIME_PACKET_MEMORY, RUNTIME_PAYLOAD_ELEMS, RUNTIME_PROBE_FLOOR_S
from panama.runtime.settings import DEFAULT_ECN_THRESHOLD_PKTS, CommunicatorConfig
from panama.settings import Settings, SettingsError

__all__ = ["BenchConfig", "CoreBenchConfig", "SimBenchConfig", "SwitchBenchConfig"]

# ---------------------------------------------------------------------- bench allreduce
# Defaults of the benchmark's own shape (the runtime's knobs take the runtime's constants).
DEFAULT_WORKERS = 4
DEFAULT_SIZES_MB = (1.0, 16.0, 100.0)
DEFAULT_ITERS = 5
DEFAULT_ROUNDS = 3
DEFAULT_LEAVES = 2
DEFAULT_SPINES = 2
# The Communicator's own floor of the retransmission timeout (declared by its settings model).
DEFAULT_MIN_RTO_S = CommunicatorConfig.model_fields["min_rto_s"].default
DEFAULT_FLOOR_BLOCKS = 5_000
DEFAULT_TIMEOUT_S = 120.0

SizeMB = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class BenchConfig(Settings):
    """Settings of one ``panama bench allreduce`` run (its options are these fields, see
    ``panama.cli.runtime_cmds``; ``floor_blocks`` and ``timeout_s`` are set from Python only)."""

    workers: int = Field(DEFAULT_WORKERS, ge=2, description="Ranks (processes) per run.")
    sizes_mb: list[SizeMB] = Field(
        default_factory=lambda: list(DEFAULT_SIZES_MB), min_length=1, description="Gradient sizes in MB (10^6 bytes)."
    )
    iters: int = Field(DEFAULT_ITERS, ge=1, description="Timed allreduces per implementation per round.")
    rounds: int = Field(DEFAULT_ROUNDS, ge=1, description="Alternating PANAMA/gloo phases per size (medians reported).")
    leaves: int = Field(DEFAULT_LEAVES, ge=1, description="Leaf switch daemons (the workers spread over them).")
    spines: int = Field(DEFAULT_SPINES, ge=1, description="Spine switch daemons.")
    trees: int | None = Field(None, ge=1, description="Trees per job [default: number of spines].")
    payload_elems: int = Field(
        RUNTIME_PAYLOAD_ELEMS, ge=1, le=codec.MAX_PAYLOAD_ELEMS, description="float32 per datagram."
    )
    packet_memory: int = Field(RUNTIME_PACKET_MEMORY, ge=1, description="Accelerator slots of each switch daemon.")
    cc: Literal["dctcp-or", "dctcp", "fixed", "none"] = Field(
        "dctcp-or", description="The workers' congestion control (dctcp: the earlier name of dctcp-or)."
    )
    ecn_threshold_pkts: int = Field(
        DEFAULT_ECN_THRESHOLD_PKTS, ge=0, description="Switch CE-marking backlog (full datagrams; 0: off)."
    )
    min_rto_s: float = Field(
        DEFAULT_MIN_RTO_S, gt=0.0, allow_inf_nan=False, description="Workers' minimum retransmission timeout."
    )
    min_pto_s: float | None = Field(
        RUNTIME_PROBE_FLOOR_S,
        ge=0.0,
        allow_inf_nan=False,
        description="Floor of the workers' tail-loss probe timeout (0: no probes).",
    )
    drop_prob: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Share of datagrams every switch daemon drops (loss recovery; results stay exact).",
    )
    multicast_results: bool = Field(
        True,
        description="Leaf daemons send results to their workers as one loopback multicast datagram (docs/runtime.md).",
    )
    gloo: bool = Field(True, description="Time gloo too, in alternating phases (off: PANAMA only, no ratio).")
    floor: bool = Field(
        True,
        description="Measure the loopback floor (kernel cost of a datagram by UDP and of its bytes by TCP) before and "
        "after the run, and report each implementation's CPU at it (docs/runtime-performance.md).",
    )
    seed: int = Field(0, ge=0, description="Seed of the gradients and of the daemons' drops.")
    floor_blocks: int = Field(DEFAULT_FLOOR_BLOCKS, ge=1, description="Datagrams (and TCP blocks) per floor run.")
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0.0, allow_inf_nan=False, description="Seconds a rank waits for one allreduce."
    )

    @field_validator("min_pto_s")
    @classmethod
    def _no_probes(cls, value: float | None) -> float | None:
        """0 and None both mean no tail-loss probes (the Communicator takes None)."""
        return value or None

    def to_dict(self) -> dict[str, Any]:
        return self.dump()


# ---------------------------------------------------------------------- bench switch
DEFAULT_SWITCH_WINDOW = 8  # sequence numbers in flight per tree
DEFAULT_SWITCH_SECONDS = 3.0
DEFAULT_SWITCH_WARMUP_S = 0.5
SWITCH_SPARE_SLOTS = 2  # slots a tree needs beyond its window (results still in flight)


class SwitchBenchConfig(Settings):
    """Shape of the offered load of ``panama bench switch`` (:mod:`panama.benchmarks.switch`)."""

    jobs: int = Field(1, ge=1, description="Jobs installed on the daemon.")
    trees: int = Field(2, ge=1, description="Trees per job.")
    workers: int = Field(4, ge=1, description="Children per tree (feeder sockets).")
    payload_elems: int = Field(
        RUNTIME_PAYLOAD_ELEMS,
        ge=1,
        le=codec.MAX_PAYLOAD_ELEMS,
        description="float32 per datagram (the default: 64 KB datagrams).",
    )
    window: int = Field(DEFAULT_SWITCH_WINDOW, ge=1, description="Sequence numbers in flight per tree.")
    seconds: float = Field(
        DEFAULT_SWITCH_SECONDS,
        gt=0.0,
        allow_inf_nan=False,
        description=f"Measured interval per run (after {DEFAULT_SWITCH_WARMUP_S:g} s warm-up).",
    )
    warmup_s: float = Field(
        DEFAULT_SWITCH_WARMUP_S, ge=0.0, allow_inf_nan=False, description="Warm-up before each measured interval."
    )
    packet_memory: int = Field(RUNTIME_PACKET_MEMORY, ge=1, description="Accelerator slots.")
    seed: int = Field(0, ge=0, description="Seed of the payloads.")
    offload: bool = Field(
        True,
        description="Measure the GSO/GRO batched path (daemon and feeder) against the one-datagram-per-call baseline.",
    )

    @model_validator(mode="after")
    def _window_fits(self) -> SwitchBenchConfig:
        slots_per_tree = self.packet_memory // (self.jobs * self.trees)
        if self.window + SWITCH_SPARE_SLOTS > slots_per_tree:
            raise SettingsError(
                "window",
                f"{self.window} in flight per tree needs more than the {slots_per_tree} slots "
                f"a tree gets from packet_memory={self.packet_memory} over {self.jobs * self.trees} trees",
            )
        return self


# ---------------------------------------------------------------------- bench sim
# Simulated milliseconds and seed of each scenario when not given.
SIM_DEFAULTS = {"reference": (100.0, 1), "panama": (3.0, 3), "paper-100g": (10.0, 1)}
MIN_SIM_DURATION_MS = 0.1
MAX_SIM_DURATION_MS = 10_000.0


def _per_scenario(index: int) -> str:
    return ", ".join(f"{v[index]:g} for {k}" for k, v in SIM_DEFAULTS.items())


class SimBenchConfig(Settings):
    """What ``panama bench sim`` runs (:func:`panama.benchmarks.sim.bench_sim_report`);
    ``duration_ms`` and ``seed`` left out take the scenario's (:meth:`resolved`)."""

    scenario: Literal["reference", "panama", "paper-100g"] = Field(
        "reference",
        description="reference: 4 DCTCP flows through one bottleneck; panama: the PANAMA-heavy k=8 fat-tree "
        "(data/scenarios/panama_heavy.toml); paper-100g: the first milliseconds of the shared-cluster 'paper' preset "
        "(k=8 fat-tree, 128 hosts, eight jobs, web-search at load 0.3) at 100 Gb/s under the panama scheme.",
    )
    duration_ms: float | None = Field(
        None,
        ge=MIN_SIM_DURATION_MS,
        le=MAX_SIM_DURATION_MS,
        description=f"Simulated time [default: {_per_scenario(0)}].",
    )
    seed: int | None = Field(None, ge=0, description=f"Seed of the scenario [default: {_per_scenario(1)}].")
    compare_pure: bool = Field(
        True, description="When compiled, also run the pure-Python path in a child process, slice by slice in turn."
    )

    def resolved(self) -> SimBenchConfig:
        """A copy with the scenario's duration and seed where none was given."""
        duration_ms, seed = SIM_DEFAULTS[self.scenario]
        return self.replace(
            duration_ms=duration_ms if self.duration_ms is None else self.duration_ms,
            seed=seed if self.seed is None else self.seed,
        )


# ---------------------------------------------------------------------- bench core
class CoreBenchConfig(Settings):
    """What ``panama bench core`` aggregates (:func:`panama.benchmarks.core.run_core_bench`)."""

    workers: int = Field(8, ge=1, le=64, description="Contributing workers.")
    size_mb: float = Field(64.0, ge=0.001, le=4096, description="Gradient MB per worker.")
    payload_elems: int = Field(
        codec.DEFAULT_PAYLOAD_ELEMS,
        ge=1,
        le=codec.MAX_PAYLOAD_ELEMS,
        description="float32 elements per packet (default fits a 1500-byte MTU).",
    )
    repeat: int = Field(1, ge=1, le=20, description="Runs; the best is reported.")
    seed: int = Field(0, ge=0, description="Seed of the gradients.")
    window: int = Field(64, ge=1, description="Packets a worker sends ahead of its acknowledged ones.")
