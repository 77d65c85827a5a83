"""Records of the controller service: a registered rank, a job and its lifecycle, the plan
as the service stores it, and the short history of ended jobs."""

from __future__ import annotations

import asyncio
import hmac
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from panama.core.controller import (
    JobPlan,
    SwitchEntry,
    TreePlan,
)
from panama.core.jobs import JobLifecycle
from panama.runtime.net import mcast
from panama.runtime.net.udp import Address, format_addr, free_port


@dataclass
class Rank:
    rank: int
    udp: Address
    host: str
    last_seen: float
    incarnation: str | None = None
    left: bool = False
    error: str | None = None  # why the rank left, when it left after a failure
    request: Any = None  # the waiting register request while the job is registering (provisional)
    multicast: bool = False  # it said at registration that it can join a loopback group
    calls: int | None = None  # allreduces it completed (its heartbeats and its leave say)
    call: tuple[int, int] | None = None  # (index, elements) of the allreduce it last reported under way
    last: tuple[int, int] | None = None  # (index, elements) of the last allreduce it completed

    def gone(self) -> bool:
        """A provisional registration whose client hung up (its register call is no longer waiting)."""
        if self.request is None:
            return False
        transport = self.request.transport
        return transport is None or transport.is_closing()


@dataclass
class Job:
    name: str
    world_size: int
    created: float
    ranks: dict[int, Rank] = field(default_factory=dict)
    size_bytes: int = 0
    trees: int | None = None
    payload_elems: int | None = None
    life: JobLifecycle = None  # type: ignore[assignment]
    reason: str = ""
    plan: JobPlan | None = None
    job_id: int | None = None
    key: int = 0
    payload_for_job: int | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    ended: float | None = None
    recovered: bool = False
    installed_at: float = 0.0  # monotonic time it became running (probes older than this say nothing of it)
    # Loopback multicast of results (panama.runtime.net.mcast): per leaf daemon the install's
    # {"group", "members"}; per leaf without one, why not.
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_reasons: dict[str, str] = field(default_factory=dict)
    joins: dict[str, list[str]] = field(default_factory=dict)  # per daemon, the groups it joined
    # The run that holds the name (docs/runtime.md, "Trust model"): its public id, and its
    # token, which its ranks present for everything they do in the job.
    run: str = ""
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.life is None:
            self.life = JobLifecycle(self.name)

    @property
    def state(self) -> str:
        return self.life.state.value

    def holds(self, token: str | None) -> bool:
        """Whether ``token`` is this job's (its run's credential; constant-time compare)."""
        return bool(token) and bool(self.token) and hmac.compare_digest(token.encode(), self.token.encode())

    def drop_group(self, switch: str, why: str) -> None:
        """``switch`` sends this job's results to each child by unicast from now on: its
        group is forgotten and ``why`` kept (``group_reasons``)."""
        self.groups.pop(switch, None)
        self.group_reasons[switch] = why

    def summary(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "run": self.run,
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason,
            "world_size": self.world_size,
            "registered": sorted(self.ranks),
            "left": sorted(r for r, x in self.ranks.items() if x.left),
            "failed_ranks": {str(r): x.error for r, x in sorted(self.ranks.items()) if x.error},
            "size_bytes": self.size_bytes,
            "payload_elems": self.payload_for_job,
            "hosts": {str(r): x.host for r, x in sorted(self.ranks.items())},
            "recovered": self.recovered,
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "multicast": {"groups": self.groups, "reasons": self.group_reasons, "joins": self.joins},
        }

    def to_state(self) -> dict[str, Any]:
        """What a restarted controller needs to take the running job back (state file)."""
        assert self.plan is not None
        return {
            "name": self.name,
            "run": self.run,
            "token": self.token,
            "job_id": self.job_id,
            "world_size": self.world_size,
            "key": f"{self.key:016x}",
            "payload_elems": self.payload_for_job,
            "size_bytes": self.size_bytes,
            "trees": self.trees,
            "plan": self.plan.to_dict(),
            "groups": self.groups,
            "ranks": [
                {
                    "rank": x.rank,
                    "udp": format_addr(x.udp),
                    "host": x.host,
                    "incarnation": x.incarnation,
                    "left": x.left,
                }
                for x in sorted(self.ranks.values(), key=lambda x: x.rank)
            ],
        }


