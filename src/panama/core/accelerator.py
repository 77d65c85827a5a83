"""The aggregation accelerator of a PSwitch: sums float32 contributions of many jobs.

Contract
--------
Inputs (the only ones): ``install_tree`` / ``remove_tree`` / ``remove_job`` from the controller, and
``receive(packet, from_node)`` for every PANAMA packet the switch hands to it. ``from_node`` is the neighbour the
packet came from (ingress port in hardware, source address in the UDP runtime); it is how the accelerator knows
which child sent a contribution. ``receive`` returns what to emit as ``(destinations, packet)`` pairs: one packet
object per emission and the tuple of neighbours it goes to (a result: every child of the tree, the switch's
multicast group; a partial sum: ``(parent,)``; an answer to a retransmission: ``(from_node,)``). Drivers send that
one packet to each destination (:func:`per_destination` flattens the pairs) and never change it. The accelerator
keeps no time and no timers: retransmissions are the workers' job.

Slots and exactly-once
----------------------
A slot holds the running sum of one ``(job, tree, seq)``. Each slot has a bitmap of the children that contributed,
so a duplicate is never added twice. A complete slot is sent to the parent (``PARTIAL_SENT``) or, at the root,
becomes the result and is sent to every child (``RESULT``). Intermediate switches store the result when it comes
down and relay it. Every slot is retained until every child's ``ack`` (the cumulative acknowledgement carried by its
contributions and by the header-only ``FLAG_ACK`` packet a worker sends when an allreduce completes) has passed it,
i.e. until every worker below holds the result; until then a retransmitted contribution is answered from the slot
(the result, unicast; or the partial, re-sent upward). A packet whose ``seq`` is below that floor is stale and
dropped. A ``FLAG_ACK`` packet only moves acks; when it raises the floor of a tree with a parent, one ``FLAG_ACK``
carrying the new floor goes up, so idle trees hold no slot anywhere.

ECN
---
CE on contributions is ORed into the slot: a partial leaves CE, a result carries ``FLAG_ECE`` to every worker (the
tree-wide echo all workers react to alike). A result that *arrives* CE was marked on the way down, below the root:
it is relayed to every child as CE (the IP codepoint), never as ``FLAG_ECE`` (the workers of other subtrees did not
see that mark); each worker echoes a CE result in its next contribution, which folds the mark into the tree-wide
echo one round later. Answers to retransmissions leave ECT(0).

Retransmitted rounds (Karn across the tree)
-------------------------------------------
``FLAG_RETRANSMIT`` on a contribution is ORed into its slot like CE: the partial it completes goes up with
``FLAG_RETRANSMIT`` and the result comes down with it (a relaying switch keeps the flag of the result it got). A
worker takes no RTT sample from such a result (``core/transport.py``): its time includes some sender's
retransmission timeout, which a worker that lost nothing would otherwise fold into its own RTO (measured in the UDP
runtime at 5 % loss before this rule: SRTT 92 ms on one rank against 1.6 ms on another, RTO 293 ms against the 20 ms
floor, and every call waits for the slowest rank). A partial arriving with the flag for the first time from its
child is a contribution like any other; only a duplicate one asks for an answer.

Liveness (invariant)
--------------------
*The oldest outstanding packet of every sender can always be aggregated.* A contribution whose ``seq`` equals its
own ``ack`` (its sender has every result below it) may take a tree's last free slot; every other new slot must leave
that one free (``used < limit - 1``). Whenever such a packet finds no slot, every child's ack is at most its
``seq``, so at most one sequence number of a tree is ever in that position: the reserved slot always serves it once
the slots retained below it are acknowledged, which happens as their owners' acks arrive (acks are taken even from
dropped packets). Hence, whatever the share, loss, duplication or reordering, the lowest sequence number without a
result is eventually summed at every tier, the floor moves, and retransmissions make progress. Windows never need to
exceed what the share holds: a worker may send ``seq`` only below ``ack + window`` and results are retained until
acknowledged, so at most about ``2 * window`` slots of a tree are live, which is why the advertised ``cwnd_cap`` is
:func:`cwnd_cap_for_slots` of the tree's share (half of what is left after the reserved slot).

Memory shares
-------------
``packet_memory`` slots are split evenly between installed jobs (``memory // jobs``) and a job's share evenly
between its trees that cross this accelerator. A tree's *limit* (what it may allocate) follows its target share, but
never drops below what its workers may still send while they hold slots here: when a new job arrives, an active tree
keeps its limit until a result carrying the smaller ``cwnd_cap`` has gone out and the floor has passed every packet
sent under the old cap; then it shrinks as its slots free up and the newcomer grows into the freed memory. A tree
that holds no slot (an idle job between allreduces, or one not yet started) shrinks to its target at once, so a
newcomer is never starved by idle jobs; should such a tree come back with a window above the new cap, the packets
beyond its limit are dropped and retransmitted (the liveness rule keeps it moving) and its first result carries the
new cap. The sum of limits never exceeds ``packet_memory``. Contributions that would need a slot beyond the limit
are dropped (``share_exceeded``): they never touch sums or slots; only their cumulative ``ack`` (validated, from a
known child) is taken, since it can only free results every child already holds and keeps a shrinking share from
stalling.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from enum import IntEnum

import numpy as np

from panama.core.codec import DEFAULT_PAYLOAD_ELEMS
from panama.core.packet import (
    CE,
    ECT0,
    FLAG_ACK,
    FLAG_ECE,
    FLAG_RESULT,
    FLAG_RETRANSMIT,
    MAX_CWND_CAP,
    Packet,
    new_packet,
)

# Drop reasons (named constants; counters and plots group by them).
UNKNOWN_JOB = "unknown_job"
UNKNOWN_TREE = "unknown_tree"
NOT_CHILD = "not_child"
NOT_PARENT = "not_parent"
STALE = "stale"
GENERATION_MISMATCH = "generation_mismatch"
COUNT_MISMATCH = "count_mismatch"
TOO_LARGE = "too_large"
BAD_ACK = "bad_ack"
SHARE_EXCEEDED = "share_exceeded"
DUPLICATE = "duplicate"
DUPLICATE_RESULT = "duplicate_result"
UNEXPECTED_RESULT = "unexpected_result"
DROP_REASONS = (UNKNOWN_JOB, UNKNOWN_TREE, NOT_CHILD, NOT_PARENT, STALE, GENERATION_MISMATCH, COUNT_MISMATCH)
DROP_REASONS += (TOO_LARGE, BAD_ACK, SHARE_EXCEEDED, DUPLICATE, DUPLICATE_RESULT, UNEXPECTED_RESULT)
_NOTHING: tuple = ()
Emitted = Sequence[tuple[tuple, Packet]]  # (destinations, packet) pairs, see Accelerator.receive


def cwnd_cap_for_slots(slots: int) -> int:
    """The ``cwnd_cap`` a tree with a share of ``slots`` slots advertises.

    One slot stays reserved for the oldest outstanding packet (the liveness rule); a
    window of ``w`` keeps at most about ``2 * w`` slots live, so ``w <= (slots - 1) // 2``.
    At least 1 (a tree always may send its oldest packet), at most the 16-bit field.
    """
    return max(1, min(MAX_CWND_CAP, (slots - 1) // 2))


def per_destination(emitted: Emitted) -> list[tuple[Hashable, Packet]]:
    """Flatten ``receive``'s output to one ``(neighbour, packet)`` pair per copy sent."""
    return [(to, packet) for destinations, packet in emitted for to in destinations]


