"""The controller service's cluster file: topology plus every switch daemon's addresses.

:func:`load_cluster` reads it (TOML path, text or dict) into a :class:`ClusterSpec`;
:func:`spread_hosts` is the order in which ranks take the topology's hosts.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panama.addresses import reachable
from panama.core.errors import FieldError
from panama.core.topology import Topology, TopologyError, leaf_spine
from panama.runtime.net.udp import Address, AddressError, format_addr, parse_addr
from panama.topology_file import load_topology


class ClusterFileError(FieldError):
    """The cluster file is invalid; ``field`` names the offending key."""


@dataclass
class SwitchInfo:
    """A switch daemon as the controller knows it."""

    name: str
    role: str  # topology kind: tor, agg, core, spine
    udp: Address
    control: Address
    up: bool = True
    error: str = ""
    timeouts: int = 0
    payload_elems: int | None = None
    packet_memory: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.name,
            "role": self.role,
            "udp": format_addr(self.udp),
            "control": format_addr(self.control),
            "up": self.up,
            "error": self.error,
            "payload_elems": self.payload_elems,
            "packet_memory": self.packet_memory,
        }


@dataclass
class ClusterSpec:
    topology: Topology
    switches: dict[str, SwitchInfo]


def load_cluster(source: str | Path | dict) -> ClusterSpec:
    """Parse a cluster file (path, TOML text, or an already-parsed dict).

    Keys: ``topology`` (a spec such as ``"leaf-spine:leaves=2,spines=2,hosts_per_leaf=4"``
    or a topology file path) or the numbers ``leaves``, ``spines``, ``hosts_per_leaf``;
    and a table ``[switches.NAME]`` with ``udp = "HOST:PORT"`` and ``control =
    "HOST:PORT"`` for every switch of the topology.
    """
    if isinstance(source, dict):
        data = source
    else:
        text = Path(source).read_text() if Path(str(source)).is_file() else None
        if text is None:
            raise ClusterFileError("cluster", f"no such file: {source}")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ClusterFileError("cluster", f"not valid TOML: {exc}") from None
    allowed = {"topology", "leaves", "spines", "hosts_per_leaf", "switches"}
    for key in data:
        if key not in allowed:
            raise ClusterFileError(key, f"unknown key (allowed: {', '.join(sorted(allowed))})")
    try:
        if "topology" in data:
            if not isinstance(data["topology"], str):
                raise ClusterFileError("topology", "expected a spec string or a file path")
            topo = load_topology(data["topology"])
        else:
            for key in ("leaves", "spines", "hosts_per_leaf"):
                if key not in data:
                    raise ClusterFileError(key, "missing (or give 'topology')")
            topo = leaf_spine(data["leaves"], data["spines"], data["hosts_per_leaf"])
    except TopologyError as exc:
        raise ClusterFileError(f"topology.{exc.field}", exc.detail) from None
    raw = data.get("switches")
    if not isinstance(raw, dict):
        raise ClusterFileError("switches", "expected a table [switches.NAME] with udp and control addresses")
    switches: dict[str, SwitchInfo] = {}
    for name in topo.switches:
        entry = raw.get(name)
        if not isinstance(entry, dict):
            raise ClusterFileError(f"switches.{name}", "missing (every switch of the topology needs a daemon)")
        try:
            udp = parse_addr(entry.get("udp"), field=f"switches.{name}.udp")
            control = parse_addr(entry.get("control"), field=f"switches.{name}.control")
        except AddressError as exc:
            raise ClusterFileError(exc.field, exc.detail) from None
        for key, addr in (("udp", udp), ("control", control)):
            if not reachable(*addr):  # the one rule: panama.addresses
                raise ClusterFileError(
                    f"switches.{name}.{key}",
                    f"{format_addr(addr)} is not an address others can reach (give the daemon's own address and port)",
                )
        switches[name] = SwitchInfo(name, topo.tier(name), udp, control)
    for name in raw:
        if name not in switches:
            raise ClusterFileError(f"switches.{name}", f"not a switch of topology {topo.name}")
    return ClusterSpec(topo, switches)


def spread_hosts(topo: Topology) -> list[str]:
    """Hosts in rank order: the first host of every leaf, then the second of every leaf, ..."""
    per_tor = [topo.hosts_of(t) for t in topo.tors]
    out = []
    for i in range(max((len(h) for h in per_tor), default=0)):
        out.extend(h[i] for h in per_tor if i < len(h))
    return out