def plan_from_dict(d: dict[str, Any]) -> JobPlan:
    """Rebuild a :class:`JobPlan` from its ``to_dict()`` (entries from the edges)."""
    trees = []
    for t in d["trees"]:
        edges = tuple((c, p) for c, p in t["edges"])
        entries = {}
        for sw in t["switches"]:
            children = tuple(c for c, p in edges if p == sw)
            parent = next((p for c, p in edges if c == sw), None)
            entries[sw] = SwitchEntry(sw, int(d["job_id"]), int(t["tree_id"]), t["group"], children, parent)
        trees.append(TreePlan(int(t["tree_id"]), t["group"], t["root"], edges, entries, int(t.get("cwnd_cap", 1))))
    return JobPlan(
        d["job"],
        int(d["job_id"]),
        tuple(d["hosts"]),
        int(d["size_bytes"]),
        bool(d["admitted"]),
        d["reason"],
        trees,
        int(d.get("requested_trees", len(trees))),
        tuple(d.get("warnings", ())),
        d.get("scope"),
    )


class _Recorder:
    """Stands in for an Accelerator so that core ``install``/``uninstall`` yield per-switch requests."""

    def __init__(self, name: str, to_addr: dict[str, str]):
        self.name = name
        self.to_addr = to_addr
        self.trees: list[dict[str, Any]] = []
        self.removed: list[int] = []

    def install_tree(self, job_id: int, tree_id: int, children: tuple, parent: str | None) -> None:
        self.trees.append(
            {
                "tree_id": tree_id,
                "children": [self.to_addr[c] for c in children],
                "parent": None if parent is None else self.to_addr[parent],
            }
        )

    def remove_tree(self, job_id: int, tree_id: int) -> None:  # pragma: no cover - only on a failed install
        self.trees = [t for t in self.trees if t["tree_id"] != tree_id]

    def remove_job(self, job_id: int) -> None:
        self.removed.append(job_id)


def allocate_groups(
    job: Job, recorders: dict[str, _Recorder], switch_udp: dict[str, Address], jobs: Iterable[Job], enabled: bool
) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, list[str]]]:
    """Loopback multicast groups of a job being admitted (:mod:`panama.runtime.net.mcast`).

    A daemon whose tree children (every tree of the job the same) are 2 or more of the
    job's workers gets ``{"group": "239.80.x.y:PORT", "members": [worker addresses]}``
    when ``enabled``, the daemon and every member are on 127.0.0.1 and every member said
    at registration that it can join a group. A daemon whose children are 2 or more
    switch daemons (a spine above leaves) gets one the same way, members the children's
    data addresses; daemons with the same children share one group (both spines of a
    2-tier job send to one group both leaves joined), and each member daemon is asked to
    join it (``joins``: switch name -> group texts, sent with its install; the controller
    installs members first, :func:`install_levels`, and lets a parent multicast only when
    every member joined). Addresses are ones no other job in ``jobs`` holds. Returns
    (groups by switch name, why not by switch name for the other such daemons, joins by
    switch name).
    """
    groups: dict[str, dict[str, Any]] = {}
    reasons: dict[str, str] = {}
    joins: dict[str, list[str]] = {}
    by_addr = {format_addr(x.udp): x for x in job.ranks.values()}
    by_switch = {format_addr(udp): name for name, udp in switch_udp.items()}
    addresses = _GroupAddresses(
        {g["group"].rpartition(":")[0] for o in jobs if o is not job for g in o.groups.values()}
    )
    for name, rec in recorders.items():
        kid_sets = {frozenset(t["children"]) for t in rec.trees}
        kids = {c for ks in kid_sets for c in ks}
        switch_kids = bool(kids) and all(c in by_switch for c in kids)
        if switch_kids:
            members = sorted(kids)
            local = all(switch_udp[by_switch[m]][0] == mcast.LOOPBACK for m in members)
            why = _why_no_group(
                enabled, kid_sets, members, "switch child", local and switch_udp[name][0] == mcast.LOOPBACK
            )
        else:
            workers = [by_addr.get(c) for c in kids]
            if not workers or None in workers:
                continue  # children of both kinds, or unknown ones: unicast
            members = sorted({format_addr(w.udp) for w in workers})
            local = switch_udp[name][0] == mcast.LOOPBACK and all(w.udp[0] == mcast.LOOPBACK for w in workers)
            why = _why_no_group(enabled, kid_sets, members, "worker child", local)
            if why is None and not all(w.multicast for w in workers):
                why = f"rank(s) {sorted(w.rank for w in workers if not w.multicast)} cannot join a group"
        text = None
        if why is None:
            text = addresses.take(frozenset(members) if switch_kids else None)
            if text is None:
                why = f"no free group address in {mcast.GROUP_NETWORK}"
        if text is None:
            reasons[name] = why or "no group"
            continue
        groups[name] = {"group": text, "members": members}
        if switch_kids:
            for m in members:
                texts = joins.setdefault(by_switch[m], [])
                if text not in texts:
                    texts.append(text)
    return groups, reasons, joins


