"""Scenario files for ``panama simulate``: one validated model with a default for every value.

A scenario is a TOML (or JSON) document validated by :class:`Scenario` (pydantic v2,
unknown keys rejected). Errors name the dotted key (``network.pfc``, ``jobs.1.workers``).
``--set key=value`` overrides use the same dotted keys; values are parsed as TOML
values (``true``, ``3``, ``"web-search"``, ``[1, 2]``) and fall back to plain strings.

Keys, units and defaults are listed in docs/simulator.md; every field below carries its
unit in its name.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, create_model, model_validator

from panama.core.controller import DEFAULT_THRESHOLD_BYTES
from panama.core.errors import FieldError
from panama.sim.netconfig import MAX_BYTES, SCENARIO_SETTINGS

# The allreduce schemes of the simulator, declared once (the type of the settings field;
# the tuple is derived from it). ``panama-or`` is ``panama`` with the source's tree reaction
# (``dctcp-or``) whatever ``panama.cc`` says, so that both can run side by side.
Scheme = Literal["panama", "panama-or", "ina-single", "ina-fixed", "ring"]
SCHEMES: tuple[str, ...] = get_args(Scheme)
#: The congestion control of the host TCP flows that carry ring allreduce (and background traffic).
HOST_CC = "dctcp"


class ScenarioError(FieldError):
    """A scenario cannot be loaded; ``field`` (also ``key``) is the dotted key at fault."""

    @property
    def key(self) -> str:
        return self.field


# Finite ranges for every setting: inf, NaN and values whose picosecond or byte count
# overflows are refused with the key's name, like any other bad value (booleans are strict:
# true/false only, never "yes" or 1).
MAX_MS = 1e6  # 1,000 s of simulated time
MAX_US = 1e9  # the same, in microseconds
MAX_GBPS = 1e4  # 10 Tb/s


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class TopologyConfig(_Model):
    """Fabric shape. Rates/delay given here override the spec's own ``gbps``/``delay_us``."""

    spec: str = Field(
        "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4",
        description="topology spec (fat-tree:k=4, leaf-spine:leaves=..,spines=..,hosts_per_leaf=..) or a file path",
    )
    host_rate_gbps: float | None = Field(
        None, gt=0, le=MAX_GBPS, description="host-ToR link rate; None keeps the spec's"
    )
    fabric_rate_gbps: float | None = Field(
        None, gt=0, le=MAX_GBPS, description="switch-switch link rate; None keeps the spec's"
    )
    link_delay_us: float | None = Field(None, ge=0, le=MAX_US, description="one-way propagation delay per link")


def _network_section() -> type[_Model]:
    """The model of the ``[network]`` table: every key of :data:`~panama.sim.netconfig.SCENARIO_SETTINGS`
    (the simulator's :class:`~panama.sim.netconfig.NetworkConfig`, where each is defined), then the
    host TCP keys (:data:`_HOST_TCP`). Booleans are strict, as everywhere in a scenario."""
    keys: dict[str, Any] = {
        s.key: (StrictBool if s.type is bool else s.type, Field(s.default, description=s.description, **s.range))
        for s in SCENARIO_SETTINGS
    }
    return create_model(
        "NetworkSection",
        __base__=_Model,
        __doc__="Switch queues, ECN marking, PFC and host DCTCP (mapped onto panama.sim.network/dctcp).",
        __module__=__name__,
        **keys,
        **_HOST_TCP,
    )


# The [network] table's keys of the hosts' TCP (panama.sim.dctcp.DctcpConfig, built by
# panama.sim.runner.dctcp_config: the scenario gives its timeouts in microseconds).
_HOST_TCP: dict[str, Any] = {
    "dctcp_initial_window_packets": (
        float,
        Field(10.0, ge=1, le=1e6, description="initial cwnd of background/ring TCP flows"),
    ),
    "dctcp_min_rto_us": (
        float,
        Field(1000.0, gt=0, le=MAX_US, description="minimum retransmission timeout of TCP flows"),
    ),
    "dctcp_max_rto_us": (
        float,
        Field(100_000.0, gt=0, le=MAX_US, description="maximum retransmission timeout of TCP flows"),
    ),
}

#: The ``[network]`` table: built from the simulator's ``NetworkConfig`` (``NetworkConfig.from_scenario``
#: turns its values into one), so that no field of it is restated here.
NetworkSection = _network_section()