_add = np.add  # positional ``out``: measurably cheaper per call than the keyword


def _ring_size(packet_memory: int) -> int:
    """Entries of a tree's slot ring: a power of two from 16 to 256, enough for all of memory if it can."""
    return 1 << min(8, max(4, (packet_memory - 1).bit_length()))


class AcceleratorError(ValueError):
    """Invalid control-plane request (installing or removing job state)."""


class SlotState(IntEnum):
    FREE = 0
    AGGREGATING = 1  # waiting for contributions of some children
    PARTIAL_SENT = 2  # complete, sum sent to the parent, waiting for the result
    RESULT = 3  # holds the result; retained until every child acknowledged it


# ``_Slot.state``: the SlotState values as plain integers (C integers when compiled).
_FREE, _AGGREGATING, _PARTIAL_SENT, _RESULT = 0, 1, 2, 3


class _Slot:
    __slots__ = ("index", "row", "seq", "generation", "count", "seen", "nseen", "ce", "retx", "cap", "state")

    def __init__(self, index: int, row: np.ndarray | None):
        self.index = index
        self.row = row
        self.seq = -1
        self.generation = 0
        self.count = 0
        self.seen = 0
        self.nseen = 0
        self.ce = False
        self.retx = False  # a contribution (or the parent's result) came as a retransmission
        self.cap = MAX_CWND_CAP
        self.state = _FREE


