"""The PANAMA controller's logic: admission, aggregation trees, multicast groups, switch state.

Contract
--------
Pure (no I/O, no clock, no randomness): :class:`Controller` takes ``admit`` and
``release`` calls and keeps the network's control state; drivers (simulator, runtime
controller service) apply the resulting :class:`~panama.core.plans.JobPlan` to
accelerators with :func:`~panama.core.plans.install` / :func:`~panama.core.plans.uninstall`
(the plan records live in :mod:`panama.core.plans`; they are importable from here too).

Rules (details and rationale in docs/controller.md):

- Admission. A job aggregates in-network iff it has workers on at least two distinct
  hosts, one worker per host, ``size_bytes >= threshold_bytes``, and every accelerator
  on its trees has room: fewer than ``max_jobs_per_switch`` jobs, and after the job
  joins, the nominal share ``packet_memory // (jobs + reserve_shares)`` still gives
  every tree of every job crossing that switch at least :data:`MIN_SLOTS_PER_TREE`
  slots (``reserve_shares``: the shares the accelerators keep free, 0 by default). Otherwise the
  plan says ``admitted=False`` with the reason, and the job uses host-based allreduce.
  Unknown hosts, bad arguments, duplicate names and releasing unknown jobs raise
  :class:`ControllerError` naming the field.
- Trees. Every tree spans exactly the ToRs of the job's workers, each worker host under
  its own ToR. The roots are the lowest switches above all those ToRs: the ToR itself
  (one rack: a single tree, ``num_trees`` is clamped to 1), the pod's aggregation
  switches (one fat-tree pod), core switches (several pods) or spines (leaf-spine).
  ``num_trees`` larger than the number of usable roots is *clamped* with a warning in
  the plan, never an error.
- Root choice. Roots are picked one at a time, least-loaded first (live trees rooted at
  the switch), then avoiding uplinks already used by the job's earlier trees, then the
  root with the most equally loaded rivals on its uplinks, then name order. With
  jobs of equal tree count spread over a set of roots, root loads differ by at most one.
- Groups. Each tree gets an IPv4 multicast address from ``group_pool`` (round robin
  over the pool, so a released address is reused as late as possible), never one held
  by a live tree. Job ids are 32-bit, start at 1, and are not reused while live.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from panama.core.plans import ControllerError, JobPlan, SwitchEntry, TreePlan, install, tree_cwnd_cap, uninstall
from panama.core.topology import AGG, Topology

DEFAULT_THRESHOLD_BYTES = 40_000_000
DEFAULT_MAX_JOBS_PER_SWITCH = 8
DEFAULT_PACKET_MEMORY = 4096  # slots of one packet each
DEFAULT_GROUP_POOL = "239.1.0.0/16"
MIN_SLOTS_PER_TREE = 2  # a window of one packet, retained twice (see core/accelerator.py)
MAX_JOB_ID = 0xFFFFFFFF  # 32-bit job_id field
MAX_TREES = 0x10000  # 16-bit tree_id field

SCOPE_RACK = "rack"
SCOPE_POD = "pod"
SCOPE_FABRIC = "fabric"


@dataclass
class _Candidate:
    root: str
    parent: dict[str, str]  # switch -> parent switch (ToRs and intermediate switches)
    switches: tuple[str, ...]  # bottom-up, root last
    uplinks: frozenset[tuple[str, str]]  # switch-to-switch (child, parent) edges


class Controller:
    """Admission, tree construction and control state of one network (see module docstring)."""

    def __init__(
        self,
        topology: Topology,
        *,
        threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
        max_jobs_per_switch: int = DEFAULT_MAX_JOBS_PER_SWITCH,
        packet_memory: int = DEFAULT_PACKET_MEMORY,
        group_pool: str = DEFAULT_GROUP_POOL,
        reserve_shares: int = 0,
    ):
        if not isinstance(topology, Topology):
            raise ControllerError("topology", f"must be a Topology, got {type(topology).__name__}")
        _require_int("threshold_bytes", threshold_bytes, 0)
        _require_int("max_jobs_per_switch", max_jobs_per_switch, 1)
        _require_int("packet_memory", packet_memory, MIN_SLOTS_PER_TREE)
        _require_int("reserve_shares", reserve_shares, 0)
        try:
            pool = ipaddress.IPv4Network(group_pool, strict=True)
        except (ValueError, TypeError) as exc:
            raise ControllerError("group_pool", f"not an IPv4 network: {exc}") from None
        if not pool.is_multicast:
            raise ControllerError("group_pool", f"{pool} is not inside the multicast range 224.0.0.0/4")
        self.topology = topology
        self.threshold_bytes = threshold_bytes
        self.max_jobs_per_switch = max_jobs_per_switch
        self.packet_memory = packet_memory
        self.reserve_shares = reserve_shares  # kept free for arriving jobs: a share is memory // (jobs + reserve)
        self.group_pool = str(pool)
        self._pool_base = int(pool.network_address)
        self._pool_size = pool.num_addresses
        self._pool_cursor = 0
        self._groups: dict[str, tuple[str, int]] = {}  # group -> (job name, tree id)
        self._plans: dict[str, JobPlan] = {}
        self._next_job_id = 1
        self._job_ids: set[int] = set()
        self._state: dict[str, dict[int, dict[int, SwitchEntry]]] = {}  # switch -> {job_id: {tree_id: entry}}
        # Changes of _state (admit, release, restore); tree_caps's answers by name, each of one version.
        self._version, self._caps = 0, {}
        self._root_load: dict[str, int] = {}
        self._ancestors: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ queries
    @property
    def plans(self) -> dict[str, JobPlan]:
        """Live jobs by name (admitted or not), in admission order (a copy)."""
        return dict(self._plans)

    def switch_entries(self, switch: str) -> list[SwitchEntry]:
        """Every tree entry installed at ``switch`` (by job id, then tree id)."""
        self._check_switch(switch)
        jobs = self._state.get(switch, {})
        return [jobs[j][t] for j in sorted(jobs) for t in sorted(jobs[j])]

    def forwarding_table(self, switch: str) -> dict[str, dict[tuple[int, int], Any]]:
        """``{"upstream": {(job, tree): parent}, "downstream": {(job, tree): children}}``."""
        entries = self.switch_entries(switch)
        return {
            "upstream": {(e.job_id, e.tree_id): e.parent for e in entries},
            "downstream": {(e.job_id, e.tree_id): e.children for e in entries},
        }

    def jobs_at(self, switch: str) -> list[int]:
        """Job ids with state at ``switch``."""
        self._check_switch(switch)
        return sorted(self._state.get(switch, {}))

    def share_slots(self, switch: str) -> int:
        """Nominal per-job share at ``switch``: ``packet_memory // (jobs + reserve_shares)``.

        With no job and no reserve that is all the memory. The accelerator itself only
        lets a job's limit fall to this as its slots free up.
        """
        self._check_switch(switch)
        return self.packet_memory // max(1, len(self._state.get(switch, ())) + self.reserve_shares)

    def job_shares(self, switch: str) -> dict[int, int]:
        """``{job_id: nominal slots}`` at ``switch``."""
        share = self.share_slots(switch)
        return {j: share for j in self.jobs_at(switch)}

    def root_load(self, switch: str) -> int:
        """Live trees rooted at ``switch``."""
        self._check_switch(switch)
        return self._root_load.get(switch, 0)

    def root_loads(self) -> dict[str, int]:
        """Live trees rooted at each switch that roots at least one."""
        return {s: n for s, n in sorted(self._root_load.items(), key=lambda kv: self.topology.rank(kv[0])) if n}

    def groups(self) -> dict[str, tuple[str, int]]:
        """Live multicast groups -> (job name, tree id)."""
        return dict(self._groups)

    def is_empty(self) -> bool:
        """True when no job, entry, group, id or root load is held."""
        return not (
            self._plans or self._groups or self._job_ids or any(self._state.values()) or any(self._root_load.values())
        )

    # ------------------------------------------------------------------ admission
    def admit(self, name: str, hosts: Sequence[str], size_bytes: int, num_trees: int = 1) -> JobPlan:
        """Decide how job ``name`` (workers on ``hosts``, one entry per worker) reduces
        ``size_bytes`` per iteration, reserve its trees, groups and switch state, and
        return the plan. The job stays live (admitted or not) until :meth:`release`."""
        if not isinstance(name, str) or not name.strip():
            raise ControllerError("name", f"must be a non-empty string, got {name!r}")
        if name in self._plans:
            raise ControllerError("name", f"job {name!r} already exists (release it first)")
        if isinstance(hosts, str) or not isinstance(hosts, Iterable):
            raise ControllerError("hosts", f"must be a sequence of host names, got {hosts!r}")
        hosts = tuple(hosts)
        if not hosts:
            raise ControllerError("hosts", f"job {name!r} has no workers")
        topo = self.topology
        for h in hosts:
            if not isinstance(h, str) or h not in topo:
                raise ControllerError(
                    "hosts", f"unknown host {h!r} in topology {topo.name} (hosts are {_host_range(topo)})"
                )
            if not topo.is_host(h):
                raise ControllerError("hosts", f"{h!r} is a {topo.tier(h)} switch, not a host")
        if isinstance(size_bytes, float) and size_bytes.is_integer():
            size_bytes = int(size_bytes)
        _require_int("size_bytes", size_bytes, 0, error=ControllerError)
        _require_int("num_trees", num_trees, 1, error=ControllerError)
        if num_trees > MAX_TREES:
            raise ControllerError("num_trees", f"must be <= {MAX_TREES} (16-bit tree id), got {num_trees}")
        job_id = self._allocate_job_id()
        plan = self._decide(name, job_id, hosts, size_bytes, num_trees)
        self._plans[name] = plan
        self._job_ids.add(job_id)
        for tree in plan.trees:
            self._groups[tree.group] = (name, tree.tree_id)
            self._root_load[tree.root] = self._root_load.get(tree.root, 0) + 1
            for sw, entry in tree.entries.items():
                self._state.setdefault(sw, {}).setdefault(job_id, {})[tree.tree_id] = entry
        self._version += 1
        return plan

    def release(self, name: str) -> JobPlan:
        """Forget job ``name``: free its entries, groups, shares, root load and id; return its plan."""
        plan = self._plans.pop(name, None)
        if plan is None:
            raise ControllerError("name", f"unknown job {name!r}")
        self._job_ids.discard(plan.job_id)
        for tree in plan.trees:
            del self._groups[tree.group]
            self._root_load[tree.root] -= 1
            if not self._root_load[tree.root]:
                del self._root_load[tree.root]
            for sw in tree.entries:
                jobs = self._state[sw]
                trees = jobs[plan.job_id]
                del trees[tree.tree_id]
                if not trees:
                    del jobs[plan.job_id]
                if not jobs:
                    del self._state[sw]
        self._version += 1
        self._caps.pop(name, None)
        return plan

    def restore(self, plan: JobPlan) -> None:
        """Hold ``plan`` again as admitted by an earlier controller of the same topology
        (a restarted controller service recovering running jobs): same job id, groups,
        trees and entries. Raises :class:`ControllerError` if any of them is taken or
        names something outside the topology; nothing is changed then."""
        if plan.name in self._plans:
            raise ControllerError("name", f"job {plan.name!r} already exists")
        if plan.job_id in self._job_ids or not 1 <= plan.job_id <= MAX_JOB_ID:
            raise ControllerError("job_id", f"job id {plan.job_id} of {plan.name!r} is in use or out of range")
        for tree in plan.trees:
            if tree.group in self._groups:
                raise ControllerError("group", f"group {tree.group} of {plan.name!r} is in use")
            for sw in tree.entries:
                self._check_switch(sw)
        for h in plan.hosts:
            if h not in self.topology or not self.topology.is_host(h):
                raise ControllerError("hosts", f"unknown host {h!r} in topology {self.topology.name}")
        self._plans[plan.name] = plan
        self._job_ids.add(plan.job_id)
        for tree in plan.trees:
            self._groups[tree.group] = (plan.name, tree.tree_id)
            self._root_load[tree.root] = self._root_load.get(tree.root, 0) + 1
            for sw, entry in tree.entries.items():
                self._state.setdefault(sw, {}).setdefault(plan.job_id, {})[tree.tree_id] = entry
        self._version += 1
        if self._next_job_id <= plan.job_id:
            self._next_job_id = plan.job_id % MAX_JOB_ID + 1

    def _decide(self, name: str, job_id: int, hosts: tuple[str, ...], size_bytes: int, num_trees: int) -> JobPlan:
        """The plan of one job, in four named steps: whether it may aggregate in the network
        at all (:meth:`_host_based_reason`), which roots its ToRs allow and how many trees
        (:meth:`_roots`), the clamps by ToR share and multicast pool (:meth:`_clamp_trees`),
        and the trees themselves with their caps (:meth:`_build_trees`). Any step may
        answer host-based allreduce, with its reason."""

        def host_based(reason: str) -> JobPlan:
            return JobPlan(name, job_id, hosts, size_bytes, False, f"host-based allreduce: {reason}", [], num_trees, ())

        distinct = sorted(set(hosts), key=self.topology.rank)
        reason = self._host_based_reason(hosts, distinct, size_bytes)
        if reason:
            return host_based(reason)
        tors = sorted({self.topology.tor_of(h) for h in distinct}, key=self.topology.rank)
        warnings: list[str] = []
        roots = self._roots(tors, num_trees, warnings)
        if isinstance(roots, str):
            return host_based(roots)
        scope, candidates, want, tor_trees = roots
        want = self._clamp_trees(tors, want, tor_trees, warnings)
        if isinstance(want, str):
            return host_based(want)
        trees = self._build_trees(name, job_id, candidates, want, tors, distinct, warnings)
        roots_text = ", ".join(t.root for t in trees)
        reason = (
            f"in-network: size {size_bytes} B >= threshold_bytes {self.threshold_bytes} B; "
            f"{len(trees)} tree{'s' if len(trees) != 1 else ''} at {scope} scope rooted at {roots_text}"
        )
        return JobPlan(name, job_id, hosts, size_bytes, True, reason, trees, num_trees, tuple(warnings), scope)

    def _host_based_reason(self, hosts: tuple[str, ...], distinct: list[str], size_bytes: int) -> str | None:
        """Why the job's allreduce stays on the hosts whatever the network holds (one
        worker, one host, a host given twice, below the size threshold), or None."""
        if len(hosts) == 1:
            return "a single worker has nothing to aggregate"
        if len(distinct) == 1:
            return f"all {len(hosts)} workers are on host {distinct[0]} (reduce locally)"
        if len(distinct) != len(hosts):
            dup = next(h for h in distinct if hosts.count(h) > 1)
            return (
                f"host {dup} runs {hosts.count(dup)} workers; in-network aggregation takes one worker per host "
                "(reduce locally first, then give each host once)"
            )
        if size_bytes < self.threshold_bytes:
            return f"size {size_bytes} B is below threshold_bytes {self.threshold_bytes} B"
        return None

    def _roots(self, tors: list[str], num_trees: int, warnings: list[str]) -> tuple | str:
        """The usable roots above the job's ToRs: ``(scope, candidates, trees wanted, trees
        the ToRs' shares hold)``, or why there are none (str). Every tree crosses every
        ToR of the job, so the ToRs are checked first; then each candidate's other
        switches. Clamps are explained in ``warnings``."""
        topo = self.topology
        tor_trees = num_trees
        for t in tors:
            problem = self._no_room(t, 1)
            if problem:
                return problem
            tor_trees = min(tor_trees, self._max_new_trees(t))
        if len(tors) == 1:
            if num_trees > 1:
                warnings.append(
                    f"num_trees clamped from {num_trees} to 1: all workers are under {tors[0]}, "
                    "which aggregates alone (no uplink to balance)"
                )
            return SCOPE_RACK, [_Candidate(tors[0], {}, (tors[0],), frozenset())], 1, tor_trees
        candidates = self._candidates(tors)
        if not candidates:
            return f"no switch lies above all of the job's ToRs ({', '.join(tors)})"
        scope = SCOPE_POD if topo.tier(candidates[0].root) == AGG else SCOPE_FABRIC
        usable = []
        blocked = []
        tor_set = set(tors)
        problems: dict[str, str | None] = {}
        for c in candidates:
            problem = None
            for s in c.switches:
                if s not in tor_set:
                    if s not in problems:
                        problems[s] = self._no_room(s, 1)
                    problem = problems[s]
                    if problem:
                        break
            (blocked if problem else usable).append((c, problem))
        if not usable:
            return f"no usable root: {blocked[0][1]}"
        candidates = [c for c, _ in usable]
        want = num_trees
        if want > len(candidates):
            what = f"{len(candidates)} usable roots" if blocked else f"{len(candidates)} distinct roots"
            warnings.append(f"num_trees clamped from {num_trees} to {len(candidates)}: the job's ToRs have {what}")
            want = len(candidates)
        if blocked:
            warnings.append(f"{len(blocked)} roots skipped for lack of accelerator room, e.g. {blocked[0][1]}")
        return scope, candidates, want, tor_trees

    def _clamp_trees(self, tors: list[str], want: int, tor_trees: int, warnings: list[str]) -> int | str:
        """``want`` trees clamped to what the ToRs' shares hold and to the free multicast
        addresses (each clamp explained in ``warnings``), or why none is left (str)."""
        if want > tor_trees:
            tor = min(tors, key=self._max_new_trees)
            warnings.append(
                f"num_trees clamped from {want} to {tor_trees}: the job's share of {self._share_after_join(tor)} "
                f"slots at {tor} holds at most {tor_trees} trees of {MIN_SLOTS_PER_TREE} slots"
            )
            want = tor_trees
        free_groups = self._pool_size - len(self._groups)
        if free_groups == 0:
            return f"multicast pool {self.group_pool} is exhausted"
        if want > free_groups:
            warnings.append(f"num_trees clamped from {want} to {free_groups}: free addresses left in {self.group_pool}")
            want = free_groups
        return want

    def _build_trees(
        self,
        name: str,
        job_id: int,
        candidates: list,
        want: int,
        tors: list[str],
        distinct: list[str],
        warnings: list[str],
    ) -> list:
        """Up to ``want`` trees on the chosen roots, each with a multicast group (reserved
        while the trees are built, handed out by ``admit``) and the ``cwnd_cap`` its
        switches' shares allow once the job joins (a switch crossed by several of the job's
        trees splits its share between them)."""
        chosen = self._choose_roots(candidates, want, tors)
        if len(chosen) < want:
            warnings.append(f"only {len(chosen)} trees fit: intermediate switches lack room for more")
        trees = []
        for tree_id, cand in enumerate(chosen):
            group = self._allocate_group()
            self._groups[group] = (name, tree_id)  # reserved now; re-set by admit()
            trees.append(self._tree_plan(job_id, tree_id, group, cand, distinct))
        for t in trees:
            del self._groups[t.group]
        crossing: dict[str, int] = {}
        for t in trees:
            for sw in t.entries:
                crossing[sw] = crossing.get(sw, 0) + 1
        return [
            replace(t, cwnd_cap=tree_cwnd_cap(t, {sw: self._share_after_join(sw) // crossing[sw] for sw in t.entries}))
            for t in trees
        ]

    # ------------------------------------------------------------------ capacity
    def tree_caps(self, name: str) -> list[int]:
        """Current ``cwnd_cap`` of each tree of live job ``name`` (shares as of now, after
        later admissions); a worker that joins late starts with these instead of the plan's."""
        plan = self._plans.get(name)
        if plan is None:
            raise ControllerError("name", f"unknown job {name!r}")
        cached = self._caps.get(name)  # one computation per job and state (each worker asks)
        if cached and cached[0] == self._version:
            return list(cached[1])
        state = self._state  # share(sw) // the job's trees at sw, unchecked: a live plan's switches hold it
        share: dict[str, int] = {}
        for t in plan.trees:
            for sw in t.entries:
                if sw not in share:
                    at = state[sw]
                    share[sw] = self.packet_memory // max(1, len(at) + self.reserve_shares) // len(at[plan.job_id])
        caps = [tree_cwnd_cap(t, {sw: share[sw] for sw in t.entries}) for t in plan.trees]
        self._caps[name] = (self._version, caps)
        return list(caps)

    def _share_after_join(self, switch: str) -> int:
        return self.packet_memory // (len(self._state.get(switch, {})) + 1 + self.reserve_shares)

    def _max_new_trees(self, switch: str) -> int:
        return self._share_after_join(switch) // MIN_SLOTS_PER_TREE

    def _no_room(self, switch: str, new_trees: int) -> str | None:
        """Why a new job with ``new_trees`` trees at ``switch`` does not fit (None if it does)."""
        jobs = self._state.get(switch, {})
        if len(jobs) >= self.max_jobs_per_switch:
            return f"{switch} already serves {len(jobs)} jobs (max_jobs_per_switch={self.max_jobs_per_switch})"
        share = self._share_after_join(switch)
        need = max([new_trees] + [len(t) for t in jobs.values()]) * MIN_SLOTS_PER_TREE
        if share < need:
            return (
                f"{switch} would give each job {share} slots (packet_memory={self.packet_memory}), "
                f"below the {need} its trees need"
            )
        return None

    # ------------------------------------------------------------------ trees
    def _ancestors_of(self, tor: str) -> frozenset[str]:
        anc = self._ancestors.get(tor)
        if anc is None:
            topo = self.topology
            seen: set[str] = set()
            frontier = [tor]
            while frontier:
                nxt = []
                for n in frontier:
                    for u in topo.up(n):
                        if u not in seen:
                            seen.add(u)
                            nxt.append(u)
                frontier = nxt
            anc = self._ancestors[tor] = frozenset(seen)
        return anc

    def _candidates(self, tors: list[str]) -> list[_Candidate]:
        """Lowest switches above every ToR in ``tors`` (rank order), each with its (pruned BFS) tree."""
        topo = self.topology
        common = set(self._ancestors_of(tors[0]))
        for t in tors[1:]:
            common &= self._ancestors_of(t)
        if not common:
            return []
        low = min(topo.level(s) for s in common)
        roots = sorted((s for s in common if topo.level(s) == low), key=topo.rank)
        tor_set = set(tors)  # the only ToRs among the relevant nodes (ancestors lie higher)
        relevant = tor_set.union(*(self._ancestors_of(t) for t in tors))
        below: dict[str, list[str]] = {}  # relevant nodes one level down: the same for every root
        out = []
        for root in roots:
            parent: dict[str, str] = {}
            frontier = [root]
            seen = {root}
            while frontier:
                nxt = []
                for n in frontier:
                    if n not in below:
                        below[n] = [d for d in topo.down(n) if d in relevant]
                    for d in below[n]:
                        if d not in seen:
                            seen.add(d)
                            parent[d] = n
                            if d not in tor_set:
                                nxt.append(d)
                frontier = nxt
            inner: dict[str, None] = {}  # switches between the ToRs and the root
            uplinks = {(t, parent[t]) for t in tors}
            for t in tors:
                p = parent[t]
                while p != root and p not in inner:  # above a recorded switch, the path is recorded
                    inner[p] = None
                    uplinks.add((p, parent[p]))
                    p = parent[p]
            switches = (*tors, *sorted(inner, key=topo.rank), root)  # ToRs rank lowest
            out.append(_Candidate(root, {s: parent[s] for s in switches[:-1]}, switches, frozenset(uplinks)))
        return out

    def _choose_roots(self, candidates: list[_Candidate], want: int, tors: list[str]) -> list[_Candidate]:
        """Greedy root choice: least root load, fewest uplinks shared with the job's earlier
        trees, most equally loaded rivals sharing its uplinks (drain crowded groups first, so
        later jobs still find disjoint roots among the least loaded), then name order."""
        if len(candidates) == 1 or want <= 0:
            return candidates[:want]
        by_edge: dict[tuple[str, str], list[int]] = {}
        for i, c in enumerate(candidates):
            for e in c.uplinks:
                by_edge.setdefault(e, []).append(i)
        load = [self._root_load.get(c.root, 0) for c in candidates]
        # Equally loaded rivals of each candidate on its uplinks (loads hold while choosing).
        rivals = [
            {j for j in set().union(*map(by_edge.get, c.uplinks)) if load[j] == load[i]}
            for i, c in enumerate(candidates)
        ]
        for i, s in enumerate(rivals):
            s.discard(i)
        order = [self.topology.rank(c.root) for c in candidates]
        tor_set = set(tors)
        room: dict[str, int] = {}  # most trees of this job each intermediate switch can take

        def fits(s: str, n: int) -> bool:
            if s not in room:
                room[s] = next((m for m in range(want, 0, -1) if not self._no_room(s, m)), 0)
            return n <= room[s]

        chosen: list[int] = []
        used_edges: set[tuple[str, str]] = set()
        through: dict[str, int] = {}  # trees of this job through each intermediate switch
        full: set[str] = set()  # intermediate switches without room for one more of them
        left = set(range(len(candidates)))
        while len(chosen) < want and left:
            best = None
            best_key = None
            for i in left:
                c = candidates[i]
                if full and not full.isdisjoint(c.switches):
                    continue
                key = (load[i], len(c.uplinks & used_edges), -len(rivals[i] & left), order[i])
                if best_key is None or key < best_key:
                    best, best_key = i, key
            if best is None:
                break
            chosen.append(best)
            left.discard(best)
            used_edges |= candidates[best].uplinks
            for s in candidates[best].switches:
                if s not in tor_set:
                    through[s] = through.get(s, 0) + 1
                    if not fits(s, through[s] + 1):
                        full.add(s)
        return [candidates[i] for i in chosen]

    def _tree_plan(self, job_id: int, tree_id: int, group: str, cand: _Candidate, hosts: list[str]) -> TreePlan:
        topo = self.topology
        children: dict[str, list[str]] = {s: [] for s in cand.switches}
        edges: list[tuple[str, str]] = []
        for h in hosts:
            t = topo.tor_of(h)
            children[t].append(h)
            edges.append((h, t))
        for s in cand.switches[:-1]:
            p = cand.parent[s]
            children[p].append(s)
            edges.append((s, p))
        # Children are in rank order already: a ToR's hosts (given in rank order), any other
        # switch's children switches (cand.switches is in rank order); ToRs have no switch child.
        entries = {
            s: SwitchEntry(s, job_id, tree_id, group, tuple(children[s]), cand.parent.get(s)) for s in cand.switches
        }
        return TreePlan(tree_id, group, cand.root, tuple(edges), entries)

    # ------------------------------------------------------------------ ids and groups
    def _allocate_job_id(self) -> int:
        if len(self._job_ids) >= MAX_JOB_ID:  # pragma: no cover - 4 billion live jobs
            raise ControllerError("name", "no free job id")
        jid = self._next_job_id
        while jid in self._job_ids:
            jid = jid % MAX_JOB_ID + 1
        self._next_job_id = jid % MAX_JOB_ID + 1
        return jid

    def _allocate_group(self) -> str:
        """Next free address after the last one handed out (callers checked one is free)."""
        for _ in range(self._pool_size):
            i = self._pool_cursor
            self._pool_cursor = (i + 1) % self._pool_size
            group = str(ipaddress.IPv4Address(self._pool_base + i))
            if group not in self._groups:
                return group
        raise AssertionError("multicast pool exhausted")  # pragma: no cover - checked in _decide

    # ------------------------------------------------------------------ checks and reports
    def _check_switch(self, switch: str) -> None:
        if not self.topology.is_switch(switch):
            raise ControllerError("switch", f"unknown switch {switch!r} in topology {self.topology.name}")

    def check_invariants(self) -> None:
        """Raise AssertionError if the control state is inconsistent (tests, debug runs)."""
        groups: dict[str, tuple[str, int]] = {}
        loads: dict[str, int] = {}
        state: dict[str, dict[int, dict[int, SwitchEntry]]] = {}
        ids = set()
        for name, plan in self._plans.items():
            assert plan.job_id not in ids, f"job id {plan.job_id} used twice"
            ids.add(plan.job_id)
            assert plan.admitted or not plan.trees, name
            roots = [t.root for t in plan.trees]
            assert len(set(roots)) == len(roots) or plan.scope == SCOPE_RACK, (name, roots)
            for t in plan.trees:
                assert t.group not in groups, f"group {t.group} used twice"
                groups[t.group] = (name, t.tree_id)
                loads[t.root] = loads.get(t.root, 0) + 1
                for sw, e in t.entries.items():
                    state.setdefault(sw, {}).setdefault(plan.job_id, {})[t.tree_id] = e
        assert ids == self._job_ids, (ids, self._job_ids)
        assert groups == self._groups, "group table out of sync"
        assert loads == {s: n for s, n in self._root_load.items() if n}, "root loads out of sync"
        assert state == {s: j for s, j in self._state.items() if j}, "switch state out of sync"
        for sw, jobs in state.items():
            assert len(jobs) <= self.max_jobs_per_switch, (sw, len(jobs))
            share = self.packet_memory // (len(jobs) + self.reserve_shares)
            for trees in jobs.values():
                assert len(trees) * MIN_SLOTS_PER_TREE <= share, (sw, len(trees), share)

    def switch_report(self, switch: str, names: Mapping[int, str] | None = None) -> dict[str, Any]:
        """Plain-data state of one switch: jobs, nominal share, and every tree entry."""
        names = names if names is not None else {p.job_id: n for n, p in self._plans.items()}
        jobs = self.jobs_at(switch)
        return {
            "name": switch,
            "tier": self.topology.tier(switch),
            "jobs": jobs,
            "share_slots": self.share_slots(switch),
            "entries": [e.to_dict(names.get(e.job_id)) for e in self.switch_entries(switch)],
        }

    def to_dict(self, plans: Iterable[JobPlan] | None = None) -> dict[str, Any]:
        """The JSON document of ``panama controller plan --json`` (schema: docs/plan-schema.json).

        ``plans`` defaults to every live job; ``switches`` lists every switch holding state.
        """
        plans = list(self._plans.values()) if plans is None else list(plans)
        names = {p.job_id: n for n, p in self._plans.items()}
        busy = sorted(self._state, key=self.topology.rank)
        return {
            "schema_version": 1,
            "topology": self.topology.name,
            "controller": {
                "threshold_bytes": self.threshold_bytes,
                "max_jobs_per_switch": self.max_jobs_per_switch,
                "packet_memory": self.packet_memory,
                "group_pool": self.group_pool,
            },
            "jobs": [p.to_dict() for p in plans],
            "switches": [self.switch_report(s, names) for s in busy if self._state[s]],
            "root_load": self.root_loads(),
        }


# ---------------------------------------------------------------------- helpers
def _require_int(field: str, value: Any, low: int, *, error: type = ControllerError) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(field, f"must be an integer, got {value!r}")
    if value < low:
        raise error(field, f"must be >= {low}, got {value}")


def _host_range(topo: Topology) -> str:
    hosts = topo.hosts
    return hosts[0] if len(hosts) == 1 else f"{hosts[0]}..{hosts[-1]}"


__all__ = [
    "Controller",
    "ControllerError",
    "JobPlan",
    "SwitchEntry",
    "TreePlan",
    "install",
    "uninstall",
    "DEFAULT_GROUP_POOL",
    "DEFAULT_MAX_JOBS_PER_SWITCH",
    "DEFAULT_PACKET_MEMORY",
    "DEFAULT_THRESHOLD_BYTES",
    "MIN_SLOTS_PER_TREE",
]
