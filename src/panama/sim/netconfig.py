"""Configuration of the simulated network's switches and links (:class:`NetworkConfig`).

:class:`NetworkConfig` is the one definition of these settings: each field carries its
library default and invariants (``__post_init__``) and, where a scenario sets it, its
``[network]`` key, the scenario's default and the range a scenario may give
(:data:`SCENARIO_SETTINGS`, read by :mod:`panama.sim.scenario`, which builds the
``[network]`` table's model from it, and by :meth:`NetworkConfig.from_scenario`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from panama.core.errors import FieldError
from panama.core.units import PS_PER_S

__all__ = ["MAX_BYTES", "NetworkConfig", "REFERENCE_RATE_BPS", "ScenarioSetting", "SCENARIO_SETTINGS", "scenario_key"]

# The port rate at which the scenario gives its per-port sizes: the ECN threshold in
# packets (``ecn_k_packets_at_10g``) and, when they scale with the rate, the queue limits.
REFERENCE_RATE_BPS = 10e9

_BITS_PS = 8 * PS_PER_S  # bits * ps per second: tx_ps = size_bytes * _BITS_PS / rate_bps

#: The largest byte count a scenario may give (1 TB; panama.sim.scenario's bound for every byte key).
MAX_BYTES = 10**12


def _setting(
    default: Any,
    description: str,
    *,
    key: str | None = None,
    scenario_default: Any = ...,
    values: Mapping[Any, Any] | None = None,
    **scenario_range: float,
) -> Any:
    """A field of :class:`NetworkConfig` that a scenario's ``[network]`` table sets.

    ``key``: the scenario key when it is not the field's name; ``scenario_default``: the
    scenario's default when it is not the library's; ``values``: the scenario's values
    (their type is the key's type) and the field value each stands for, where the scenario
    gives the setting in another form; ``scenario_range``: pydantic bounds (``ge``, ``gt``,
    ``le``) of the values a scenario may give (the scenario's finite ranges: the field's
    invariants are ``__post_init__``'s)."""
    meta = {
        "key": key,
        "description": description,
        "scenario_default": default if scenario_default is ... else scenario_default,
        "values": dict(values) if values is not None else None,
        "range": scenario_range,
    }
    return field(default=default, metadata={"scenario": meta})


@dataclass
class NetworkConfig:
    """Switch and link behaviour. Byte sizes are per output queue unless stated.

    * ``queue_limit_bytes``: drop-tail limit of each output queue in lossy mode
      (default 300 full packets). Host NIC queues are unlimited (the transport window
      bounds them). With ``queue_limit_ref_bps`` set, the limit is for a port of that
      rate and scales with each port's rate (``queue_limit_for``), like the ECN threshold;
      the default shared buffer of a lossless switch is then the sum over its ports.
    * ``ecn``: mark ECN-capable packets; ``ecn_k_bytes`` overrides the per-port threshold
      that is otherwise ``ecn_k_packets_at_10g x mtu_bytes x rate / 10 Gbps``.
    * ``host_ecn``: host NIC queues mark at the same threshold (a CE-marking host
      qdisc). Without it a DCTCP flow whose bottleneck is its own NIC never sees a mark
      and its window, and the NIC queue in front of every other packet of that host,
      grow without bound.
    * ``lossless``: PFC on; ``switch_buffer_bytes`` is the shared buffer per switch
      (default: the sum of ``queue_limit_for(rate)`` over its ports); ``pfc_alpha`` the dynamic-threshold factor,
      or ``pfc_static_threshold_bytes`` a fixed per-ingress threshold;
      ``pfc_headroom_factor`` x rate x delay + 2 MTU of headroom per ingress;
      ``pfc_resume_offset_bytes`` hysteresis (default 2 MTU).

    The fields are in the order of the scenario's ``[network]`` keys (its dumps keep that
    order); the two that a scenario does not set come last. The library defaults differ
    from a scenario's in two: ``lossless`` (a scenario's ``pfc`` is on) and
    ``queue_limit_ref_bps`` (a scenario's queue limits scale with the rate).
    """

    lossless: bool = _setting(
        False, "lossless fabric: PFC PAUSE with a shared buffer per switch", key="pfc", scenario_default=True
    )
    queue_limit_bytes: int = _setting(
        300 * 1500,
        "drop-tail limit per output queue when pfc=false, for a 10 Gbps port (scaled by the port's rate "
        "when queue_limit_scales_with_rate)",
        ge=1500,
        le=MAX_BYTES,
    )
    queue_limit_ref_bps: float | None = _setting(
        None,
        "queue limits (and the default PFC buffer) scale with link rate like the ECN threshold; false: "
        "the same bytes at every rate, so at 100 Gbps the ECN threshold (650 packets) exceeds the buffer and PFC, "
        "not ECN, controls the queues (docs/experiments.md, 100 Gb/s)",
        key="queue_limit_scales_with_rate",
        values={True: REFERENCE_RATE_BPS, False: None},
        scenario_default=True,
    )
    switch_buffer_bytes: int | None = _setting(
        None,
        "shared buffer per switch when pfc=true; None = the sum of its ports' queue limits",
        ge=1500,
        le=MAX_BYTES,
    )
    pfc_alpha: float = _setting(1.0 / 8.0, "dynamic PFC threshold: pause when ingress > alpha x free", gt=0, le=64)
    pfc_headroom_factor: float = _setting(3.0, "PFC headroom per ingress: factor x rate x delay + 2 MTU", ge=0, le=1e3)
    ecn: bool = _setting(True, "ECN marking (DCTCP step marking at enqueue)")
    ecn_k_packets_at_10g: float = _setting(
        65.0,
        "marking threshold in MTU packets at 10 Gbps, scaled by rate",
        key="ecn_k_packets",
        ge=0,
        le=1e9,
    )
    ecn_k_bytes: int | None = _setting(
        None, "fixed marking threshold in bytes (overrides ecn_k_packets)", ge=0, le=MAX_BYTES
    )
    host_ecn: bool = _setting(
        True,
        "host NIC queues mark ECN at the same threshold (a CE-marking qdisc); without it a sender "
        "limited by its own NIC grows its window without bound and delays everything else its host sends",
    )
    mtu_bytes: int = _setting(1500, "IP MTU; TCP segments carry mtu_bytes - 40", ge=256, le=9000)
    pfc_static_threshold_bytes: int | None = None
    pfc_resume_offset_bytes: int | None = None

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, what: str) -> None:
            if not ok:
                raise FieldError(name, f"{what}, got {getattr(self, name)!r}")

        check(
            "mtu_bytes",
            isinstance(self.mtu_bytes, int) and 64 <= self.mtu_bytes <= 65536,
            "must be an int in [64, 65536]",
        )
        check("queue_limit_bytes", self.queue_limit_bytes >= self.mtu_bytes, "must be at least one MTU")
        check(
            "queue_limit_ref_bps",
            self.queue_limit_ref_bps is None or self.queue_limit_ref_bps > 0,
            "must be > 0",
        )
        check("ecn_k_packets_at_10g", self.ecn_k_packets_at_10g >= 0, "must be >= 0")
        check("ecn_k_bytes", self.ecn_k_bytes is None or self.ecn_k_bytes >= 0, "must be >= 0")
        check(
            "switch_buffer_bytes",
            self.switch_buffer_bytes is None or self.switch_buffer_bytes >= self.mtu_bytes,
            "must be at least one MTU",
        )
        check("pfc_alpha", 0 < self.pfc_alpha <= 64, "must be in (0, 64]")
        check(
            "pfc_static_threshold_bytes",
            self.pfc_static_threshold_bytes is None or self.pfc_static_threshold_bytes >= self.mtu_bytes,
            "must be at least one MTU",
        )
        check("pfc_headroom_factor", self.pfc_headroom_factor >= 0, "must be >= 0")
        check(
            "pfc_resume_offset_bytes",
            self.pfc_resume_offset_bytes is None or self.pfc_resume_offset_bytes >= 0,
            "must be >= 0",
        )

    def queue_limit_for(self, rate_bps: float) -> int:
        """Drop-tail limit (and share of a lossless switch's default buffer) in bytes for
        a port of ``rate_bps``: ``queue_limit_bytes``, scaled by ``rate / queue_limit_ref_bps``
        when that is set."""
        if self.queue_limit_ref_bps is None:
            return self.queue_limit_bytes
        return max(self.mtu_bytes, round(self.queue_limit_bytes * rate_bps / self.queue_limit_ref_bps))

    def ecn_k_for(self, rate_bps: float) -> int:
        """ECN marking threshold in bytes for a port of ``rate_bps``."""
        if self.ecn_k_bytes is not None:
            return self.ecn_k_bytes
        return round(self.ecn_k_packets_at_10g * self.mtu_bytes * rate_bps / REFERENCE_RATE_BPS)

    def headroom_for(self, rate_bps: float, delay_ps: int) -> int:
        """PFC headroom in bytes for an ingress link: factor x rate x delay + 2 MTU."""
        return int(self.pfc_headroom_factor * rate_bps * delay_ps / _BITS_PS) + 2 * self.mtu_bytes

    @classmethod
    def from_scenario(cls, section: Mapping[str, Any]) -> NetworkConfig:
        """The configuration a scenario's ``[network]`` table (``section``: its values by
        key, others ignored) stands for: each of :data:`SCENARIO_SETTINGS` from its key, the
        rest at the library's defaults. Raises :class:`FieldError` naming the field."""
        return cls(**{s.name: s.field_value(section[s.key]) for s in SCENARIO_SETTINGS})


@dataclass(frozen=True)
class ScenarioSetting:
    """A field of :class:`NetworkConfig` as a scenario's ``[network]`` key (see ``_setting``)."""

    name: str  # the field
    key: str  # the scenario key
    type: Any  # the scenario value's type
    default: Any  # the scenario's default
    description: str
    range: Mapping[str, float]  # pydantic bounds of the scenario's values
    values: Mapping[Any, Any] | None  # scenario value -> field value, where they differ

    def field_value(self, value: Any) -> Any:
        """The field's value for the scenario's ``value``."""
        return value if self.values is None else self.values[value]


def _scenario_settings() -> tuple[ScenarioSetting, ...]:
    hints = typing.get_type_hints(NetworkConfig)
    out = []
    for f in fields(NetworkConfig):
        meta = f.metadata.get("scenario")
        if meta is None:
            continue
        values = meta["values"]
        out.append(
            ScenarioSetting(
                name=f.name,
                key=meta["key"] or f.name,
                type=hints[f.name] if values is None else type(next(iter(values))),
                default=meta["scenario_default"],
                description=meta["description"],
                range=meta["range"],
                values=values,
            )
        )
    return tuple(out)


#: The fields of :class:`NetworkConfig` that a scenario's ``[network]`` table sets, in its order.
SCENARIO_SETTINGS: tuple[ScenarioSetting, ...] = _scenario_settings()


def scenario_key(name: str) -> str:
    """The scenario key (``network.<key>``) of :class:`NetworkConfig`'s field ``name``."""
    for s in SCENARIO_SETTINGS:
        if s.name == name:
            return f"network.{s.key}"
    return f"network.{name}"