class _Tree:
    """Per-(job, tree) state at one accelerator."""

    __slots__ = tuple(
        "job_id tree_id children child_index bits nchildren parent parent_from up ring mask spill child_ack floor"
        " at_floor used peak_used target limit cap hold_seq hold_cap cap_sent".split()
    )

    def __init__(self, job_id: int, tree_id: int, children: tuple, parent: Hashable | None, ring: int):
        self.job_id = job_id
        self.tree_id = tree_id
        self.children = children
        self.child_index = {child: i for i, child in enumerate(children)}  # child i's bit: bits[i] (1 << i)
        self.bits = tuple(1 << i for i in range(len(children)))
        self.nchildren = len(children)
        self.parent = parent
        self.up = (parent,)  # the destinations of what goes to the parent, built once
        self.parent_from: object = object()  # see _receive_result
        # Live slots by seq: slot s at ring[s & mask] (ring: a power of two), or in spill when that entry holds another
        self.ring: list[_Slot | None] = [None] * ring  # seq (a window wider than the ring; every seq stays exact)
        self.mask = ring - 1
        self.spill: dict[int, _Slot] = {}
        self.child_ack = [0] * len(children)  # by child index
        self.floor = 0
        self.at_floor = len(children)  # children whose ack equals the floor
        self.used = 0
        self.peak_used = 0
        self.target = 0
        self.limit = 0
        self.cap = 1
        # While a shrunk tree's workers may still send under the cap they knew before, its limit is
        # held: None = no hold; -1 = until a result with the new cap is emitted; seq >= 0 = until the floor passes seq.
        self.hold_seq: int | None = None
        self.hold_cap = 0
        self.cap_sent = 0  # largest cwnd_cap this tree's results carried so far


def _live(tree: _Tree) -> list[_Slot]:
    """The slots a tree holds (ring order, then spilled ones)."""
    ring = tree.ring  # locals, not `tree.ring` in the loop: see panama._ext.BAD_CYTHON
    spill = tree.spill
    return [slot for slot in ring if slot is not None] + list(spill.values())


