"""Shared fixtures-as-functions for the simulator tests."""

from __future__ import annotations

import subprocess
import sys

import networkx as nx

from panama import _ext
from panama.core.units import us


def star(n_hosts: int, rate_bps=10e9, delay_ps=us(1), rates: dict | None = None) -> nx.Graph:
    """``n_hosts`` hosts ``h0..`` on one switch ``tor0``; ``rates`` overrides host ``i``'s link rate."""
    g = nx.Graph()
    g.add_node("tor0", kind="tor")
    for i in range(n_hosts):
        g.add_node(f"h{i}", kind="host")
        g.add_edge(f"h{i}", "tor0", rate_bps=(rates or {}).get(i, rate_bps), delay_ps=delay_ps)
    return g


def python_child(code: str, pure: bool) -> str:
    """The stripped stdout of ``python -c code`` in a child on one path (pure: the ``.py``
    files, else the compiled modules where built)."""
    out = subprocess.run(
        [sys.executable, "-c", code], env=_ext.child_env(pure), capture_output=True, text=True, check=True
    )
    return out.stdout.strip()
