"""``panama topology show`` and ``panama controller plan``.

A topology is named everywhere by a spec string (``fat-tree:k=4``,
``leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,host_gbps=10,fabric_gbps=40``) or the
path of a TOML / edge-list file; see docs/controller.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import click

from panama.cli.common import usage_error
from panama.core.controller import (
    DEFAULT_GROUP_POOL,
    DEFAULT_MAX_JOBS_PER_SWITCH,
    DEFAULT_PACKET_MEMORY,
    DEFAULT_THRESHOLD_BYTES,
    Controller,
    ControllerError,
    JobPlan,
)
from panama.core.topology import Topology, TopologyError
from panama.tables import format_table
from panama.topology_file import load_topology as read_topology

DEFAULT_JOB_SIZE_MB = 100.0
BYTES_PER_MB = 1_000_000

_CONTROLLER_FIELDS = {
    "threshold_bytes": "--threshold-mb",
    "max_jobs_per_switch": "--max-jobs-per-switch",
    "packet_memory": "--packet-memory",
    "group_pool": "--group-pool",
}


def load_topology(spec: str, option: str = "--topology") -> Topology:
    """Parse a topology spec or file for the CLI; errors name the option and the field."""
    try:
        return read_topology(spec)
    except TopologyError as exc:
        raise usage_error(option, str(exc)) from None


def parse_hosts(text: str, field: str) -> list[str]:
    """``h0,h1,h4..h7`` -> ``[h0, h1, h4, h5, h6, h7]`` (a range keeps the prefix, counts the number)."""
    hosts: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise usage_error(field, f"empty host name in {text!r}")
        if ".." in item:
            lo, _, hi = item.partition("..")
            m_lo, m_hi = re.fullmatch(r"(.*?)(\d+)", lo), re.fullmatch(r"(.*?)(\d+)", hi)
            if not m_lo or not m_hi or m_lo.group(1) != m_hi.group(1) or int(m_lo.group(2)) > int(m_hi.group(2)):
                raise usage_error(field, f"bad host range {item!r} (use e.g. h0..h7)")
            prefix = m_lo.group(1)
            hosts.extend(f"{prefix}{i}" for i in range(int(m_lo.group(2)), int(m_hi.group(2)) + 1))
        else:
            hosts.append(item)
    return hosts


def parse_job(text: str) -> tuple[str, list[str], int]:
    """``NAME:HOSTS[:SIZE_MB]`` -> (name, hosts, size_bytes); SIZE_MB defaults to 100 (1 MB = 10^6 B)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].strip():
        raise usage_error("--job", f"expected NAME:HOST,HOST,...[:SIZE_MB], got {text!r}")
    name = parts[0].strip()
    hosts = parse_hosts(parts[1], f"--job {name}")
    size_mb = DEFAULT_JOB_SIZE_MB
    if len(parts) == 3:
        try:
            size_mb = float(parts[2])
        except ValueError:
            raise usage_error(f"--job {name}", f"SIZE_MB must be a number, got {parts[2]!r}") from None
        if not size_mb >= 0 or size_mb == float("inf"):
            raise usage_error(f"--job {name}", f"SIZE_MB must be a finite number >= 0, got {parts[2]!r}")
    return name, hosts, round(size_mb * BYTES_PER_MB)


# ---------------------------------------------------------------------- formatting
def _gbps(rate_bps: float) -> str:
    return f"{rate_bps / 1e9:g} Gbps"


def _table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    return format_table(rows, header, align="l" * len(header))


def format_topology(topo: Topology) -> str:
    s = topo.summary()
    c = s["counts"]
    rows = [
        ("topology", topo.name),
        ("hosts", c["hosts"]),
        ("tor switches", c["tor"]),
        ("agg switches", c["agg"]),
        ("core switches", c["core"]),
        ("spine switches", c["spine"]),
        ("links", c["links"]),
        ("link rates", ", ".join(_gbps(r) for r in s["link_rates_bps"])),
        ("link delays", ", ".join(f"{d / 1e6:g} µs" for d in s["link_delays_ps"])),
        ("bisection bandwidth", _gbps(s["bisection_bandwidth_bps"])),
        ("oversubscription", f"{s['oversubscription']:g}:1"),
    ]
    return _table(rows, ("property", "value"))