class Accelerator:
    """Software model of a PANAMA aggregation accelerator (one per PSwitch).

    ``packet_memory``: slots of ``payload_elems`` float32 each. With ``store_payloads=False`` no memory is allocated
    and payloads are ignored (the simulator moves sizes only). ``copy_payloads=False`` lets emitted packets share
    the slot's memory; only drivers that serialise emitted packets immediately may use it. ``reserve_shares`` keeps
    that many job shares free (share = memory // (jobs + reserve)), so a job arriving while others run gets memory
    at once instead of waiting for them to shrink; 0 is the source's rule (memory // jobs).
    """

    def __init__(
        self,
        packet_memory: int,
        payload_elems: int = DEFAULT_PAYLOAD_ELEMS,
        *,
        name: Hashable = "acc",
        store_payloads: bool = True,
        copy_payloads: bool = True,
        reserve_shares: int = 0,
    ):
        if packet_memory < 1:
            raise AcceleratorError(f"packet_memory must be >= 1 slot, got {packet_memory}")
        if payload_elems < 1:
            raise AcceleratorError(f"payload_elems must be >= 1, got {payload_elems}")
        self.name = name
        self.packet_memory = packet_memory
        self.payload_elems = payload_elems
        self.store_payloads = store_payloads
        self.copy_payloads = copy_payloads
        if reserve_shares < 0:
            raise AcceleratorError(f"reserve_shares must be >= 0, got {reserve_shares}")
        self.reserve_shares = reserve_shares
        if store_payloads:
            self._memory = np.zeros((packet_memory, payload_elems), dtype=np.float32)
            rows: Sequence[np.ndarray | None] = list(self._memory)  # views made once
        else:
            self._memory = None
            rows = [None] * packet_memory
        self._free = [_Slot(i, rows[i]) for i in range(packet_memory - 1, -1, -1)]
        self._trees: dict[tuple[int, int], _Tree] = {}
        self._jobs: dict[int, dict[int, _Tree]] = {}  # job -> tree id -> tree (how receive finds it)
        self._recent: list[_Tree | None] = [None] * 256  # by low bits of (job, tree): what receive tries first
        self.used_slots = self.peak_used_slots = 0
        self.drops: Counter[str] = Counter()
        self.contributions = self.results_in = self.partials_out = self.results_out = 0
        self.retransmits_answered = self.partials_resent = self.slots_freed = 0
        self.acks_in = self.acks_out = self.acks_unmatched = 0

    # ------------------------------------------------------------------ control plane
    def install_tree(self, job_id: int, tree_id: int, children: Sequence[Hashable], parent: Hashable | None) -> None:
        """Install the state of one tree of a job: its children here and its parent (None at the root)."""
        if type(job_id) is not int or type(tree_id) is not int:  # both paths alike (C integers when compiled)
            raise AcceleratorError(f"{self.name}: job and tree ids must be integers, got {job_id!r} and {tree_id!r}")
        key = (job_id, tree_id)
        if key in self._trees:
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} is already installed")
        children = tuple(children)
        if not children:
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} needs at least one child")
        if len(set(children)) != len(children):
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} has duplicate children {children}")
        if parent is not None and parent in children:
            raise AcceleratorError(f"{self.name}: parent {parent!r} of job {job_id} tree {tree_id} is also a child")
        jobs = len(self._jobs) + (job_id not in self._jobs) + self.reserve_shares
        trees_of_job = len(self._jobs.get(job_id, ())) + 1
        most_trees = max([trees_of_job] + [len(trees) for j, trees in self._jobs.items() if j != job_id])
        if self.packet_memory // jobs < most_trees:
            raise AcceleratorError(
                f"{self.name}: no room for job {job_id} tree {tree_id}: {self.packet_memory} slots over {jobs} job "
                f"shares leave some of {most_trees} trees of one job without a slot"
            )
        tree = _Tree(job_id, tree_id, children, parent, _ring_size(self.packet_memory))
        self._trees[key] = tree
        self._jobs.setdefault(job_id, {})[tree_id] = tree
        self._rebalance()

    def remove_tree(self, job_id: int, tree_id: int) -> None:
        tree = self._trees.pop((job_id, tree_id), None)
        if tree is None:
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} is not installed")
        self._release(tree)
        trees = self._jobs[job_id]
        del trees[tree_id]
        if not trees:
            del self._jobs[job_id]
        self._rebalance()

    def remove_job(self, job_id: int) -> None:
        """Free every slot and entry of ``job_id``."""
        trees = self._jobs.pop(job_id, None)
        if trees is None:
            raise AcceleratorError(f"{self.name}: job {job_id} is not installed")
        for tree in trees.values():
            del self._trees[(job_id, tree.tree_id)]
            self._release(tree)
        self._rebalance()

    def jobs(self) -> list[int]:
        return list(self._jobs)

    def has_tree(self, job_id: int, tree_id: int) -> bool:
        return (job_id, tree_id) in self._trees

    def children_of(self, job_id: int, tree_id: int) -> tuple:
        return self._trees[(job_id, tree_id)].children

    def parent_of(self, job_id: int, tree_id: int) -> Hashable | None:
        return self._trees[(job_id, tree_id)].parent

    # ------------------------------------------------------------------ shares
    def job_share(self) -> int:
        """Nominal slots per job: ``packet_memory // (installed jobs + reserve_shares)``."""
        return self.packet_memory // max(1, len(self._jobs) + self.reserve_shares)

    def _rebalance(self) -> None:
        share = self.job_share()
        for trees in self._jobs.values():
            per_tree = share // len(trees)
            for tree in trees.values():
                tree.target = per_tree
                tree.cap = cwnd_cap_for_slots(per_tree)
                if tree.limit > per_tree and not tree.used:
                    # Holds no slot (idle, or not started): shrink now, never starving a newcomer.
                    tree.hold_seq = None
                    tree.limit = per_tree
                elif tree.limit > per_tree and tree.cap_sent > tree.cap:
                    # Shrinking below a cap the workers were told: they keep their old
                    # window until a result with the new cap reaches them; hold the limit.
                    earlier = tree.hold_cap if tree.hold_seq is not None else 0
                    tree.hold_seq = -1
                    tree.hold_cap = max(earlier, tree.cap_sent)
                    tree.cap_sent = tree.cap
                elif tree.limit > per_tree and tree.hold_seq is None:
                    tree.limit = max(per_tree, tree.used)
        self._grow()

    def _grow(self) -> None:
        spare = self.packet_memory - sum(t.limit for t in self._trees.values())
        for tree in self._trees.values():
            if spare <= 0:
                break
            if tree.limit < tree.target:
                extra = min(spare, tree.target - tree.limit)
                tree.limit += extra
                spare -= extra

    def _release(self, tree: _Tree) -> None:
        self._recent[(tree.job_id & 31) << 3 | tree.tree_id & 7] = None
        for slot in _live(tree):
            self._free_slot(tree, slot)
        tree.used = tree.limit = 0

    def _free_slot(self, tree: _Tree, slot: _Slot) -> None:
        at = slot.seq & tree.mask
        if tree.ring[at] is slot:
            tree.ring[at] = None
        else:
            del tree.spill[slot.seq]
        slot.state = _FREE
        slot.seq = -1
        self._free.append(slot)
        self.used_slots -= 1
        self.slots_freed += 1

    # ------------------------------------------------------------------ data plane
    def receive(self, packet: Packet, from_node: Hashable) -> Emitted:
        """Process one PANAMA packet from neighbour ``from_node``; return what to emit (see the module docstring)."""
        job_id, tree_id = packet.job_id, packet.tree_id
        tree = self._recent[(job_id & 31) << 3 | tree_id & 7]
        if tree is None or tree.job_id != job_id or tree.tree_id != tree_id:
            trees = self._jobs.get(job_id)  # two lookups by integer: no key tuple to build and hash
            tree = trees.get(tree_id) if trees is not None else None
            if tree is None:
                if packet.flags & FLAG_ACK:
                    self.acks_unmatched += 1  # a job's last closing acks raced its removal: nothing lost or to free
                else:
                    self.drops[UNKNOWN_JOB if trees is None else UNKNOWN_TREE] += 1
                return _NOTHING
            self._recent[(job_id & 31) << 3 | tree_id & 7] = tree
        flags = packet.flags
        if flags & FLAG_RESULT:
            return self._receive_result(tree, packet, from_node)
        child = tree.child_index.get(from_node, -1)
        if child < 0:
            self.drops[NOT_CHILD] += 1
            return _NOTHING
        if flags & FLAG_ACK:
            return self._receive_ack(tree, packet, child)
        count = packet.count
        if count > self.payload_elems:
            self.drops[TOO_LARGE] += 1
            return _NOTHING
        seq = packet.seq
        if packet.ack > seq:
            self.drops[BAD_ACK] += 1
            return _NOTHING
        slot = tree.ring[seq & tree.mask]
        if slot is None or slot.seq != seq:
            slot = tree.spill.get(seq) if tree.spill else None
        if slot is None:
            slot = self._open_slot(tree, packet, child)
            if slot is None:
                return _NOTHING
        else:
            if slot.generation != packet.generation:
                self.drops[GENERATION_MISMATCH] += 1
                return _NOTHING
            if slot.count != count:
                self.drops[COUNT_MISMATCH] += 1
                return _NOTHING
            bit = tree.bits[child]
            if slot.seen & bit:
                return self._duplicate(tree, slot, packet, from_node, child)
            slot.seen |= bit
            slot.nseen += 1
            if packet.ecn == CE:
                slot.ce = True
            if flags & FLAG_RETRANSMIT:
                slot.retx = True
            if packet.cwnd_cap < slot.cap:
                slot.cap = packet.cwnd_cap
            payload = packet.payload
            row = slot.row
            if payload is not None and row is not None:
                if count == self.payload_elems:
                    _add(row, payload, row)
                else:
                    part = row[:count]
                    _add(part, payload, part)
        self.contributions += 1
        ack = packet.ack  # _take_ack, inlined: this runs for every contribution
        acks = tree.child_ack
        old_ack = acks[child]
        if ack > old_ack:
            acks[child] = ack
            if old_ack == tree.floor:
                tree.at_floor -= 1
                if not tree.at_floor:
                    self._advance_floor(tree)
        return self._complete(tree, slot) if slot.nseen == tree.nchildren else _NOTHING

    def _open_slot(self, tree: _Tree, packet: Packet, child: int) -> _Slot | None:
        """A validated first contribution to ``seq``: the slot now holding it, or None (dropped: stale, or no room)."""
        seq = packet.seq
        if seq < tree.floor:
            self.drops[STALE] += 1
            return None
        # The liveness rule: the last free slot is kept for a sender's oldest packet.
        room = tree.limit if seq == packet.ack else tree.limit - 1
        if tree.used >= room:
            # Take the (validated) cumulative ack first: it only frees results every child already
            # holds, and without it a shrinking share could stall until retransmission timeouts.
            self._take_ack(tree, child, packet.ack)
            if tree.used >= room:
                self.drops[SHARE_EXCEEDED] += 1
                return None
        slot = self._free.pop()
        slot.seq = seq
        slot.generation = packet.generation
        count = slot.count = packet.count
        slot.seen = tree.bits[child]
        slot.nseen = 1
        slot.ce = packet.ecn == CE
        slot.retx = bool(packet.flags & FLAG_RETRANSMIT)
        cap = packet.cwnd_cap
        slot.cap = cap if cap < tree.cap else tree.cap
        slot.state = _AGGREGATING
        ring = tree.ring
        at = seq & tree.mask
        if ring[at] is None:
            ring[at] = slot
        else:
            tree.spill[seq] = slot
        tree.used += 1
        if tree.used > tree.peak_used:
            tree.peak_used = tree.used
        self.used_slots += 1
        if self.used_slots > self.peak_used_slots:
            self.peak_used_slots = self.used_slots
        payload = packet.payload
        row = slot.row
        if payload is not None and row is not None:
            if count == self.payload_elems:
                np.copyto(row, payload)
            else:
                row[:count] = payload
        return slot

    def _complete(self, tree: _Tree, slot: _Slot) -> Emitted:
        payload = self._payload_out(slot) if slot.row is not None else None  # no call when sizes only (simulator)
        if tree.parent is None:
            slot.state = _RESULT
            self.results_out += 1
            return self._results_to(tree, slot, payload, tree.children, ECT0)
        slot.state = _PARTIAL_SENT
        self.partials_out += 1
        return ((tree.up, self._partial(tree, slot, payload, FLAG_RETRANSMIT if slot.retx else 0)),)

    def _payload_out(self, slot: _Slot) -> np.ndarray | None:
        row = slot.row
        if row is None:
            return None
        view = row if slot.count == self.payload_elems else row[: slot.count]
        return view.copy() if self.copy_payloads else view

    def _partial(self, tree: _Tree, slot: _Slot, payload: np.ndarray | None, flags: int) -> Packet:
        ecn = CE if slot.ce else ECT0
        return new_packet(
            tree.job_id, tree.tree_id, slot.seq, slot.generation, slot.count, flags, slot.cap, tree.floor, ecn, payload
        )

    def _results_to(self, tree: _Tree, slot: _Slot, payload: np.ndarray | None, children: tuple, ecn: int) -> Emitted:
        flags = FLAG_RESULT | FLAG_ECE if slot.ce else FLAG_RESULT
        if slot.retx:
            flags |= FLAG_RETRANSMIT  # Karn across the tree: not an RTT sample for any worker
        cap = slot.cap if slot.cap < tree.cap else tree.cap
        if cap > tree.cap_sent:
            tree.cap_sent = cap
        if tree.hold_seq is not None and tree.hold_seq < 0:  # i.e. -1; None (no hold) is the common case
            # First result carrying the new cap: packets a worker sent before seeing it
            # reach at most hold_cap sequence numbers further.
            tree.hold_seq = slot.seq + tree.hold_cap
        packet = new_packet(
            tree.job_id, tree.tree_id, slot.seq, slot.generation, slot.count, flags, cap, 0, ecn, payload
        )
        return ((children, packet),)

    def _duplicate(self, tree: _Tree, slot: _Slot, packet: Packet, from_node: Hashable, child: int):
        if not packet.flags & FLAG_RETRANSMIT or slot.state == _AGGREGATING:
            self.drops[DUPLICATE] += 1
            return _NOTHING
        self._take_ack(tree, child, packet.ack)
        if slot.state == _RESULT:
            self.retransmits_answered += 1
            return self._results_to(tree, slot, self._payload_out(slot), (from_node,), ECT0)
        self.partials_resent += 1
        return ((tree.up, self._partial(tree, slot, self._payload_out(slot), FLAG_RETRANSMIT)),)

    def _receive_result(self, tree: _Tree, packet: Packet, from_node: Hashable):
        if from_node is not tree.parent_from:  # the object last found equal to the parent: no comparison
            if tree.parent is None or from_node != tree.parent:
                self.drops[NOT_PARENT] += 1
                return _NOTHING
            tree.parent_from = from_node
        slot = tree.ring[packet.seq & tree.mask]
        if slot is None or slot.seq != packet.seq:
            slot = tree.spill.get(packet.seq) if tree.spill else None
        if slot is None:
            self.drops[STALE if packet.seq < tree.floor else UNEXPECTED_RESULT] += 1
            return _NOTHING
        if slot.generation != packet.generation:
            self.drops[GENERATION_MISMATCH] += 1
            return _NOTHING
        if slot.count != packet.count:
            self.drops[COUNT_MISMATCH] += 1
            return _NOTHING
        if slot.state == _RESULT:
            self.drops[DUPLICATE_RESULT] += 1
            return _NOTHING
        if slot.state != _PARTIAL_SENT:
            self.drops[UNEXPECTED_RESULT] += 1
            return _NOTHING
        self.results_in += 1
        slot.state = _RESULT
        slot.ce = bool(packet.flags & FLAG_ECE)
        slot.retx = bool(packet.flags & FLAG_RETRANSMIT)
        slot.cap = packet.cwnd_cap
        payload = packet.payload
        if payload is not None and slot.row is not None:
            slot.row[: slot.count] = payload
        self.results_out += 1
        # A mark picked up on the way down reaches every worker below (see ECN above).
        return self._results_to(tree, slot, payload, tree.children, CE if packet.ecn == CE else ECT0)

    def _receive_ack(self, tree: _Tree, packet: Packet, child: int) -> Emitted:
        """A header-only ``FLAG_ACK``: take the child's ack; pass a raised floor up."""
        ack = packet.ack
        if packet.count or ack != packet.seq:
            self.drops[BAD_ACK] += 1
            return _NOTHING
        self.acks_in += 1
        floor = tree.floor
        self._take_ack(tree, child, ack)
        if tree.floor == floor or tree.parent is None:
            return _NOTHING
        self.acks_out += 1
        up = Packet(tree.job_id, tree.tree_id, tree.floor, packet.generation, 0, FLAG_ACK, tree.cap, tree.floor, ECT0)
        return ((tree.up, up),)

    def _take_ack(self, tree: _Tree, child: int, ack: int) -> None:
        old = tree.child_ack[child]
        if ack > old:
            tree.child_ack[child] = ack
            if old == tree.floor:
                tree.at_floor -= 1
                if not tree.at_floor:
                    self._advance_floor(tree)

    def _advance_floor(self, tree: _Tree) -> None:
        """Every child's ack passed the floor: raise it and free the slots below it."""
        # The lowest ack and how many children hold it, in one loop (faster than a list's min and count, both paths).
        new_floor = at = 0
        child_ack = tree.child_ack  # a local: see _release
        for a in child_ack:
            if not at or a < new_floor:
                new_floor, at = a, 1
            elif a == new_floor:
                at += 1
        tree.at_floor = at
        old_floor = tree.floor
        tree.floor = new_floor
        freed = 0
        if new_floor - old_floor <= tree.used:
            ring = tree.ring
            spill = tree.spill
            mask = tree.mask
            free = self._free
            for s in range(old_floor, new_floor):  # one lookup per seq, no list
                slot = ring[s & mask]
                if slot is not None and slot.seq == s:
                    ring[s & mask] = None
                elif spill:
                    slot = spill.pop(s, None)
                else:
                    slot = None
                if slot is not None:
                    slot.state = _FREE
                    slot.seq = -1
                    free.append(slot)
                    freed += 1
            self.used_slots -= freed
            self.slots_freed += freed
        elif tree.used:  # the floor jumped past more seqs than there are slots (rare)
            for slot in [slot for slot in _live(tree) if slot.seq < new_floor]:
                self._free_slot(tree, slot)
                freed += 1
        if not freed:
            return
        tree.used -= freed
        if tree.limit > tree.target:
            hold = tree.hold_seq
            if tree.used and hold is not None and (hold < 0 or new_floor <= hold):
                return
            tree.hold_seq = None
            tree.limit = max(tree.target, tree.used)
            self._grow()

    # ------------------------------------------------------------------ reporting
    def occupancy(self) -> dict[int, int]:
        """Slots in use per job."""
        return {job: sum(t.used for t in trees.values()) for job, trees in self._jobs.items()}

    def tree_status(self, job_id: int, tree_id: int) -> dict:
        t = self._trees[(job_id, tree_id)]
        return dict(used=t.used, peak_used=t.peak_used, target=t.target, limit=t.limit, cwnd_cap=t.cap, floor=t.floor)

    def stats(self) -> dict:
        """Counters and occupancy as plain data (for reports, logs and metrics)."""
        return {
            "name": str(self.name),
            "packet_memory": self.packet_memory,
            "used_slots": self.used_slots,
            "peak_used_slots": self.peak_used_slots,
            "jobs": len(self._jobs),
            "contributions": self.contributions,
            "results_in": self.results_in,
            "partials_out": self.partials_out,
            "results_out": self.results_out,
            "retransmits_answered": self.retransmits_answered,
            "partials_resent": self.partials_resent,
            "slots_freed": self.slots_freed,
            "acks_in": self.acks_in,
            "acks_out": self.acks_out,
            "acks_unmatched": self.acks_unmatched,
            "drops": dict(self.drops),
            "occupancy": self.occupancy(),
        }

    def check_invariants(self) -> None:
        """Raise AssertionError if memory accounting is inconsistent (used by tests and debug runs)."""
        used = sum(t.used for t in self._trees.values())
        assert used == self.used_slots, (used, self.used_slots)
        assert used + len(self._free) == self.packet_memory, (used, len(self._free), self.packet_memory)
        limits = sum(t.limit for t in self._trees.values())
        assert limits <= self.packet_memory, (limits, self.packet_memory)
        for t in self._trees.values():
            assert t.used <= t.limit, (t.job_id, t.tree_id, t.used, t.limit)
            assert len(_live(t)) == t.used, (t.job_id, t.tree_id, t.used)