class PSwitchConfig(_Model):
    """The aggregation accelerator attached to every switch."""

    packet_memory_slots: int = Field(4096, ge=1, le=1 << 20, description="accelerator memory, in packet slots")
    processing_latency_ns: float = Field(500.0, ge=0, le=MAX_US, description="per-packet accelerator latency")
    reserve_shares: int = Field(
        1,
        ge=0,
        le=64,
        description="job shares each accelerator keeps free (share = memory // (jobs + reserve)) so a job "
        "arriving while others run starts at once; 0 = memory // jobs",
    )


class PanamaConfig(_Model):
    """Controller and worker-transport settings of in-network schemes."""

    num_trees: int = Field(4, ge=1, le=64, description="aggregation trees per job (panama, ina-fixed)")
    threshold_bytes: int = Field(
        DEFAULT_THRESHOLD_BYTES,
        ge=0,
        le=MAX_BYTES,
        description="jobs whose gradient is smaller than this use ring allreduce",
    )
    max_jobs_per_switch: int = Field(8, ge=1, le=4096, description="admission limit of the controller")
    payload_elems: int = Field(361, ge=1, le=361, description="float32 elements per packet (361 fills 1500 B)")
    cc: Literal["dctcp-path", "dctcp-or"] = Field(
        "dctcp-path",
        description="tree congestion control of panama and ina-single (panama-or always runs dctcp-or): dctcp-path "
        "(the path window the "
        "controller derives from link rates and hops, DCTCP above it while the echo shows queues at K) or "
        "dctcp-or (the source's DCTCP on the tree-wide OR of marks); docs/design.md, ECN",
    )
    path_floor_share: float = Field(
        1.0, ge=0, le=1, description="dctcp-path: the lowest window as a share of the tree's path window"
    )
    initial_window_packets: float = Field(
        10.0, ge=1, le=1e6, description="initial per-tree window (dctcp-or; dctcp-path starts at the path window)"
    )
    fixed_window_packets: float = Field(64.0, ge=1, le=1e6, description="per-tree window of ina-fixed (cc 'fixed')")
    dctcp_g: float = Field(1 / 16, gt=0, le=1, description="DCTCP gain of the tree congestion control")
    initial_rto_us: float = Field(1000.0, gt=0, le=MAX_US, description="initial worker retransmission timeout")
    min_rto_us: float = Field(500.0, gt=0, le=MAX_US, description="minimum worker retransmission timeout")
    max_rto_us: float = Field(100_000.0, gt=0, le=MAX_US, description="maximum worker retransmission timeout")
    min_pto_us: float | None = Field(
        None,
        gt=0,
        le=MAX_US,
        description="floor of the workers' tail-loss probe timeout (RFC 8985, core/transport.py); None = no probes",
    )


class BackgroundConfig(_Model):
    """Background (non-training) flows: Poisson arrivals per host, sizes from a CDF."""

    workload: str = Field(
        "web-search", description="web-search, data-mining, fb-hadoop, ali-storage, or a CDF file path"
    )
    load: float = Field(0.3, ge=0, le=1.5, description="offered load per host, fraction of its link rate")
    start_ms: float = Field(0.0, ge=0, le=MAX_MS, description="first arrival not before this time")
    stop_ms: float | None = Field(None, ge=0, le=MAX_MS, description="no arrivals after this time; None = duration_ms")
    hosts: list[str] | None = Field(None, description="source/destination hosts; None = every host")
    max_flow_bytes: int | None = Field(None, gt=0, le=MAX_BYTES, description="truncate sampled sizes (None = no limit)")


class JobConfig(_Model):
    """One data-parallel training job: compute, then allreduce, ``iterations`` times."""

    name: str | None = Field(None, description="job name; None = job<index>")
    workers: int = Field(4, ge=2, le=1 << 20, description="number of workers (ignored when hosts are given)")
    hosts: list[str] | None = Field(None, description="worker hosts; None = drawn at random (seeded)")
    gradient_bytes: int = Field(1_000_000, ge=4, le=MAX_BYTES, description="gradient size per worker and iteration")
    compute_us: float = Field(200.0, ge=0, le=MAX_US, description="computation time per iteration")
    iterations: int = Field(5, ge=1, le=10**6, description="training iterations")
    start_us: float = Field(0.0, ge=0, le=MAX_US, description="start time of the job")
    scheme: Scheme | None = Field(None, description="allreduce scheme; None = the scenario's scheme")

    @model_validator(mode="after")
    def _hosts_distinct(self) -> JobConfig:
        if self.hosts is not None:
            if len(self.hosts) < 2:
                raise FieldError("hosts", "a job needs at least two worker hosts")
            if len(set(self.hosts)) != len(self.hosts):
                raise FieldError("hosts", "worker hosts must be distinct")
        return self


