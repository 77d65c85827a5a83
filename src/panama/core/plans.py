"""Job plans: what the controller decided for a job, and applying it to accelerators.

Contract
--------
Pure data and two pure functions. :class:`JobPlan` (with its :class:`TreePlan` and
:class:`SwitchEntry` records) is what :class:`panama.core.controller.Controller` returns
from ``admit``; drivers apply it with :func:`install` / :func:`uninstall` to objects with
the :class:`panama.core.accelerator.Accelerator` control interface (``install_tree``,
``remove_tree``, ``remove_job``). ``to_dict()`` gives the JSON of docs/plan-schema.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from panama.core.accelerator import cwnd_cap_for_slots
from panama.core.errors import FieldError

__all__ = ["ControllerError", "JobPlan", "SwitchEntry", "TreePlan", "install", "tree_cwnd_cap", "uninstall"]


class ControllerError(FieldError):
    """An invalid control request; ``field`` names the offending argument."""


@dataclass(frozen=True)
class SwitchEntry:
    """State of one tree at one PSwitch.

    Upstream forwarding: contributions of ``(job_id, tree_id)`` go to ``parent`` (None at
    the root); downstream: results go to every node of ``children`` (multicast group
    ``group``). This is exactly what ``Accelerator.install_tree`` takes.
    """

    switch: str
    job_id: int
    tree_id: int
    group: str
    children: tuple[str, ...]
    parent: str | None

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def to_dict(self, job: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if job is not None:
            d["job"] = job
        d.update(
            job_id=self.job_id,
            tree_id=self.tree_id,
            group=self.group,
            parent=self.parent,
            children=list(self.children),
        )
        return d


@dataclass(frozen=True)
class TreePlan:
    """One aggregation tree: ``edges`` are ``(child, parent)`` pairs from every worker host
    up to ``root`` (hosts first, then switches bottom-up); ``entries`` the state of every
    switch of the tree. ``cwnd_cap``: the smallest cap the tree's accelerators advertise
    once the job is installed (:func:`tree_cwnd_cap`); workers start with it, before
    their first result brings the current one."""

    tree_id: int
    group: str
    root: str
    edges: tuple[tuple[str, str], ...]
    entries: dict[str, SwitchEntry]
    cwnd_cap: int = 1

    @property
    def switches(self) -> tuple[str, ...]:
        """Switches of the tree, bottom-up (ToRs first, root last)."""
        return tuple(self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tree_id": self.tree_id,
            "group": self.group,
            "root": self.root,
            "switches": list(self.entries),
            "edges": [[c, p] for c, p in self.edges],
            "cwnd_cap": self.cwnd_cap,
        }


@dataclass(frozen=True)
class JobPlan:
    """The controller's decision for one job.

    ``admitted``: aggregate in-network on ``trees`` (else host-based allreduce and
    ``trees`` is empty); ``reason`` says why; ``warnings`` lists adjustments (e.g. fewer
    trees than requested). ``scope`` is ``rack``, ``pod`` or ``fabric`` (None if not
    admitted).
    """

    name: str
    job_id: int
    hosts: tuple[str, ...]
    size_bytes: int
    admitted: bool
    reason: str
    trees: list[TreePlan] = field(default_factory=list)
    requested_trees: int = 1
    warnings: tuple[str, ...] = ()
    scope: str | None = None

    @property
    def mode(self) -> str:
        return "in-network" if self.admitted else "host"

    @property
    def tree_ids(self) -> list[int]:
        """What every worker passes to ``WorkerTransport(tree_ids=...)``."""
        return [t.tree_id for t in self.trees]

    @property
    def cwnd_caps(self) -> list[int]:
        """What every worker passes to ``WorkerTransport(cwnd_caps=...)`` (caps as of admission)."""
        return [t.cwnd_cap for t in self.trees]

    @property
    def switches(self) -> list[str]:
        """Every switch holding state of this job (first appearance order)."""
        seen: dict[str, None] = {}
        for t in self.trees:
            for s in t.entries:
                seen.setdefault(s, None)
        return list(seen)

    def entries_at(self, switch: str) -> list[SwitchEntry]:
        return [t.entries[switch] for t in self.trees if switch in t.entries]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "job_id": self.job_id,
            "hosts": list(self.hosts),
            "size_bytes": self.size_bytes,
            "admitted": self.admitted,
            "mode": self.mode,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "scope": self.scope,
            "requested_trees": self.requested_trees,
            "trees": [t.to_dict() for t in self.trees],
        }


def tree_cwnd_cap(tree: TreePlan, tree_slots: Mapping[str, int]) -> int:
    """Smallest ``cwnd_cap`` over ``tree``'s switches, given each one's per-tree share of slots
    (the accelerators' own rule, :func:`panama.core.accelerator.cwnd_cap_for_slots`)."""
    return min(cwnd_cap_for_slots(tree_slots[sw]) for sw in tree.entries)


# ---------------------------------------------------------------------- applying plans
def install(plan: JobPlan, accelerators: Mapping[str, Any]) -> None:
    """Install every entry of ``plan`` with ``Accelerator.install_tree``.

    All or nothing: if one install fails, the trees installed so far are removed again
    and the error is re-raised. A plan that is not admitted installs nothing.
    """
    done: list[tuple[Any, SwitchEntry]] = []
    try:
        for tree in plan.trees:
            for sw, e in tree.entries.items():
                acc = accelerators.get(sw)
                if acc is None:
                    raise ControllerError("accelerators", f"no accelerator for switch {sw}")
                acc.install_tree(e.job_id, e.tree_id, e.children, e.parent)
                done.append((acc, e))
    except Exception:
        for acc, e in reversed(done):
            acc.remove_tree(e.job_id, e.tree_id)
        raise


def uninstall(plan: JobPlan, accelerators: Mapping[str, Any]) -> None:
    """Remove ``plan``'s job from every accelerator on its trees (``Accelerator.remove_job``)."""
    for sw in plan.switches:
        acc = accelerators.get(sw)
        if acc is None:
            raise ControllerError("accelerators", f"no accelerator for switch {sw}")
        acc.remove_job(plan.job_id)
