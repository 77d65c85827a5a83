"""Data-centre topologies as typed networkx graphs (pure: no I/O; files are read by
:func:`panama.topology_file.load_topology`, which hands their text to the parsers here).

Contract
--------
A :class:`Topology` wraps an undirected ``networkx.Graph``. Every node has the
attribute ``kind`` in :data:`KINDS` (``host``, ``tor``, ``agg``, ``core``, ``spine``)
and ``pod`` (fat-tree pod number of ToRs and aggregation switches, else ``None``);
every edge has ``rate_bps`` (float, > 0) and ``delay_ps`` (int, >= 0, one-way
propagation). Every host hangs off exactly one ToR; hosts never connect to each other.
A Topology is immutable once built (the graph must not be modified).

Node names (documented in docs/controller.md):

- fat-tree of radix ``k``: pods ``0..k-1``; ToRs ``tor0..`` (pod ``p`` holds
  ``tor{p*k/2} .. tor{p*k/2+k/2-1}``), aggregation switches ``agg0..`` numbered the same
  way, cores ``core0..core{(k/2)^2-1}``: core ``c`` links to aggregation switch
  ``c // (k/2)`` (position within the pod) of every pod; host ``h{t*k/2+i}`` is the
  ``i``-th host under ``tor{t}``.
- leaf-spine: ``leaf0..`` (kind ``tor``), ``spine0..`` (kind ``spine``), every leaf
  linked to every spine; host ``h{l*hosts_per_leaf+i}`` under ``leaf{l}``.

Specs (:func:`parse_topology`): ``fat-tree:k=4[,gbps=10][,host_gbps=..][,delay_us=1]``,
``leaf-spine:leaves=4,spines=2,hosts_per_leaf=4[,host_gbps=10][,fabric_gbps=..][,delay_us=1]``,
and, from the text of a TOML file or a plain edge-list file, :func:`topology_from_toml`
and :func:`topology_from_edge_list`.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

import networkx as nx

from panama.core.errors import FieldError
from panama.core.units import PS_PER_S, PS_PER_US

HOST = "host"
TOR = "tor"
AGG = "agg"
CORE = "core"
SPINE = "spine"
KINDS = (HOST, TOR, AGG, CORE, SPINE)
SWITCH_KINDS = (TOR, AGG, CORE, SPINE)

DEFAULT_RATE_BPS = 10e9
DEFAULT_DELAY_PS = 1_000_000  # 1 us per hop
MAX_FAT_TREE_K = 64  # 65,536 hosts
MAX_HOSTS = 100_000

_NAME_PREFIX_KIND = (
    ("spine", SPINE),
    ("core", CORE),
    ("agg", AGG),
    ("leaf", TOR),
    ("tor", TOR),
    ("edge", TOR),
    ("h", HOST),
)


class TopologyError(FieldError):
    """Invalid topology parameters or description; ``field`` names the offending parameter."""


def natural_key(name: Any) -> tuple:
    """Sort key that orders ``h2`` before ``h10`` (digits compared as numbers)."""
    parts = re.split(r"(\d+)", str(name))
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p != "")


class Topology:
    """An immutable, validated network graph with typed nodes and per-link rate and delay.

    ``graph`` is a ``networkx.Graph``; ``name`` a canonical spec string (or file name);
    ``params`` the builder parameters (empty for custom graphs).
    """

    def __init__(self, graph: nx.Graph, *, name: str = "custom", params: Mapping[str, Any] | None = None):
        self.graph = graph
        self.name = name
        self.params = dict(params or {})
        self._validate()
        g = graph
        self._kind: dict[str, str] = {n: d["kind"] for n, d in g.nodes(data=True)}
        self.hosts: list[str] = sorted((n for n, k in self._kind.items() if k == HOST), key=natural_key)
        by_kind = {k: sorted((n for n, kk in self._kind.items() if kk == k), key=natural_key) for k in SWITCH_KINDS}
        self.tors: list[str] = by_kind[TOR]
        self.aggs: list[str] = by_kind[AGG]
        self.cores: list[str] = by_kind[CORE]
        self.spines: list[str] = by_kind[SPINE]
        self.switches: list[str] = self.tors + self.aggs + self.cores + self.spines
        self._tor_of: dict[str, str] = {}
        self._hosts_of: dict[str, list[str]] = {t: [] for t in self.tors}
        for h in self.hosts:
            (tor,) = g.adj[h]
            self._tor_of[h] = tor
            self._hosts_of[tor].append(h)
        # Level in the up/down hierarchy: host 0, ToR 1, agg 2, core 3; a spine sits
        # directly above ToRs (level 2) in two-tier networks and above aggs otherwise.
        spine_level = 3 if self.aggs else 2
        levels = {HOST: 0, TOR: 1, AGG: 2, CORE: 3, SPINE: spine_level}
        self._level: dict[str, int] = {n: levels[k] for n, k in self._kind.items()}
        self._up: dict[str, tuple[str, ...]] = {}
        self._down: dict[str, tuple[str, ...]] = {}
        # node -> neighbour -> the link's attribute dict (the graph's own): rate_bps and
        # delay_ps in two plain lookups instead of a networkx view call each (trees, paths).
        self._link: dict[str, dict[str, dict[str, Any]]] = {}
        for n in g.nodes:
            lv = self._level[n]
            self._link[n] = dict(g.adj[n])
            nbrs = sorted(g.adj[n], key=natural_key)
            self._up[n] = tuple(m for m in nbrs if self._level[m] > lv)
            self._down[n] = tuple(m for m in nbrs if self._level[m] < lv)
        ranked = sorted(g.nodes, key=lambda n: (self._level[n], natural_key(n)))
        self._rank: dict[str, int] = {n: i for i, n in enumerate(ranked)}
        self._bisection: float | None = None

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        g = self.graph
        if g.is_directed() or g.is_multigraph():
            raise TopologyError("graph", "must be an undirected simple networkx.Graph")
        if g.number_of_nodes() == 0:
            raise TopologyError("graph", "has no nodes")
        for n, d in g.nodes(data=True):
            kind = d.get("kind")
            if kind not in KINDS:
                raise TopologyError(f"node {n}", f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
            if not isinstance(n, str) or not n:
                raise TopologyError(f"node {n!r}", "node names must be non-empty strings")
        for a, b, d in g.edges(data=True):
            rate = d.get("rate_bps")
            if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
                raise TopologyError(f"link {a}-{b}", f"rate_bps must be a finite number > 0, got {rate!r}")
            delay = d.get("delay_ps")
            if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
                raise TopologyError(f"link {a}-{b}", f"delay_ps must be an integer >= 0, got {delay!r}")
            if g.nodes[a]["kind"] == HOST and g.nodes[b]["kind"] == HOST:
                raise TopologyError(f"link {a}-{b}", "hosts cannot be linked to each other")
        hosts = [n for n, d in g.nodes(data=True) if d["kind"] == HOST]
        if not hosts:
            raise TopologyError("graph", "has no hosts")
        for h in hosts:
            nbrs = list(g.adj[h])
            if len(nbrs) != 1 or g.nodes[nbrs[0]]["kind"] != TOR:
                raise TopologyError(f"host {h}", f"must link to exactly one ToR, got neighbours {sorted(nbrs)}")
        if not nx.is_connected(g):
            raise TopologyError("graph", "is not connected")

    # ------------------------------------------------------------------ queries
    def tier(self, node: str) -> str:
        """The node's kind: ``host``, ``tor``, ``agg``, ``core`` or ``spine``."""
        try:
            return self._kind[node]
        except KeyError:
            raise KeyError(f"unknown node {node!r} in topology {self.name}") from None

    def level(self, node: str) -> int:
        """Height in the hierarchy: host 0, ToR 1, agg 2, core 3 (spine 2 or 3)."""
        return self._level[node]

    def rank(self, node: str) -> int:
        """Position in the order (level, natural name): a fast sort key (``h2`` before ``h10``)."""
        return self._rank[node]

    def is_host(self, node: str) -> bool:
        return self._kind.get(node) == HOST

    def is_switch(self, node: str) -> bool:
        kind = self._kind.get(node)
        return kind is not None and kind != HOST

    def __contains__(self, node: object) -> bool:
        return node in self._kind

    def tor_of(self, host: str) -> str:
        """The ToR (leaf) a host hangs off."""
        try:
            return self._tor_of[host]
        except KeyError:
            raise KeyError(f"unknown host {host!r} in topology {self.name}") from None

    def hosts_of(self, tor: str) -> list[str]:
        """Hosts below a ToR, in name order."""
        return list(self._hosts_of[tor])

    def pod(self, node: str) -> int | None:
        """Fat-tree pod of a ToR or aggregation switch (hosts: their ToR's pod), else None."""
        if self._kind.get(node) == HOST:
            node = self._tor_of[node]
        return self.graph.nodes[node].get("pod")

    def up(self, node: str) -> tuple[str, ...]:
        """Neighbours one level up (name order)."""
        return self._up[node]

    def down(self, node: str) -> tuple[str, ...]:
        """Neighbours one level down (name order)."""
        return self._down[node]

    def rate_bps(self, a: str, b: str) -> float:
        try:
            return self._link[a][b]["rate_bps"]
        except KeyError:
            raise KeyError(f"no link {a}-{b} in topology {self.name}") from None

    def delay_ps(self, a: str, b: str) -> int:
        try:
            return self._link[a][b]["delay_ps"]
        except KeyError:
            raise KeyError(f"no link {a}-{b} in topology {self.name}") from None

    def links(self) -> list[tuple[str, str, float, int]]:
        """Every link once as ``(lower, upper, rate_bps, delay_ps)``, lower end first, sorted."""
        out = []
        for a, b, d in self.graph.edges(data=True):
            if (self._level[a], natural_key(a)) > (self._level[b], natural_key(b)):
                a, b = b, a
            out.append((a, b, float(d["rate_bps"]), int(d["delay_ps"])))
        out.sort(
            key=lambda link: (self._level[link[0]], self._level[link[1]], natural_key(link[0]), natural_key(link[1]))
        )
        return out

    def counts(self) -> dict[str, int]:
        """Number of hosts and of switches of each kind, and of links."""
        return {
            "hosts": len(self.hosts),
            "tor": len(self.tors),
            "agg": len(self.aggs),
            "core": len(self.cores),
            "spine": len(self.spines),
            "links": self.graph.number_of_edges(),
        }

    def bisection_bandwidth_bps(self) -> float:
        """Capacity (one direction) of the minimum cut between the first and second half of the hosts.

        Hosts are taken in name order, which is rack order for the built-in topologies, so
        this is the usual bisection bandwidth of a fat-tree or leaf-spine (computed as a
        max flow, so oversubscribed links count at their real rate).
        """
        if self._bisection is None:
            n = len(self.hosts)
            if n < 2:
                self._bisection = 0.0
            else:
                left, right = self.hosts[: n // 2], self.hosts[n // 2 :]
                flow = nx.Graph()
                for a, b, d in self.graph.edges(data=True):
                    flow.add_edge(a, b, capacity=d["rate_bps"] / 1e9)
                src, dst = ("__source__",), ("__sink__",)
                for h in left:
                    flow.add_edge(src, h)  # no capacity attribute: infinite
                for h in right:
                    flow.add_edge(h, dst)
                value = nx.maximum_flow_value(flow, src, dst)
                self._bisection = round(value * 1e9, 3)
        return self._bisection

    def oversubscription(self) -> float:
        """Worst ToR ratio of host-facing to fabric-facing capacity (1.0 = non-blocking)."""
        worst = 0.0
        for t in self.tors:
            down = sum(self.rate_bps(t, h) for h in self._down[t])
            up = sum(self.rate_bps(t, u) for u in self._up[t])
            if up > 0:
                worst = max(worst, down / up)
        return worst

    def summary(self) -> dict[str, Any]:
        """Plain-data summary (counts, bisection bandwidth, link rates) for reports."""
        rates = sorted({float(d["rate_bps"]) for _, _, d in self.graph.edges(data=True)})
        delays = sorted({int(d["delay_ps"]) for _, _, d in self.graph.edges(data=True)})
        return {
            "name": self.name,
            "counts": self.counts(),
            "bisection_bandwidth_bps": self.bisection_bandwidth_bps(),
            "oversubscription": round(self.oversubscription(), 6),
            "link_rates_bps": rates,
            "link_delays_ps": delays,
            "params": dict(self.params),
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``panama topology show --json`` (schema: docs/topology-schema.json)."""
        return {
            "topology": self.name,
            "summary": self.summary(),
            "hosts": list(self.hosts),
            "switches": [{"name": s, "tier": self._kind[s], "pod": self.pod(s)} for s in self.switches],
            "links": [[a, b, rate, delay / PS_PER_S] for a, b, rate, delay in self.links()],
        }

    def layout(self) -> dict[str, tuple[float, float]]:
        """Layered drawing positions: y = level, x spreads each level evenly in name order.

        Hosts sit under their ToR in rack order, so trees read bottom-up.
        """
        pos: dict[str, tuple[float, float]] = {}
        order = {0: list(self.hosts), 1: list(self.tors)}
        upper: dict[int, list[str]] = {}
        for s in self.aggs + self.cores + self.spines:
            upper.setdefault(self._level[s], []).append(s)
        order.update(upper)
        width = max(len(v) for v in order.values())
        for lv, nodes in order.items():
            n = len(nodes)
            for i, node in enumerate(nodes):
                pos[node] = ((i + 0.5) * width / max(n, 1), float(lv))
        return pos

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"Topology({self.name!r}: {c['hosts']} hosts, {c['tor']} tor, {c['agg']} agg, "
            f"{c['core']} core, {c['spine']} spine, {c['links']} links)"
        )


# ---------------------------------------------------------------------- builders
def _check_int(field: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(field, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise TopologyError(field, f"must be {bound}, got {value}")
    return value


def _check_rate(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise TopologyError(field, f"must be a finite number > 0, got {value!r}")
    return float(value)


def _check_delay(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TopologyError(field, f"must be an integer number of picoseconds >= 0, got {value!r}")
    return value


def fat_tree(
    k: int,
    rate_bps: float = DEFAULT_RATE_BPS,
    delay_ps: int = DEFAULT_DELAY_PS,
    *,
    host_rate_bps: float | None = None,
) -> Topology:
    """Three-tier fat-tree of even radix ``k``: ``k**3/4`` hosts, ``k**2/4`` cores, ``k`` pods.

    ``rate_bps`` is the rate of switch-to-switch links, ``host_rate_bps`` (default: the
    same) the rate of host links; ``delay_ps`` the propagation delay of every link.
    """
    _check_int("k", k, 2, MAX_FAT_TREE_K)
    if k % 2:
        raise TopologyError("k", f"must be even, got {k}")
    rate = _check_rate("rate_bps", rate_bps)
    host_rate = rate if host_rate_bps is None else _check_rate("host_rate_bps", host_rate_bps)
    delay = _check_delay("delay_ps", delay_ps)
    half = k // 2
    g = nx.Graph()
    for c in range(half * half):
        g.add_node(f"core{c}", kind=CORE, pod=None, index=c)
    for p in range(k):
        for i in range(half):
            t = p * half + i
            g.add_node(f"tor{t}", kind=TOR, pod=p, index=t)
            g.add_node(f"agg{t}", kind=AGG, pod=p, index=t)
        for i in range(half):
            t = p * half + i
            for j in range(half):
                g.add_edge(f"tor{t}", f"agg{p * half + j}", rate_bps=rate, delay_ps=delay)
            for x in range(half):
                h = t * half + x
                g.add_node(f"h{h}", kind=HOST, pod=p, index=h)
                g.add_edge(f"h{h}", f"tor{t}", rate_bps=host_rate, delay_ps=delay)
        for j in range(half):
            for m in range(half):
                g.add_edge(f"agg{p * half + j}", f"core{j * half + m}", rate_bps=rate, delay_ps=delay)
    params = {"k": k, "rate_bps": rate, "host_rate_bps": host_rate, "delay_ps": delay}
    return Topology(g, name=_spec_name("fat-tree", params), params=params)


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    host_rate_bps: float = DEFAULT_RATE_BPS,
    fabric_rate_bps: float | None = None,
    delay_ps: int = DEFAULT_DELAY_PS,
) -> Topology:
    """Two-tier leaf-spine: every leaf links to every spine; ``hosts_per_leaf`` hosts per leaf.

    ``fabric_rate_bps`` (leaf-spine links) defaults to ``host_rate_bps``; the
    oversubscription is ``hosts_per_leaf * host_rate_bps / (spines * fabric_rate_bps)``.
    """
    _check_int("leaves", leaves, 1)
    _check_int("spines", spines, 1)
    _check_int("hosts_per_leaf", hosts_per_leaf, 1)
    if leaves * hosts_per_leaf > MAX_HOSTS:
        raise TopologyError("hosts_per_leaf", f"leaves * hosts_per_leaf must be <= {MAX_HOSTS}")
    host_rate = _check_rate("host_rate_bps", host_rate_bps)
    fabric = host_rate if fabric_rate_bps is None else _check_rate("fabric_rate_bps", fabric_rate_bps)
    delay = _check_delay("delay_ps", delay_ps)
    g = nx.Graph()
    for s in range(spines):
        g.add_node(f"spine{s}", kind=SPINE, pod=None, index=s)
    for leaf in range(leaves):
        g.add_node(f"leaf{leaf}", kind=TOR, pod=None, index=leaf)
        for s in range(spines):
            g.add_edge(f"leaf{leaf}", f"spine{s}", rate_bps=fabric, delay_ps=delay)
        for x in range(hosts_per_leaf):
            h = leaf * hosts_per_leaf + x
            g.add_node(f"h{h}", kind=HOST, pod=None, index=h)
            g.add_edge(f"h{h}", f"leaf{leaf}", rate_bps=host_rate, delay_ps=delay)
    params = {
        "leaves": leaves,
        "spines": spines,
        "hosts_per_leaf": hosts_per_leaf,
        "host_rate_bps": host_rate,
        "fabric_rate_bps": fabric,
        "delay_ps": delay,
    }
    return Topology(g, name=_spec_name("leaf-spine", params), params=params)


def _fmt_num(x: float) -> str:
    return f"{x:g}"


def _spec_name(kind: str, p: Mapping[str, Any]) -> str:
    """Canonical spec string of a built-in topology (parses back to the same topology)."""
    delay = f"delay_us={_fmt_num(p['delay_ps'] / PS_PER_US)}"
    if kind == "fat-tree":
        parts = [f"k={p['k']}", f"gbps={_fmt_num(p['rate_bps'] / 1e9)}"]
        if p["host_rate_bps"] != p["rate_bps"]:
            parts.append(f"host_gbps={_fmt_num(p['host_rate_bps'] / 1e9)}")
    else:
        parts = [
            f"leaves={p['leaves']}",
            f"spines={p['spines']}",
            f"hosts_per_leaf={p['hosts_per_leaf']}",
            f"host_gbps={_fmt_num(p['host_rate_bps'] / 1e9)}",
            f"fabric_gbps={_fmt_num(p['fabric_rate_bps'] / 1e9)}",
        ]
    return f"{kind}:" + ",".join(parts + [delay])


# ---------------------------------------------------------------------- specs and files
_FAT_TREE_KEYS = {"k": int, "gbps": float, "host_gbps": float, "delay_us": float}
_LEAF_SPINE_KEYS = {
    "leaves": int,
    "spines": int,
    "hosts_per_leaf": int,
    "host_gbps": float,
    "fabric_gbps": float,
    "delay_us": float,
}
_KIND_ALIASES = {
    "fat-tree": "fat-tree",
    "fattree": "fat-tree",
    "fat_tree": "fat-tree",
    "leaf-spine": "leaf-spine",
    "leafspine": "leaf-spine",
    "leaf_spine": "leaf-spine",
}


def _convert(key: str, raw: Any, typ: type) -> int | float:
    if isinstance(raw, bool):
        raise TopologyError(key, f"must be a number, got {raw!r}")
    if typ is int:
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip())
        except ValueError:
            raise TopologyError(key, f"must be an integer, got {raw!r}") from None
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise TopologyError(key, f"must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise TopologyError(key, f"must be finite, got {raw!r}")
    return value


def build_topology(kind: str, options: Mapping[str, Any]) -> Topology:
    """Build a named topology from spec options (``k``, ``gbps``, ``leaves``, ... as in the spec)."""
    canonical = _KIND_ALIASES.get(kind.strip().lower())
    if canonical is None:
        raise TopologyError("topology", f"unknown kind {kind!r}; use fat-tree or leaf-spine")
    allowed = _FAT_TREE_KEYS if canonical == "fat-tree" else _LEAF_SPINE_KEYS
    values: dict[str, int | float] = {}
    for key, raw in options.items():
        if key not in allowed:
            raise TopologyError(key, f"unknown {canonical} parameter; allowed: {', '.join(allowed)}")
        values[key] = _convert(key, raw, allowed[key])
    delay_us = values.get("delay_us", DEFAULT_DELAY_PS / PS_PER_US)
    if delay_us < 0:
        raise TopologyError("delay_us", f"must be >= 0, got {delay_us:g}")
    delay_ps = round(delay_us * PS_PER_US)

    def gbps(key: str, default: float | None) -> float | None:
        if key not in values:
            return default
        if values[key] <= 0:
            raise TopologyError(key, f"must be > 0, got {values[key]:g}")
        return values[key] * 1e9

    if canonical == "fat-tree":
        if "k" not in values:
            raise TopologyError("k", "missing (e.g. fat-tree:k=4)")
        return fat_tree(
            values["k"],
            gbps("gbps", DEFAULT_RATE_BPS),
            delay_ps,
            host_rate_bps=gbps("host_gbps", None),
        )
    for key in ("leaves", "spines", "hosts_per_leaf"):
        if key not in values:
            raise TopologyError(key, "missing (e.g. leaf-spine:leaves=4,spines=2,hosts_per_leaf=4)")
    return leaf_spine(
        values["leaves"],
        values["spines"],
        values["hosts_per_leaf"],
        gbps("host_gbps", DEFAULT_RATE_BPS),
        gbps("fabric_gbps", None),
        delay_ps,
    )


def parse_spec(spec: str) -> Topology:
    """Build a topology from a spec string such as ``fat-tree:k=4`` (no file access)."""
    kind, _, rest = spec.strip().partition(":")
    options: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise TopologyError("topology", f"expected KEY=VALUE in {spec!r}, got {item!r}")
        if key in options:
            raise TopologyError(key, f"given twice in {spec!r}")
        options[key] = value.strip()
    return build_topology(kind, options)


def looks_like_a_file(spec: str) -> bool:
    """Whether ``spec`` names a file rather than a topology (no ``:``, and a ``/`` or a
    ``.toml`` ending)."""
    return ":" not in spec and (spec.endswith(".toml") or "/" in spec)


def parse_topology(spec: str) -> Topology:
    """A topology from a spec string (module docstring). Files are read by
    :func:`panama.topology_file.load_topology`; a spec that names one is refused here."""
    spec = str(spec)
    if looks_like_a_file(spec):
        raise TopologyError(
            "topology", f"{spec} names a file: the core reads none (panama.topology_file.load_topology does)"
        )
    return parse_spec(spec)


def kind_from_name(name: str) -> str:
    """Kind implied by a node name prefix (h.. host; tor/leaf/edge.. tor; agg; core; spine)."""
    for prefix, kind in _NAME_PREFIX_KIND:
        if name.startswith(prefix) and (prefix != "h" or name[1:].isdigit() or name.startswith("host")):
            return kind
    raise TopologyError(
        f"node {name}", "cannot infer the kind from the name; use a prefix h, tor, leaf, agg, core or spine"
    )


def _graph_from_links(
    links: Iterable[tuple[str, str, float, int]],
    kinds: Mapping[str, str],
    pods: Mapping[str, int] | None = None,
) -> nx.Graph:
    g = nx.Graph()
    for n, kind in kinds.items():
        g.add_node(n, kind=kind, pod=(pods or {}).get(n), index=0)
    for a, b, rate, delay in links:
        for n in (a, b):
            if n not in g:
                g.add_node(n, kind=kind_from_name(n), pod=None, index=0)
        if g.has_edge(a, b):
            raise TopologyError(f"link {a}-{b}", "listed twice")
        if a == b:
            raise TopologyError(f"link {a}-{b}", "links a node to itself")
        g.add_edge(a, b, rate_bps=rate, delay_ps=delay)
    for n in g.nodes:
        m = re.search(r"(\d+)$", n)
        g.nodes[n]["index"] = int(m.group(1)) if m else 0
    return g


def topology_from_edge_list(text: str, *, name: str = "edge-list") -> Topology:
    """Parse ``A B [GBPS [DELAY_US]]`` lines (``#`` comments; defaults 10 Gbps, 1 us).

    Node kinds come from name prefixes (:func:`kind_from_name`).
    """
    links = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"line {lineno}"
        if not 2 <= len(words) <= 4:
            raise TopologyError(where, f"expected 'A B [GBPS [DELAY_US]]', got {line.strip()!r}")
        gbps = _convert(f"{where} gbps", words[2], float) if len(words) > 2 else DEFAULT_RATE_BPS / 1e9
        delay_us = _convert(f"{where} delay_us", words[3], float) if len(words) > 3 else DEFAULT_DELAY_PS / PS_PER_US
        if gbps <= 0:
            raise TopologyError(f"{where} gbps", f"must be > 0, got {words[2]}")
        if delay_us < 0:
            raise TopologyError(f"{where} delay_us", f"must be >= 0, got {words[3]}")
        links.append((words[0], words[1], gbps * 1e9, round(delay_us * PS_PER_US)))
    if not links:
        raise TopologyError("topology", f"{name} lists no links")
    return Topology(_graph_from_links(links, {}), name=name)


def topology_from_toml(text: str, *, name: str = "topology.toml") -> Topology:
    """Parse a TOML topology: either a built-in kind or explicit nodes and links.

    Built-in: ``kind = "fat-tree"`` plus the spec keys (``k = 4``, ``gbps = 40``, ...).
    Explicit: optional ``gbps`` / ``delay_us`` defaults, an optional ``[nodes]`` table
    mapping a kind to a list of names (otherwise kinds come from name prefixes), optional
    ``[pods]`` mapping node name to pod number, and ``links = [[A, B], [A, B, GBPS],
    [A, B, GBPS, DELAY_US], ...]``.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError("topology", f"{name} is not valid TOML: {exc}") from None
    if "kind" in data:
        options = {k: v for k, v in data.items() if k not in ("kind", "name")}
        return build_topology(str(data["kind"]), options)
    allowed = {"name", "gbps", "delay_us", "nodes", "pods", "links"}
    for key in data:
        if key not in allowed:
            raise TopologyError(key, f"unknown key in {name}; allowed: kind (built-in) or {', '.join(sorted(allowed))}")
    gbps = _convert("gbps", data.get("gbps", DEFAULT_RATE_BPS / 1e9), float)
    delay_us = _convert("delay_us", data.get("delay_us", DEFAULT_DELAY_PS / PS_PER_US), float)
    if gbps <= 0:
        raise TopologyError("gbps", f"must be > 0, got {gbps:g}")
    if delay_us < 0:
        raise TopologyError("delay_us", f"must be >= 0, got {delay_us:g}")
    kinds: dict[str, str] = {}
    nodes = data.get("nodes", {})
    if not isinstance(nodes, dict):
        raise TopologyError("nodes", "must be a table mapping a kind to a list of names")
    for kind, names in nodes.items():
        if kind not in KINDS:
            hint = " (keys below [nodes] belong to it: put links before the [nodes] table)" if kind == "links" else ""
            raise TopologyError(f"nodes.{kind}", f"unknown kind; use one of {', '.join(KINDS)}{hint}")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TopologyError(f"nodes.{kind}", "must be a list of node names")
        for n in names:
            if n in kinds:
                raise TopologyError(f"nodes.{kind}", f"node {n} listed twice")
            kinds[n] = kind
    pods = data.get("pods", {})
    if not isinstance(pods, dict) or not all(isinstance(v, int) for v in pods.values()):
        raise TopologyError("pods", "must be a table mapping node names to pod numbers")
    raw_links = data.get("links")
    if not isinstance(raw_links, list) or not raw_links:
        raise TopologyError("links", "must be a non-empty list of [A, B, GBPS?, DELAY_US?]")
    links = []
    for i, item in enumerate(raw_links):
        field = f"links[{i}]"
        if not isinstance(item, list) or not 2 <= len(item) <= 4 or not all(isinstance(n, str) for n in item[:2]):
            raise TopologyError(field, f"must be [A, B, GBPS?, DELAY_US?], got {item!r}")
        rate = _convert(f"{field} gbps", item[2], float) if len(item) > 2 else gbps
        delay = _convert(f"{field} delay_us", item[3], float) if len(item) > 3 else delay_us
        if rate <= 0:
            raise TopologyError(f"{field} gbps", f"must be > 0, got {rate:g}")
        if delay < 0:
            raise TopologyError(f"{field} delay_us", f"must be >= 0, got {delay:g}")
        links.append((item[0], item[1], rate * 1e9, round(delay * PS_PER_US)))
    return Topology(_graph_from_links(links, kinds, pods), name=str(data.get("name", name)))