class Scenario(_Model):
    """A complete simulation: fabric, switches, traffic, jobs, scheme, seed and duration."""

    seed: int = Field(
        1, ge=0, le=2**63 - 1, description="master seed; workload, placement and sim use separate streams"
    )
    duration_ms: float = Field(10.0, gt=0, le=MAX_MS, description="background arrivals happen in [0, duration_ms)")
    max_time_ms: float | None = Field(
        None, gt=0, le=MAX_MS, description="hard stop of simulated time; None = 10 * duration_ms + 100"
    )
    scheme: Scheme = Field("panama", description="allreduce scheme of every job without its own")
    topology: TopologyConfig = Field(default_factory=TopologyConfig, description="[topology] table")
    network: NetworkSection = Field(default_factory=NetworkSection, description="[network] table")
    pswitch: PSwitchConfig = Field(default_factory=PSwitchConfig, description="[pswitch] table")
    panama: PanamaConfig = Field(default_factory=PanamaConfig, description="[panama] table")
    background: BackgroundConfig = Field(default_factory=BackgroundConfig, description="[background] table")
    jobs: list[JobConfig] = Field(default_factory=list, description="training jobs ([[jobs]] tables)")
    placement: Literal["random", "disjoint", "packed"] = Field(
        "random",
        description="where jobs without explicit hosts run: random (each job's workers drawn independently; jobs "
        "may share hosts), disjoint (every worker on its own host, drawn at random), packed (jobs fill racks in "
        "order from a random first rack, every worker on its own host)",
    )
    sample_interval_us: float = Field(10.0, ge=0.001, le=MAX_US, description="queue-occupancy sampling period")
    burst_bin_us: float = Field(
        0.0,
        ge=0,
        le=MAX_US,
        description="bin of the PANAMA burst meter (aggregation packets per bin per switch output port, "
        "diagnostics.panama_bursts); 0 = off (it adds about a fifth to the CPU time of PANAMA-heavy runs)",
    )

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        p = self.panama
        if not p.min_rto_us <= p.max_rto_us:
            raise FieldError("panama.min_rto_us", "must be <= panama.max_rto_us")
        if not self.network.dctcp_min_rto_us <= self.network.dctcp_max_rto_us:
            raise FieldError("network.dctcp_min_rto_us", "must be <= network.dctcp_max_rto_us")
        if 0 < self.burst_bin_us < 0.001:
            raise FieldError("burst_bin_us", f"must be 0 (off) or >= 0.001 (1 ns), got {self.burst_bin_us}")
        names = [j.name for j in self.jobs if j.name is not None]
        if len(set(names)) != len(names):
            raise FieldError("jobs", "job names must be distinct")
        return self

    # ------------------------------------------------------------------ helpers
    def with_scheme(self, scheme: str) -> Scenario:
        """The same scenario with every job using ``scheme`` (per-job overrides removed)."""
        if scheme not in SCHEMES:
            raise ScenarioError("scheme", f"must be one of {', '.join(SCHEMES)}, got {scheme!r}")
        jobs = [j.model_copy(update={"scheme": None}) for j in self.jobs]
        return self.model_copy(update={"scheme": scheme, "jobs": jobs})

    def with_overrides(self, sets: Iterable[str]) -> Scenario:
        """The scenario with ``key=value`` overrides applied (and re-validated)."""
        data = self.model_dump(mode="json")
        apply_sets(data, sets)
        return scenario_from_dict(data)

    def job_name(self, index: int) -> str:
        name = self.jobs[index].name
        return name if name is not None else f"job{index}"

    def job_scheme(self, index: int) -> str:
        return self.jobs[index].scheme or self.scheme

    def congestion_control(self, scheme: str) -> str:
        """The congestion control a job of ``scheme`` runs: its trees' reaction (``panama.cc``
        for ``panama`` and ``ina-single``, ``dctcp-or`` for ``panama-or``, ``fixed`` windows for
        ``ina-fixed``) or, for ``ring``, the hosts' TCP (:data:`HOST_CC`)."""
        return {"ring": HOST_CC, "ina-fixed": "fixed", "panama-or": "dctcp-or"}.get(scheme, self.panama.cc)

    @property
    def stop_ps(self) -> int:
        """Hard stop of simulated time in picoseconds."""
        limit_ms = self.max_time_ms if self.max_time_ms is not None else 10 * self.duration_ms + 100
        return round(limit_ms * 1e9)

    def to_toml(self) -> str:
        """TOML text that loads back to an equal scenario (``None`` values are omitted)."""
        return dumps_toml(self.model_dump(mode="json"))