def _why_no_group(enabled: bool, kid_sets: set, members: list[str], kind: str, local: bool) -> str | None:
    """Why a daemon with these children gets no group (None: it may get one)."""
    if not enabled:
        return "multicast_results is off (controller setting)"
    if len(kid_sets) != 1:
        return "the job's trees have different children there"
    if len(members) < 2:
        return f"one {kind}: nothing to save"
    if not local:
        return f"daemon and its children are not all on {mcast.LOOPBACK} (multicast is loopback-only)"
    return None


class _GroupAddresses:
    """Group addresses for one admission: none that ``used`` holds, one per shared member set."""

    def __init__(self, used: set[str]):
        self.used = used
        self.index = 0
        self.shared: dict[frozenset[str], str] = {}

    def take(self, members: frozenset[str] | None = None) -> str | None:
        """A new ``GROUP:PORT`` (or the one already given to ``members``); None when none is free."""
        if members is not None and members in self.shared:
            return self.shared[members]
        while self.index < mcast.GROUP_NETWORK.num_addresses and mcast.group_address(self.index) in self.used:
            self.index += 1
        if self.index >= mcast.GROUP_NETWORK.num_addresses:
            return None
        addr = mcast.group_address(self.index)
        self.used.add(addr)
        text = f"{addr}:{free_port(mcast.LOOPBACK, socket.SOCK_DGRAM)}"
        if members is not None:
            self.shared[members] = text
        return text


def install_levels(
    groups: dict[str, dict[str, Any]], joins: dict[str, list[str]], switches: Iterable[str]
) -> list[list[str]]:
    """``switches`` in install order, one round of installs per level: every daemon that
    joins a group before the daemons that send to it (the topological generations of
    "member before sender"; within a level, the order of ``switches``)."""
    names = list(switches)
    order = {name: k for k, name in enumerate(names)}
    graph = nx.DiGraph()
    graph.add_nodes_from(names)
    graph.add_edges_from(
        (member, sender)
        for sender, group in groups.items()
        for member, texts in joins.items()
        if group["group"] in texts and member != sender
    )
    return [sorted(level, key=order.__getitem__) for level in nx.topological_generations(graph)]


def join_failed(job: Job, name: str, joins: dict[str, list[str]], why: str) -> None:
    """Daemon ``name`` could not join its parents' groups: every group it was to join is
    dropped (its senders, installed after it, send each child a copy; ``group_reasons``
    says why) and no other member needs to join it any more."""
    texts = set(joins.pop(name, []))
    for parent, group in list(job.groups.items()):
        if group["group"] in texts:
            job.drop_group(parent, f"member {name} could not join {group['group']}: {why}")
    for joined in joins.values():
        joined[:] = [t for t in joined if t not in texts]
