"""Burst statistics of PANAMA traffic: aggregation packets per microsecond per switch output
port, gradients (up the trees, the bursts of iteration starts) and results (down, the
multicast fan-out) apart.

Measured at the switches' existing PANAMA packet hook (:meth:`BurstMeter.install` wraps
each switch's hook; nothing on the ports' hot path changes): every packet the
accelerator emits is counted for the port it leaves by (switch -> neighbour) in bins
of its emission time (the hook's fixed latency shifts every bin alike). The scenario's
``burst_bin_us`` sets the bin; 0, the default, leaves the meter out, since the wrapper is
a Python call per aggregation packet and switch. One pass, constant memory per port: the
current bin and its count, the busiest bin and when it was, and a histogram of the counts
of busy bins. For scale: a 10 Gb/s port drains 1.25 KB per µs,
under one MTU-sized packet, so a bin of *n* packets adds about *n - 1* packets of queue.

``summary.json`` carries them as ``diagnostics.panama_bursts`` (docs/simulator.md):
per packet type (``gradient``, ``result``) and port direction (``tor->agg``,
``agg->tor``, ``tor->host``, ...): ``ports`` that carried any, ``busy_bins`` (bins with
at least one packet), ``mean``/``p99``/``max`` packets per busy µs over all its ports,
the busiest port and the time (µs) its busiest bin started; the counts are per bin
(``*_per_us`` holds for the 1 µs bin that issue 18 asks for, ``burst_bin_us = 1``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from panama.core.packet import FLAG_RESULT
from panama.core.units import PS_PER_US
from panama.sim.packet import KIND_PANAMA

__all__ = ["BurstMeter"]

_TYPES = ("gradient", "result")


class _PortBins:
    __slots__ = ("cur", "count", "max", "max_bin", "hist", "total")

    def __init__(self):
        self.cur = -1
        self.count = 0
        self.max = 0
        self.max_bin = -1
        self.hist: dict[int, int] = {}
        self.total = 0

    def close(self) -> None:
        c = self.count
        if c:
            self.hist[c] = self.hist.get(c, 0) + 1
            if c > self.max:
                self.max = c
                self.max_bin = self.cur
            self.count = 0


class BurstMeter:
    """Counts the PANAMA packets each switch's hook emits, per output port, in ``bin_ps`` bins."""

    def __init__(self, engine: Any, bin_ps: int = PS_PER_US):
        self.engine = engine
        self.bin_ps = bin_ps
        # (switch kind, neighbour kind, type, switch name, neighbour name) -> bins
        self.ports: dict[tuple[str, str, int, str, str], _PortBins] = {}

    def install(self, net: Any, switches: Iterable[str]) -> None:
        """Wrap the PANAMA hook of every switch in ``switches`` that has one."""
        for name in switches:
            sw = net.switch(name)
            inner = sw.hooks[KIND_PANAMA]
            if inner is not None:
                sw.set_hook(KIND_PANAMA, self._wrap(net, sw, inner), sw.hook_latency_ps)

    def _wrap(self, net: Any, sw: Any, inner: Any):
        run = inner  # the plain-hook contract: (neighbour, packet) pairs (HookObject.__call__)
        eng = self.engine
        bin_ps = self.bin_ps
        own = sw.kind
        kinds = {n: net.node(n).kind for n in (p.peer.name for p in sw.ports)}
        mine: dict[tuple[str, int], _PortBins] = {}
        ports = self.ports

        def hook(spkt: Any, frm: str):
            out = run(spkt, frm)
            if out:
                b = eng.now // bin_ps
                for nb, p in out:
                    t = 1 if p.inner.flags & FLAG_RESULT else 0
                    st = mine.get((nb, t))
                    if st is None:
                        st = mine[(nb, t)] = ports[(own, kinds[nb], t, sw.name, nb)] = _PortBins()
                    if st.cur != b:
                        st.close()
                        st.cur = b
                    st.count += 1
                    st.total += 1
            return out

        return hook

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per packet type and port direction: busy bins, mean/p99/max packets per busy bin."""
        groups: dict[tuple[int, str], list[tuple[str, _PortBins]]] = {}
        for (own, peer, t, sw, nb), st in self.ports.items():
            st.close()
            groups.setdefault((t, f"{own}->{peer}"), []).append((f"{sw}->{nb}", st))
        out: dict[str, dict[str, Any]] = {name: {} for name in _TYPES}
        for (t, direction), members in sorted(groups.items()):
            hist: dict[int, int] = {}
            for _, st in members:
                for c, n in st.hist.items():
                    hist[c] = hist.get(c, 0) + n
            bins = sum(hist.values())
            if not bins:
                continue
            name, top = max(members, key=lambda m: (m[1].max, -m[1].max_bin))
            out[_TYPES[t]][direction] = {
                "ports": len(members),
                "packets": sum(st.total for _, st in members),
                "busy_bins": bins,
                "mean_per_us": sum(c * n for c, n in hist.items()) / bins,
                "p99_per_us": _percentile(hist, bins, 0.99),
                "max_per_us": top.max,
                "max_port": name,
                "max_at_us": top.max_bin * self.bin_ps / PS_PER_US,
            }
        return out


def _percentile(hist: dict[int, int], n: int, q: float) -> int:
    """The smallest count c with at least ``q`` of the ``n`` busy bins at or below c."""
    need = q * n
    seen = 0
    for c in sorted(hist):
        seen += hist[c]
        if seen >= need:
            return c
    return max(hist)