# ---------------------------------------------------------------------- loading
def default_scenario() -> Scenario:
    """The built-in scenario: leaf-spine 4x2x4 at 10 Gbps, web-search at 30% load, two jobs."""
    return Scenario(
        jobs=[
            JobConfig(name="job0", workers=4, gradient_bytes=2_000_000, compute_us=300.0, iterations=5),
            JobConfig(name="job1", workers=6, gradient_bytes=1_000_000, compute_us=200.0, iterations=5),
        ],
        panama=PanamaConfig(threshold_bytes=500_000),
    )


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    """Validate ``data``; raise :class:`ScenarioError` naming the first bad key."""
    try:
        return Scenario.model_validate(dict(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, FieldError):  # a validator named the key: use it, never parse the message
            head = inner.field
            loc = f"{loc}.{head}" if loc and not head.startswith(loc) else head
            msg = inner.detail
        if err.get("type") == "extra_forbidden":
            msg = "unknown key"
        value = err.get("input")
        if err.get("type") not in ("extra_forbidden", "missing") and not isinstance(value, (dict, list)):
            msg = f"{msg} (got {value!r})"
        raise ScenarioError(loc or "scenario", msg) from None


def load_scenario(path: str | Path | None = None, sets: Iterable[str] = ()) -> Scenario:
    """Load a TOML/JSON scenario file (None: the built-in default) and apply ``--set`` overrides."""
    if path is None:
        data = default_scenario().model_dump(mode="json")
    else:
        p = Path(path)
        if not p.is_file():
            raise ScenarioError("SCENARIO", f"no such file: {p}")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ScenarioError(str(p), f"not UTF-8 text (byte {exc.start}); save the scenario as UTF-8") from None
        except OSError as exc:
            raise ScenarioError(str(p), f"cannot read: {exc.strerror or exc}") from None
        try:
            data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise ScenarioError(str(p), f"cannot parse: {exc}") from None
    apply_sets(data, sets)
    return scenario_from_dict(data)


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML value if it parses as one, else the raw string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_sets(data: dict[str, Any], sets: Iterable[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides in place; list items are addressed by index (``jobs.0.iterations``)."""
    for item in sets:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ScenarioError(item, "expected KEY=VALUE")
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                node = _list_item(node, part, where)
            elif isinstance(node, dict):
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
            else:
                raise ScenarioError(where, "is not a table")
        last = parts[-1]
        value = parse_value(raw.strip())
        if isinstance(node, list):
            idx = _index(node, last, key)
            node[idx] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ScenarioError(".".join(parts[:-1]), "is not a table")
    return data


def _index(seq: list, part: str, where: str) -> int:
    try:
        idx = int(part)
    except ValueError:
        raise ScenarioError(where, "list items are addressed by index (e.g. jobs.0.iterations)") from None
    if not 0 <= idx < len(seq):
        raise ScenarioError(where, f"index out of range (list has {len(seq)} items)")
    return idx


def _list_item(seq: list, part: str, where: str) -> Any:
    return seq[_index(seq, part, where)]


# ---------------------------------------------------------------------- TOML writer
def _drop_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value if v is not None]
    return value


def dumps_toml(data: Mapping[str, Any]) -> str:
    """Write nested dicts / lists of dicts as TOML with tomli-w (``None`` values omitted)."""
    return tomli_w.dumps(_drop_none(data))