def format_plan(ctl: Controller, plans: Sequence[JobPlan]) -> str:
    out = []
    job_rows = [
        (p.name, p.job_id, len(p.hosts), f"{p.size_bytes / BYTES_PER_MB:g}", p.mode, len(p.trees), p.scope or "-")
        for p in plans
    ]
    out.append(_table(job_rows, ("job", "id", "workers", "size_MB", "mode", "trees", "scope")))
    for p in plans:
        out.append("")
        out.append(f"job {p.name} (id {p.job_id}): {p.reason}")
        for w in p.warnings:
            out.append(f"  warning: {w}")
        for t in p.trees:
            out.append(f"  tree {t.tree_id}: group {t.group}, root {t.root}, switches {', '.join(t.switches)}")
            out.append("    edges: " + ", ".join(f"{c}->{q}" for c, q in t.edges))
    rows = []
    names = {p.job_id: p.name for p in ctl.plans.values()}
    for sw in ctl.to_dict()["switches"]:
        for e in sw["entries"]:
            rows.append(
                (
                    sw["name"],
                    sw["tier"],
                    names.get(e["job_id"], e["job_id"]),
                    e["tree_id"],
                    e["group"],
                    e["parent"] or "(root)",
                    ",".join(e["children"]),
                    sw["share_slots"],
                )
            )
    if rows:
        out.append("")
        out.append("forwarding entries (upstream: parent, downstream: children; share = nominal slots per job)")
        out.append(_table(rows, ("switch", "tier", "job", "tree", "group", "parent", "children", "share")))
    loads = ctl.root_loads()
    if loads:
        out.append("")
        out.append("trees per root: " + ", ".join(f"{s}={n}" for s, n in loads.items()))
    return "\n".join(out)


