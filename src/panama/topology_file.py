"""Topologies from what users give: a spec string or a file, read here (the core reads none).

:func:`load_topology` is what the command line (``--topology``, ``panama topology show``),
a scenario's ``topology.spec`` and a cluster file's ``topology`` go through: the path of
an existing file is read and parsed as TOML when it ends in ``.toml``, else as an edge
list (:func:`panama.core.topology.topology_from_toml`,
:func:`~panama.core.topology.topology_from_edge_list`); anything else is a spec for
:func:`panama.core.topology.parse_topology`.
"""

from __future__ import annotations

from pathlib import Path

from panama.core.topology import (
    Topology,
    TopologyError,
    looks_like_a_file,
    parse_topology,
    topology_from_edge_list,
    topology_from_toml,
)

__all__ = ["load_topology"]


def load_topology(spec_or_path: str | Path) -> Topology:
    """A topology from a spec string or the path of a ``.toml`` / edge-list file
    (:class:`~panama.core.topology.TopologyError` naming the field when it is neither)."""
    if isinstance(spec_or_path, Path) or Path(str(spec_or_path)).is_file():
        path = Path(spec_or_path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise TopologyError("topology", f"cannot read {path}: {exc.strerror}") from None
        if path.suffix.lower() == ".toml":
            return topology_from_toml(text, name=path.name)
        return topology_from_edge_list(text, name=path.name)
    spec = str(spec_or_path)
    if looks_like_a_file(spec):
        raise TopologyError("topology", f"no such file: {spec}")
    return parse_topology(spec)
