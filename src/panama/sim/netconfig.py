"""Configuration of the simulated network's switches and links (:class:`NetworkConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from panama.core.errors import FieldError
from panama.core.units import PS_PER_S

__all__ = ["NetworkConfig", "REFERENCE_RATE_BPS"]

# The port rate at which the scenario gives its per-port sizes: the ECN threshold in
# packets (``ecn_k_packets_at_10g``) and, when they scale with the rate, the queue limits.
REFERENCE_RATE_BPS = 10e9

_BITS_PS = 8 * PS_PER_S  # bits * ps per second: tx_ps = size_bytes * _BITS_PS / rate_bps


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
    """

    mtu_bytes: int = 1500
    queue_limit_bytes: int = 300 * 1500
    queue_limit_ref_bps: float | None = None
    ecn: bool = True
    ecn_k_packets_at_10g: float = 65.0
    ecn_k_bytes: int | None = None
    host_ecn: bool = True
    lossless: bool = False
    switch_buffer_bytes: int | None = None
    pfc_alpha: float = 1.0 / 8.0
    pfc_static_threshold_bytes: int | None = None
    pfc_headroom_factor: float = 3.0
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