def draw(topo: Topology, path: str, plans: Sequence[JobPlan] = (), title: str | None = None) -> None:
    """Draw ``topo`` (layered) with every tree of ``plans`` coloured, into a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = topo.layout()
    width = max(x for x, _ in pos.values()) + 1
    fig_w = min(40.0, max(8.0, width * 0.35))
    fig, ax = plt.subplots(figsize=(fig_w, max(6.5, fig_w / 4)))
    for a, b, _, _ in topo.links():
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.plot([xa, xb], [ya, yb], color="0.85", lw=0.6, zorder=1)
    colours = plt.get_cmap("tab10")
    trees = [(p, t) for p in plans for t in p.trees]
    for i, (p, t) in enumerate(trees):
        colour = colours(i % 10)
        lw = 1.5 + 2.5 * (len(trees) - i) / max(1, len(trees))  # earlier trees wider: overlaps stay visible
        for c, q in t.edges:
            (xa, ya), (xb, yb) = pos[c], pos[q]
            ax.plot([xa, xb], [ya, yb], color=colour, lw=lw, alpha=0.8, zorder=2 + i / 100)
        ax.plot([], [], color=colour, lw=3, label=f"{p.name} tree {t.tree_id} ({t.group}, root {t.root})")
    style = {"host": ("o", "0.4", 12), "tor": ("s", "tab:blue", 40), "agg": ("s", "tab:green", 40)}
    style.update({"core": ("D", "tab:red", 45), "spine": ("D", "tab:red", 45)})
    show_labels = len(pos) <= 120
    for kind in ("host", "tor", "agg", "core", "spine"):
        nodes = [n for n in pos if topo.tier(n) == kind]
        if not nodes:
            continue
        marker, colour, size = style[kind]
        ax.scatter([pos[n][0] for n in nodes], [pos[n][1] for n in nodes], marker=marker, c=colour, s=size, zorder=5)
        if show_labels:
            for n in nodes:
                x, y = pos[n]
                ax.annotate(
                    n,
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, -11 if kind == "host" else 7),
                    ha="center",
                    fontsize=6,
                    zorder=6,
                )
    ax.set_title(title or topo.name, fontsize=9)
    ax.set_axis_off()
    if trees:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _check_png(path: str | None, option: str = "--png") -> None:
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise usage_error(option, f"directory {parent} does not exist")
    if not path.lower().endswith(".png"):
        raise usage_error(option, f"must name a .png file, got {path!r}")


# ---------------------------------------------------------------------- commands
@click.group()
def topology() -> None:
    """Inspect data-centre topologies (fat-tree, leaf-spine, or from a file)."""


@topology.command("show")
@click.argument("spec", metavar="SPEC")
@click.option(
    "--json", "as_json", is_flag=True, help="Print hosts, switches and links as JSON (docs/topology-schema.json)."
)
@click.option("--png", type=str, default=None, metavar="FILE", help="Also draw the topology into this PNG file.")
def show(spec: str, as_json: bool, png: str | None) -> None:
    """Summarise topology SPEC: hosts, switches per tier, links, bisection bandwidth.

    SPEC is e.g. fat-tree:k=4, leaf-spine:leaves=4,spines=2,hosts_per_leaf=4 or a
    .toml / edge-list file path (docs/controller.md).
    """
    _check_png(png)
    topo = load_topology(spec, "SPEC")
    if as_json:
        click.echo(json.dumps(topo.to_dict(), indent=2))
    else:
        click.echo(format_topology(topo))
    if png:
        draw(topo, png)
        if not as_json:
            click.echo(f"wrote {png}")


@click.command("plan")
@click.option(
    "--topology",
    "topology_spec",
    required=True,
    metavar="SPEC",
    help="Topology spec (fat-tree:k=4, leaf-spine:leaves=4,spines=2,hosts_per_leaf=4) or file.",
)
@click.option(
    "--job",
    "jobs",
    multiple=True,
    required=True,
    metavar="NAME:HOSTS[:SIZE_MB]",
    help="A job: name, comma-separated hosts (ranges like h0..h7 allowed), gradient size in MB "
    f"(10^6 bytes, default {DEFAULT_JOB_SIZE_MB:g}). Repeat to plan several jobs in order.",
)
@click.option(
    "--trees", type=int, default=1, show_default=True, help="Aggregation trees per job (clamped to the usable roots)."
)
@click.option(
    "--threshold-mb",
    type=float,
    default=DEFAULT_THRESHOLD_BYTES / BYTES_PER_MB,
    show_default=True,
    help="Smallest gradient size aggregated in-network.",
)
@click.option(
    "--max-jobs-per-switch",
    type=int,
    default=DEFAULT_MAX_JOBS_PER_SWITCH,
    show_default=True,
    help="Jobs one accelerator may serve at once.",
)
@click.option(
    "--packet-memory",
    type=int,
    default=DEFAULT_PACKET_MEMORY,
    show_default=True,
    help="Accelerator memory in packet slots (shared evenly by its jobs).",
)
@click.option(
    "--group-pool", default=DEFAULT_GROUP_POOL, show_default=True, help="IPv4 multicast pool for tree groups."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as JSON (docs/plan-schema.json) instead of tables."
)
@click.option("--out", "out_path", type=str, default=None, metavar="FILE", help="Also write the JSON plan to FILE.")
@click.option("--png", type=str, default=None, metavar="FILE", help="Draw the topology with the trees coloured.")
def controller_plan(
    topology_spec: str,
    jobs: tuple[str, ...],
    trees: int,
    threshold_mb: float,
    max_jobs_per_switch: int,
    packet_memory: int,
    group_pool: str,
    as_json: bool,
    out_path: str | None,
    png: str | None,
) -> None:
    """Plan aggregation trees for one or more jobs and print the decisions and switch entries.

    Example: panama controller plan --topology fat-tree:k=4 --job a:h0,h5,h9:100 --trees 2
    """
    if trees < 1:
        raise usage_error("--trees", f"must be >= 1, got {trees}")
    if not threshold_mb >= 0 or threshold_mb == float("inf"):
        raise usage_error("--threshold-mb", f"must be a finite number >= 0, got {threshold_mb}")
    _check_png(png)
    if out_path is not None and not Path(out_path).resolve().parent.is_dir():
        raise usage_error("--out", f"directory of {out_path} does not exist")
    topo = load_topology(topology_spec)
    parsed = [parse_job(j) for j in jobs]
    try:
        ctl = Controller(
            topo,
            threshold_bytes=round(threshold_mb * BYTES_PER_MB),
            max_jobs_per_switch=max_jobs_per_switch,
            packet_memory=packet_memory,
            group_pool=group_pool,
        )
    except ControllerError as exc:
        raise usage_error(_CONTROLLER_FIELDS.get(exc.field, exc.field), exc.detail) from None
    plans = []
    for name, hosts, size_bytes in parsed:
        try:
            plans.append(ctl.admit(name, hosts, size_bytes, trees))
        except ControllerError as exc:
            field = "--trees" if exc.field == "num_trees" else f"--job {name}"
            raise usage_error(field, exc.detail) from None
    doc = ctl.to_dict(plans)
    if out_path:
        Path(out_path).write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(format_plan(ctl, plans))
    if png:
        draw(topo, png, plans, title=f"{topo.name}: " + ", ".join(p.name for p in plans))
    if not as_json:
        for path in filter(None, (out_path, png)):
            click.echo(f"wrote {path}")
