"""Settings of the runtime's processes, declared once (pydantic models, :mod:`panama.settings`).

* :class:`SwitchConfig`: one switch daemon (``panama switch``);
* :class:`ControllerConfig`: the controller service (``panama controller serve``); its
  :class:`ControllerOptions` are what the service itself takes (no file, no address);
* :class:`ClusterConfig`: a local cluster of both (``LocalCluster``, ``panama cluster up``);
* :class:`CommunicatorConfig`: the knobs of one worker's
  :class:`~panama.runtime.worker.communicator.Communicator` (its identity, job and rank, and
  its token are arguments, not settings);
* :class:`ProcessSettings`: what every daemon process takes besides its own settings
  (log level, ready file, lifeline, token file); :class:`SwitchProcess` and
  :class:`ControllerProcess` join the two into the JSON file a daemon is started with:
  ``python -m panama.runtime.switch.daemon CONFIG.json`` and
  ``python -m panama.runtime.controller.service CONFIG.json`` (``LocalCluster`` writes
  these files; nothing round-trips through command-line strings).

Defaults come from named constants of the layer that owns them (the core controller's
threshold and job limit, the runtime's datagram size and accelerator memory). The CLI's
options are derived from these models (``panama.cli.options``): the option ``--a-b`` is
the field ``a_b``, with its description as help and its default shown.
Addresses are ``(host, port)`` tuples in Python and ``"HOST:PORT"`` strings in files and
on the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema, field_validator

from panama.addresses import MULTICAST, is_ipv4, reachable, unreachable_reason
from panama.core import codec
from panama.core.controller import DEFAULT_MAX_JOBS_PER_SWITCH, DEFAULT_THRESHOLD_BYTES
from panama.runtime.net.udp import (
    RUNTIME_PACKET_MEMORY,
    RUNTIME_PAYLOAD_ELEMS,
    RUNTIME_PROBE_FLOOR_S,
    AddressError,
    format_addr,
    parse_addr,
)
from panama.settings import Settings

__all__ = [
    "AddressSetting",
    "ClusterConfig",
    "CommunicatorConfig",
    "ControllerConfig",
    "ControllerOptions",
    "ControllerProcess",
    "DEFAULT_ECN_THRESHOLD_PKTS",
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "LogLevel",
    "ProcessSettings",
    "SwitchConfig",
    "SwitchProcess",
]

# A daemon marks CE when its receive backlog exceeds this many full datagrams (docs/runtime.md).
DEFAULT_ECN_THRESHOLD_PKTS = 128
# Seconds without a heartbeat from a rank before the controller fails its job.
DEFAULT_HEARTBEAT_TIMEOUT_S = 5.0
# Datagrams a daemon drains per batch.
DEFAULT_BATCH = 64
MAX_BATCH = 1024

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


def _address(value: object) -> object:
    """``"HOST:PORT"`` text (files, command line) or a ``(host, port)`` pair."""
    if isinstance(value, str):
        try:
            return parse_addr(value)
        except AddressError as exc:
            raise ValueError(exc.detail) from None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (value[0], value[1])
    return value


AddressSetting = Annotated[
    tuple[str, Annotated[int, Field(ge=0, le=65535)]],
    BeforeValidator(_address),
    PlainSerializer(format_addr, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "description": "HOST:PORT"}),
]


class SwitchConfig(Settings):
    """Settings of one switch daemon (``panama switch --help`` lists them as options)."""

    switch_id: str = Field(min_length=1, description="Switch name (e.g. leaf0); must match the cluster file.")
    udp: AddressSetting = Field(("127.0.0.1", 0), description="Data-plane bind address HOST:PORT (port 0: any).")
    control: AddressSetting = Field(("127.0.0.1", 0), description="HTTP control/metrics bind address HOST:PORT.")
    packet_memory: int = Field(
        RUNTIME_PACKET_MEMORY, ge=1, description="Accelerator slots, each one datagram's payload."
    )
    payload_elems: int = Field(
        RUNTIME_PAYLOAD_ELEMS, ge=1, le=codec.MAX_PAYLOAD_ELEMS, description="float32 per slot and datagram."
    )
    ecn_threshold_pkts: int = Field(
        DEFAULT_ECN_THRESHOLD_PKTS,
        ge=0,
        description="Mark CE when the receive backlog exceeds this many full datagrams (0: never).",
    )
    batch: int = Field(DEFAULT_BATCH, ge=1, le=MAX_BATCH, description="Datagrams drained per batch.")
    offload: bool = Field(
        True,
        description="UDP GSO/GRO batched loop where the kernel has it and 2+ datagrams fit one send "
        "(PANAMA_UDP_OFFLOAD=0: off).",
    )
    drop_prob: float = Field(0.0, ge=0.0, lt=1.0, description="Drop received datagrams (fault injection).")
    seed: int = Field(0, ge=0, description="Seed of the drop generator.")
    status_interval_s: float = Field(
        10.0, ge=0.0, allow_inf_nan=False, description="Seconds between status log lines (0: none)."
    )


class ControllerOptions(Settings):
    """What the controller service itself takes (:class:`ControllerConfig` adds its cluster
    file and listen address): ``ControllerService(cluster, options)``."""

    threshold_bytes: int = Field(
        DEFAULT_THRESHOLD_BYTES,
        ge=0,
        description="Smallest gradient aggregated in-network (bytes).",
    )
    max_jobs_per_switch: int = Field(DEFAULT_MAX_JOBS_PER_SWITCH, ge=1, description="Jobs one switch may hold.")
    trees: int | None = Field(None, ge=1, description="Trees per job unless a job asks [default: number of spines].")
    heartbeat_timeout_s: float = Field(
        DEFAULT_HEARTBEAT_TIMEOUT_S,
        gt=0.0,
        allow_inf_nan=False,
        description="Seconds without heartbeat before a job fails.",
    )
    state_file: Path | None = Field(
        None, description="Running jobs are kept here (mode 0600); a restarted controller takes them back."
    )
    startup_wait_s: float = Field(
        20.0, ge=0.0, allow_inf_nan=False, description="Seconds to wait for the daemons at start-up."
    )
    multicast_results: bool = Field(
        False,
        description="Leaf daemons send each result to their local workers as one loopback multicast datagram "
        "(group of 239.80.0.0/16, TTL 0) where the daemon and its workers are all on 127.0.0.1; any local "
        "process can then read results (docs/runtime.md).",
    )


class ControllerConfig(ControllerOptions):
    """Settings of the controller service (``panama controller serve --help``)."""

    cluster_file: Path = Field(description="Cluster TOML: topology and daemon addresses.")
    listen: AddressSetting = Field(("127.0.0.1", 7070), description="HTTP bind address HOST:PORT (port 0: any).")


class ClusterConfig(Settings):
    """A local cluster: leaf/spine switch daemons and a controller (``panama cluster up --help``).

    ``threshold_bytes`` defaults to 0 so every multi-host job aggregates in-network.
    ``switch_drop_prob`` overrides ``drop_prob`` per switch (``{"spine0": 0.02}``).
    """

    leaves: int = Field(2, ge=1, description="Leaf (ToR) switches.")
    spines: int = Field(2, ge=1, description="Spine switches.")
    hosts_per_leaf: int = Field(4, ge=1, description="Worker slots per leaf.")
    packet_memory: int = SwitchConfig.model_fields["packet_memory"]
    payload_elems: int = SwitchConfig.model_fields["payload_elems"]
    ecn_threshold_pkts: int = SwitchConfig.model_fields["ecn_threshold_pkts"]
    threshold_bytes: int = Field(0, ge=0, description="Smallest gradient aggregated in-network (0: every job).")
    max_jobs_per_switch: int = ControllerConfig.model_fields["max_jobs_per_switch"]
    trees: int | None = ControllerConfig.model_fields["trees"]
    heartbeat_timeout_s: float = ControllerConfig.model_fields["heartbeat_timeout_s"]
    multicast_results: bool = Field(
        True,
        description="Results to a leaf's workers as one loopback multicast datagram (every member of a local "
        "cluster is on 127.0.0.1; any local process can read them, docs/runtime.md).",
    )
    drop_prob: float = Field(0.0, ge=0.0, lt=1.0, description="Loss injected at every switch (fault injection).")
    switch_drop_prob: dict[str, Annotated[float, Field(ge=0.0, lt=1.0)]] = Field(
        default_factory=dict, description="Loss per switch name, overriding drop_prob."
    )
    seed: int = Field(0, ge=0, description="Seed of the switches' drop generators (switch i gets seed + i).")
    log_level: LogLevel = Field("INFO", description="Log level of every process.")
    startup_timeout_s: float = Field(
        30.0, gt=0.0, allow_inf_nan=False, description="Seconds each process may take to become ready."
    )
    host: str = Field(
        "127.0.0.1",
        description="IPv4 address of this machine the daemons and controller bind (workers connect there).",
    )
    netns: str | None = Field(None, description="Network namespace to run the processes in (ip netns exec; root).")
    controller_port: int = Field(0, ge=0, le=65535, description="The controller's TCP port (0: any free port).")

    @field_validator("host")
    @classmethod
    def _reachable_host(cls, value: str) -> str:
        """An IPv4 literal peers can send to (:mod:`panama.addresses`)."""
        if not is_ipv4(value):
            raise ValueError(f"expected an IPv4 address, got {value!r}")
        if not reachable(value):
            raise ValueError(f"{value} is not an address workers can reach: give one address of this machine")
        return value


class CommunicatorConfig(Settings):
    """The knobs of one worker's :class:`~panama.runtime.worker.communicator.Communicator`
    (``Communicator.from_config``; its keyword arguments are these fields)."""

    size_bytes: int | None = Field(
        None, ge=0, description="Gradient size announced to admission (bytes) [default: the first allreduce's]."
    )
    timeout_s: float = Field(30.0, gt=0.0, allow_inf_nan=False, description="Bound of every wait (seconds).")
    trees: int | None = Field(None, ge=1, description="Aggregation trees to ask for [default: the controller's].")
    payload_elems: int | None = Field(
        None,
        ge=1,
        le=codec.MAX_PAYLOAD_ELEMS,
        description=f"float32 per datagram, at most what the daemons hold [default: {RUNTIME_PAYLOAD_ELEMS}].",
    )
    cc: str = Field(
        "dctcp-or", min_length=1, description="Congestion control by name (panama.core.cc: dctcp-or, dctcp-path, ...)."
    )
    cc_options: dict[str, Any] | None = Field(None, description="Options of the congestion control.")
    drop_prob: float = Field(0.0, ge=0.0, lt=1.0, description="Drop own outgoing datagrams (fault injection).")
    seed: int = Field(0, ge=0, description="Seed of the drop generator.")
    heartbeat_s: float = Field(1.0, gt=0.0, allow_inf_nan=False, description="Seconds between heartbeats.")
    initial_rto_s: float = Field(0.3, gt=0.0, allow_inf_nan=False, description="First retransmission timeout (s).")
    min_rto_s: float = Field(0.1, gt=0.0, allow_inf_nan=False, description="Smallest retransmission timeout (s).")
    max_rto_s: float = Field(1.0, gt=0.0, allow_inf_nan=False, description="Largest retransmission timeout (s).")
    min_pto_s: float | None = Field(
        RUNTIME_PROBE_FLOOR_S,
        gt=0.0,
        allow_inf_nan=False,
        description="Floor of the tail-loss probe timeout (s; None: no probes).",
    )
    bind_host: str = Field("127.0.0.1", description="The address daemons send results to (not 0.0.0.0).")
    multicast: bool = Field(True, description="Receive results by loopback multicast where the controller offers it.")
    offload: bool = Field(
        True,
        description="UDP GSO sends and GRO receives where the kernel has them and 2+ datagrams fit one send "
        "(PANAMA_UDP_OFFLOAD=0: off).",
    )

    @field_validator("bind_host")
    @classmethod
    def _sendable_host(cls, value: str) -> str:
        """A host daemons can send results to (:mod:`panama.addresses`; bound as given)."""
        reason = unreachable_reason(value)
        if reason is not None:
            article = "a" if reason == MULTICAST else "the"
            raise ValueError(f"give the address daemons can send results to, not {article} {reason}")
        return value


class ProcessSettings(Settings):
    """What a daemon process takes besides its component's settings."""

    log_level: LogLevel = Field("INFO", description="Log level.")
    ready_file: Path | None = Field(None, description="Write the bound addresses as JSON here once ready.")
    exit_with: int | None = Field(None, ge=1, description="Stop when this process id is gone.")
    token_file: Path | None = Field(
        None, description="File holding the API's bearer token (mode 0600) [default: $PANAMA_TOKEN]."
    )


class SwitchProcess(ProcessSettings):
    """The file ``python -m panama.runtime.switch.daemon CONFIG.json`` reads."""

    switch: SwitchConfig


class ControllerProcess(ProcessSettings):
    """The file ``python -m panama.runtime.controller.service CONFIG.json`` reads."""

    controller: ControllerConfig
