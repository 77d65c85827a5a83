"""Worker-side PANAMA transport for one worker (rank) of one job.

Contract
--------
Driven by exactly three inputs, each with an explicit ``now`` (integer picoseconds):
``start(now, data)`` from the application (one allreduce = one *generation*),
``receive(packet, now)`` for every result packet, and ``handle_timer(now)`` when the
deadline from ``timer()`` has passed. Outputs are pulled: ``poll(now)`` returns the
packets to send now (call it after every input, also after the last result: it then
returns the closing acks), ``done``/``result()`` the summed vector. It never touches
sockets, clocks or global randomness.

Protocol
--------
The vector is cut into packets of ``payload_elems`` floats; packet ``i`` goes to tree
``i mod T`` (round robin, the same on every worker, so no coordination is needed) with
the tree's next sequence number. Per tree a worker may send ``seq`` only while
``seq < ack + window``, ``ack`` being its lowest sequence number without a result; the
window comes from the tree's congestion controller and never exceeds the latest
``cwnd_cap``: before the first result, the cap the controller's plan gave for the tree
(``cwnd_caps``); then the one every result carries. ``path_windows`` (one per tree, from
:func:`panama.core.paths.path_windows`) are handed to the congestion controllers
(``dctcp-path`` starts there and never drops below it; the others ignore them). A result is the implicit ACK of the
packet with the same ``seq``. When the last result of an allreduce arrives, the worker
sends one header-only ``FLAG_ACK`` per tree (``seq == ack ==`` its new cumulative ack)
so the accelerators free the results they retained for it instead of holding them
until the next allreduce (a lost one only delays that until the next allreduce). A
timed-out packet is retransmitted with ``FLAG_RETRANSMIT``. Timers follow RFC 6298: the
RTO comes from the RTT samples of packets never resent (Karn), within ``min_rto_ps`` and
``max_rto_ps``; the back-off of section 5.5 is kept *per packet*: a packet resent ``r``
times is due again ``RTO * 2^r`` after it left. A packet of a tree completes only when
every worker's contribution arrived, so one worker's packet may wait on another's
retransmission; a connection-wide back-off would then slow every fresh packet, and
retries counted at the measured RTO would run out while it waits. After
``max_retries`` resends of one packet the transport raises ``TransportError`` naming
what was missing.

Fast retransmit: results are per-packet and cumulative at once, so a gap is visible.
When ``dupthresh`` results of a tree arrive above its lowest sequence number without
a result, that packet is resent at once (RFC 5681 section 3.2), and while that recovery
lasts, each result that moves the cumulative ack but leaves a gap resends the new lowest
one too (RFC 6582's partial acknowledgement). Fewer results above a gap (reordering)
resend nothing. The default is 1 (:data:`DUPTHRESH`): a tree's results return in
sequence order on its fixed path, so a result above a gap means a loss (or a peer's
loss: the slot below waits for another worker's retransmission, and resending our own
contribution costs one duplicate the accelerator drops). Measured in the UDP runtime
(``bench/bench_runtime_loss.py --min-rto-ms 20``, 5 % loss at every daemon): median
call 7.3-7.8x the lossless one with 1, 8.7x with 2, 12-15x with 3, because the last
packets of a call rarely have three results above them. Pass 3 where a fabric reorders.
Tail-loss probes (RFC 8985 section 7), only with ``min_pto_ps`` (None, the default: off;
the simulator keeps its scenario values): the last packets of an allreduce have no later
results to reveal a loss, so without probes they wait for the RTO. With them, when no
result arrives for ``PTO = max(2 * SRTT, min_pto_ps)`` while packets are outstanding, the
lowest outstanding packet of every tree that has one is resent once (``FLAG_RETRANSMIT``,
counted in ``probes``) without a back-off, a retry or a congestion response; the next
result arms the probe again. A probe of a packet that was not lost costs one duplicate
the accelerators drop or answer from their retained slots.
Windows are left alone: in PANAMA's lossless fabric a loss is not a congestion signal
(ECN and ``cwnd_cap`` are), and a loss seen by one worker only must not break the tree's
lock-step. Retransmissions are answered from the accelerators' retained slots, so the
protocol stays exactly-once.

ECN: contributions leave as ECT(0). A result whose *IP* codepoint is CE was marked on
the way down (the accelerators relay such a mark to every worker below them); the
worker echoes it by sending its next contribution on that tree as CE, so the
accelerators fold it into the tree-wide mark.
Congestion control reacts only to ``FLAG_ECE`` (the tree-wide OR), which every worker
of the tree sees identically, so their windows stay in lock-step.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence

import numpy as np

from panama.core.cc import CongestionControl, make_cc
from panama.core.codec import DEFAULT_PAYLOAD_ELEMS, HEADER_BYTES, MAX_PAYLOAD_ELEMS
from panama.core.packet import (
    CE,
    ECT0,
    FLAG_ACK,
    FLAG_ECE,
    FLAG_RESULT,
    FLAG_RETRANSMIT,
    MAX_CWND_CAP,
    MAX_U32,
    Packet,
    new_packet,
)
from panama.core.units import ms, s

# C constants when compiled (transport.pxd).
_CE = CE
_ECT0 = ECT0
_FLAG_ACK = FLAG_ACK
_FLAG_ECE = FLAG_ECE
_FLAG_RESULT = FLAG_RESULT
_FLAG_RETRANSMIT = FLAG_RETRANSMIT
_MAX_CWND_CAP = MAX_CWND_CAP

# Reasons a received packet is ignored (counted in ``ignored``).
IGNORED_NOT_RESULT = "not_result"
IGNORED_WRONG_JOB = "wrong_job"
IGNORED_UNKNOWN_TREE = "unknown_tree"
IGNORED_OLD_GENERATION = "old_generation"
IGNORED_OUT_OF_RANGE = "out_of_range"
IGNORED_DUPLICATE = "duplicate"
IGNORED_BAD_COUNT = "bad_count"
IGNORED_IDLE = "idle"


# Results of a tree above its lowest missing one before that one is resent at once
# (RFC 5681 section 3.2's duplicate ACKs). Results of a tree come back in sequence order
# on its fixed path (every accelerator completes a tree's slots in the order its FIFO
# links deliver them), so one result above a gap already means a loss; fabrics that
# reorder a tree's packets should pass ``dupthresh=3`` (RFC 5681's value for arbitrary paths).
DUPTHRESH = 1


def same_vector(a: np.ndarray, b: np.ndarray) -> bool:
    """True when the 1-D vectors ``a`` and ``b`` are the same memory, element for element."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.shape == b.shape
        and a.strides == b.strides
    )


class TransportError(RuntimeError):
    """The transport cannot finish the current allreduce (retries exhausted, bad use)."""


# The counters of ``WorkerTransport.stats`` (besides ``ignored``, by reason).
_STATS_COUNTERS = ("packets_sent", "bytes_sent", "retransmissions", "timeouts", "results", "fast_retransmits")
_STATS_COUNTERS += ("probes", "acks_sent", "ece_results", "ce_results")


def _tree_id_list(tree_ids: Sequence[int] | int) -> list[int]:
    """A worker's tree ids: ``tree_ids`` itself, or ``range(tree_ids)`` for a count;
    distinct and non-empty (``ValueError`` otherwise)."""
    if isinstance(tree_ids, int):
        if tree_ids < 1:
            raise ValueError(f"need at least one tree, got {tree_ids}")
        tree_ids = range(tree_ids)
    ids = list(tree_ids)
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"tree ids must be distinct and non-empty, got {ids}")
    return ids


def _tree_controllers(
    cc: str,
    cc_options: dict | None,
    num_trees: int,
    cwnd_caps: Sequence[int] | None,
    path_windows: Sequence[int] | None,
) -> list[CongestionControl]:
    """One congestion controller ``cc`` per tree, limited to the plan's ``cwnd_caps`` and
    ``path_windows`` when given (one per tree, each in ``[1, MAX_CWND_CAP]``)."""
    ctls = [make_cc(cc, **(cc_options or {})) for _ in range(num_trees)]
    if cwnd_caps is not None:
        # The plan's caps: the first window already fits the accelerators' shares.
        for ctl, cap in zip(ctls, _per_tree(cwnd_caps, num_trees, "cwnd_caps", "cap")):
            ctl.limit_to_cap(cap)
    if path_windows is not None:
        # The plan's path windows (panama.core.paths): start and floor of ``dctcp-path``.
        for ctl, w in zip(ctls, _per_tree(path_windows, num_trees, "path_windows", "window")):
            ctl.limit_to_path(w)
    return ctls


def _per_tree(values: Sequence[int], num_trees: int, name: str, what: str) -> list[int]:
    """``values`` as a list, one per tree, each in ``[1, MAX_CWND_CAP]`` (ValueError naming ``name``)."""
    found = list(values)
    if len(found) != num_trees or any(not 1 <= v <= MAX_CWND_CAP for v in found):
        raise ValueError(f"{name} must give one {what} in [1, {MAX_CWND_CAP}] per tree, got {found}")
    return found


def _integer_ps(name: str, value: int) -> int:
    """``value`` as an ``int`` (any integer type): the RTO and its bounds are integer
    picoseconds on both paths, since the compiled transport keeps the RTO in a C integer."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer number of ps, got {value!r}") from None


class _Tree:
    """One worker's state of one tree: a packet's tree is looked up once, and the fields are
    C integers when compiled (transport.pxd). Sequence numbers are the tree's own (``seq``)."""

    __slots__ = ("cc", "base", "gen_start", "gen_len", "next_k", "echo", "dups", "recover", "high")

    def __init__(self, ctl: CongestionControl):
        self.cc = ctl
        self.base = 0  # lowest seq without a result
        self.gen_start = 0  # seq of the generation's first packet
        self.gen_len = 0  # packets of the generation on this tree
        self.next_k = 0  # index (in the generation) of the next new packet
        self.echo = False  # a CE result arrived: the next contribution leaves as CE
        self.dups = 0  # results above the lowest missing one
        self.recover = -1  # fast recovery lasts until the ack passes this seq
        self.high = -1  # highest seq with a result


class WorkerTransport:
    """One worker of one job: packetisation, tree round robin, windows, timers, reassembly."""

    def __init__(
        self,
        job_id: int,
        rank: int,
        tree_ids: Sequence[int] | int = 1,
        *,
        payload_elems: int = DEFAULT_PAYLOAD_ELEMS,
        cwnd_caps: Sequence[int] | None = None,
        path_windows: Sequence[int] | None = None,
        cc: str = "dctcp-or",
        cc_options: dict | None = None,
        initial_rto_ps: int = ms(10),
        min_rto_ps: int = ms(1),
        max_rto_ps: int = s(1),
        max_retries: int = 30,
        dupthresh: int = DUPTHRESH,
        min_pto_ps: int | None = None,
        trace_windows: bool = False,
    ):
        self.tree_ids = _tree_id_list(tree_ids)
        if not 1 <= payload_elems <= MAX_PAYLOAD_ELEMS:
            raise ValueError(f"payload_elems must be in [1, {MAX_PAYLOAD_ELEMS}], got {payload_elems}")
        min_rto_ps, max_rto_ps = _integer_ps("min_rto_ps", min_rto_ps), _integer_ps("max_rto_ps", max_rto_ps)
        if not 0 < min_rto_ps <= max_rto_ps:
            raise ValueError("need 0 < min_rto_ps <= max_rto_ps")
        self.job_id = job_id
        self.rank = rank
        self.payload_elems = payload_elems
        self.num_trees = len(self.tree_ids)
        self._tree_index = {tid: t for t, tid in enumerate(self.tree_ids)}
        self.cc: list[CongestionControl] = _tree_controllers(cc, cc_options, self.num_trees, cwnd_caps, path_windows)
        self.cc_name = cc
        self.min_rto_ps = min_rto_ps
        self.max_rto_ps = max_rto_ps
        self.max_retries = max_retries
        if dupthresh < 1:
            raise ValueError(f"dupthresh must be >= 1, got {dupthresh}")
        self.dupthresh = dupthresh
        if min_pto_ps is not None and min_pto_ps <= 0:
            raise ValueError(f"min_pto_ps must be > 0 (or None: no probes), got {min_pto_ps}")
        self.min_pto_ps = min_pto_ps
        self._probe_at = -1  # when the next tail-loss probe is due (-1: not armed)
        self.rto_ps = max(min_rto_ps, min(_integer_ps("initial_rto_ps", initial_rto_ps), max_rto_ps))
        self._srtt = -1.0  # smoothed RTT (ps); -1: no sample yet (samples are >= 0)
        self._rttvar = 0.0
        self.generation = 0
        self._trees = [_Tree(ctl) for ctl in self.cc]  # per tree: self.tree_ids[t]'s state
        # Outstanding packets. Never resent: _inflight[i] is packet i's send time (-1: none such),
        # _order[_head:_n_new] their indices in send order (a packet is sent new once per
        # generation; lists, not a dict: no hashing), so their deadlines, send time + RTO, are in
        # order too. Resent: index -> deadline, with a heap of (deadline, index) entries (stale ones skipped).
        self._inflight, self._order = [], []  # (start sizes them: one entry per packet)
        self._head = self._n_new = 0
        self._resent_due: dict[int, int] = {}
        self._resent_heap: list[tuple[int, int]] = []
        self._retries: dict[int, int] = {}
        self._retx_queue: list[int] = []
        self._closing_acks: list[Packet] = []
        self._got = bytearray()  # per packet of the generation: 1 once its result arrived
        self._remaining = 0
        self._npkts = 0
        self._num_elems = 0
        self._data: np.ndarray | None = None
        self._out: np.ndarray | None = None
        self.active = False
        self.trace_windows = trace_windows
        self.window_trace: list[tuple[int, int, int]] = []  # (now_ps, tree index, window)
        # Counters: ``stats`` (a property) folds the per-packet ones, kept in fields (``_n_sent``,
        # ``_n_bytes``, ``_n_results``, ``_n_ece``, ``_n_ce``), into this dict when it is read.
        self._n_sent = 0
        self._n_bytes = 0
        self._n_results = 0
        self._n_ece = 0
        self._n_ce = 0
        self._stats = {name: 0 for name in _STATS_COUNTERS} | {"ignored": {}}

    # ------------------------------------------------------------------ application input
    def start(
        self, now: int, data: np.ndarray | None = None, num_elems: int | None = None, out: np.ndarray | None = None
    ) -> None:
        """Begin the next allreduce of ``data`` (float32, 1-D) or of ``num_elems`` sizes only.

        ``out``: optional writable 1-D float32 vector of ``data``'s length that receives the
        result (``result()`` returns it). Default: a new array per call. Reusing one avoids
        faulting in fresh pages on every call, which real-socket drivers measured as costly.
        ``out`` may be ``data`` itself (in place): packet ``i``'s result is written over its
        own contribution only once it arrived, and a packet with a result is never sent
        again (retransmissions, probes and timers skip it), so every contribution is read
        before it is overwritten. Any other overlap is refused: a result would overwrite
        another packet's contribution before it was sent.
        """
        if self.active:
            raise TransportError(f"job {self.job_id} rank {self.rank}: generation {self.generation} still running")
        if data is not None:
            if data.dtype != np.float32 or data.ndim != 1:
                raise TypeError(f"allreduce needs a 1-D float32 array, got {data.dtype} with shape {data.shape}")
            num_elems = data.shape[0]
            self._data = np.ascontiguousarray(data)
            if out is None:
                self._out = np.empty(num_elems, dtype=np.float32)
            else:
                if out.dtype != np.float32 or out.shape != (num_elems,) or not out.flags.writeable:
                    raise TypeError(f"out must be a writable float32 vector of {num_elems} elements")
                if np.may_share_memory(out, self._data) and not same_vector(out, self._data):
                    raise ValueError(
                        "out must be data itself or not overlap it "
                        "(a packet's contribution is re-read until its result arrives)"
                    )
                self._out = out
        else:
            if num_elems is None or num_elems < 0:
                raise ValueError("give data or a non-negative num_elems")
            self._data = None
            self._out = None
        self.generation = (self.generation + 1) & MAX_U32
        pe = self.payload_elems
        npkts = -(-num_elems // pe)
        T = self.num_trees
        for t, tree in enumerate(self._trees):
            tree.gen_start = tree.base
            tree.gen_len = max(0, -(-(npkts - t) // T))
            tree.next_k = 0
            if tree.base + tree.gen_len > MAX_U32:
                raise TransportError(f"job {self.job_id}: sequence space of tree {self.tree_ids[t]} exhausted")
        self._npkts = npkts
        self._num_elems = num_elems
        self._remaining = npkts
        self._got = bytearray(npkts)
        self._inflight, self._order = [-1] * npkts, [0] * npkts
        self._head = self._n_new = 0
        self._resent_due.clear()
        self._resent_heap.clear()
        self._retries.clear()
        self._retx_queue.clear()
        for tree in self._trees:
            tree.dups = 0
            tree.recover = -1
            tree.high = -1
        self._closing_acks.clear()  # the new contributions carry the same acks
        self._probe_at = -1
        self.active = npkts > 0

    @property
    def done(self) -> bool:
        return not self.active

    @property
    def stats(self) -> dict:
        """Counters: packets_sent, bytes_sent, retransmissions, timeouts, results,
        fast_retransmits, acks_sent, ece_results, ce_results and ``ignored`` (by reason)."""
        st = self._stats
        st["packets_sent"] = self._n_sent
        st["bytes_sent"] = self._n_bytes
        st["results"] = self._n_results
        st["ece_results"] = self._n_ece
        st["ce_results"] = self._n_ce
        return st

    def result(self) -> np.ndarray | None:
        """The summed vector of the last finished generation (None when run without data)."""
        if self.active:
            raise TransportError(f"job {self.job_id} rank {self.rank}: generation {self.generation} not finished")
        return self._out

    def missing(self) -> list[tuple[int, int]]:
        """``(tree_id, seq)`` of every packet still without a result (for error messages)."""
        T = self.num_trees
        missing = np.flatnonzero(np.frombuffer(self._got, np.uint8) == 0).tolist()
        return [(self.tree_ids[i % T], self._trees[i % T].gen_start + i // T) for i in missing]

    # ------------------------------------------------------------------ outputs
    def poll(self, now: int) -> list[Packet]:
        """Packets to send now: due retransmissions first, then new packets as windows allow;
        after the last result of an allreduce, its closing ``FLAG_ACK`` per tree."""
        if not self.active:
            out, self._closing_acks = self._closing_acks, []
            self.stats["acks_sent"] += len(out)
            return out
        out: list[Packet] = []
        inflight, order, n_new = self._inflight, self._order, self._n_new
        if self._retx_queue:
            due = self._resent_due
            for i in self._retx_queue:
                if inflight[i] >= 0 or i in due:
                    inflight[i] = -1
                    # RFC 6298 (5.5) back-off, per packet: a packet resent r times waits
                    # RTO * 2^r, so one that waits on other workers' retransmissions does
                    # not burn its retries while fresh packets keep the measured RTO.
                    deadline = now + min(self.max_rto_ps, self.rto_ps << min(self._retries.get(i, 1), 32))
                    due[i] = deadline
                    heapq.heappush(self._resent_heap, (deadline, i))
                    out.append(self._packet(i, _FLAG_RETRANSMIT))
            self.stats["retransmissions"] += len(out)
            self._retx_queue.clear()
        resent = len(out)
        T = self.num_trees
        trees = self._trees
        more = True  # round robin: one packet per tree and pass while some tree has room
        while more:
            more = False
            for t in range(T):
                tree = trees[t]
                k = tree.next_k
                # Tree t may send k < limit. Window and ack cannot move inside poll (only receive,
                # handle_timer and start move them): one read per pass, none once the tree sent its
                # whole generation, and a pass that left no tree room for a second packet is the last.
                limit = tree.gen_len
                if k < limit:
                    window_end = tree.base + tree.cc.win() - tree.gen_start
                    if window_end < limit:
                        limit = window_end
                if k < limit:
                    i = t + T * k
                    tree.next_k = k + 1
                    inflight[i] = now
                    order[n_new] = i
                    n_new += 1
                    out.append(self._packet(i, 0))
                    if k + 1 < limit:
                        more = True
        self._n_new = n_new
        self._n_sent += len(out)  # (and _packet counted their bytes)
        if len(out) > resent and self._probe_at < 0 and self.min_pto_ps is not None:
            self._arm_probe(now)  # new data left (a probe itself re-arms nothing: one per quiet spell)
        return out

    def _arm_probe(self, now: int) -> None:
        """RFC 8985 section 7.2: the probe is due a PTO from ``now`` (no SRTT yet: the RTO)."""
        srtt = self._srtt
        pto = self.rto_ps if srtt < 0 else max(self.min_pto_ps, int(2 * srtt))
        self._probe_at = now + pto

    def _packet(self, i: int, flags: int) -> Packet:
        """Packet ``i`` of the generation, to be sent now (its bytes counted in ``bytes_sent``)."""
        T = self.num_trees
        t = i % T
        pe = self.payload_elems
        lo = i * pe
        count = min(pe, self._num_elems - lo)
        self._n_bytes += HEADER_BYTES + 4 * count
        payload = self._data[lo : lo + count] if self._data is not None else None
        tree = self._trees[t]
        ecn = _ECT0
        if tree.echo:
            ecn = _CE
            tree.echo = False
        g = tree.gen_start
        return new_packet(
            self.job_id,
            self.tree_ids[t],
            g + i // T,
            self.generation,
            count,
            flags,
            _MAX_CWND_CAP,
            tree.base,
            ecn,
            payload,
        )

    def timer(self) -> int | None:
        """Deadline (ps) of the oldest unacknowledged packet, or None when nothing waits."""
        if not self.active:
            return None
        first = -1  # the earliest deadline (-1: none yet; deadlines are >= 0)
        head = self._head  # the oldest never-resent packet still outstanding, if any
        while head < self._n_new:
            i = self._order[head]
            sent_at = self._inflight[i]
            if sent_at >= 0:
                first = sent_at + self.rto_ps
                break
            head += 1  # answered or resent: never outstanding-unresent again
        self._head = head
        heap, due = self._resent_heap, self._resent_due
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # answered, or resent again since
        if heap and (first < 0 or heap[0][0] < first):
            first = heap[0][0]
        if self._probe_at >= 0 and (first < 0 or self._probe_at < first):
            first = self._probe_at
        return None if first < 0 else first

    # ------------------------------------------------------------------ network input
    def receive(self, packet: Packet, now: int) -> None:
        """Take one result packet (anything else is counted in ``stats['ignored']``)."""
        flags = packet.flags
        if not flags & _FLAG_RESULT:
            return self._ignore(IGNORED_NOT_RESULT)
        if packet.job_id != self.job_id:
            return self._ignore(IGNORED_WRONG_JOB)
        ti = self._tree_index.get(packet.tree_id)
        if ti is None:
            return self._ignore(IGNORED_UNKNOWN_TREE)
        t = ti
        if not self.active:
            return self._ignore(IGNORED_IDLE)
        if packet.generation != self.generation:
            return self._ignore(IGNORED_OLD_GENERATION)
        tree = self._trees[t]
        k = packet.seq - tree.gen_start
        if not 0 <= k < tree.gen_len:
            return self._ignore(IGNORED_OUT_OF_RANGE)
        T = self.num_trees
        i = t + T * k
        got = self._got
        if got[i]:
            return self._ignore(IGNORED_DUPLICATE)
        pe = self.payload_elems
        lo = i * pe
        count = min(pe, self._num_elems - lo)
        if packet.count != count:
            return self._ignore(IGNORED_BAD_COUNT)
        if self._out is not None:
            if packet.payload is None:
                return self._ignore(IGNORED_BAD_COUNT)
            self._out[lo : lo + count] = packet.payload
        got[i] = 1
        self._remaining -= 1
        self._n_results += 1
        sent_at = self._inflight[i]  # -1: not outstanding unresent (times are >= 0)
        self._inflight[i] = -1
        if self._resent_due:  # (empty unless something was resent: skip the lookup)
            self._resent_due.pop(i, None)
        if sent_at >= 0 and not flags & _FLAG_RETRANSMIT and not (self._retries and i in self._retries):
            # Karn (RFC 6298 section 3), across the tree: neither a packet this worker resent
            # nor a result that waited for anyone's retransmission is an RTT sample.
            self._rtt_sample(now - sent_at)
        # Advance the cumulative acknowledgement of this tree.
        base = tree.base
        start = tree.gen_start
        end = start + tree.gen_len
        old_base = base
        if packet.seq > tree.high:
            tree.high = packet.seq
        while base < end and got[t + T * (base - start)]:
            base += 1
        tree.base = base
        if base < end:
            self._fast_retransmit(t, base, old_base, packet.seq)
        ece = bool(flags & _FLAG_ECE)
        if ece:
            self._n_ece += 1
        if packet.ecn == _CE:
            self._n_ce += 1
            tree.echo = True
        ctl = tree.cc
        before = ctl.win() if self.trace_windows else 0
        ctl.on_result(packet.seq, ece, packet.cwnd_cap, start + tree.next_k)
        if self.trace_windows and ctl.win() != before:
            self.window_trace.append((now, t, ctl.win()))
        if self.min_pto_ps is not None:
            self._arm_probe(now)  # a result: the path works, probe again only after a quiet PTO
        if self._remaining == 0:
            self.active = False
            self._probe_at = -1  # (every packet left _inflight with its result)
            self._resent_due.clear()
            self._resent_heap.clear()
            g = self.generation
            self._closing_acks = [
                Packet(self.job_id, tid, tree.base, g, 0, FLAG_ACK, MAX_CWND_CAP, tree.base, ECT0)
                for tid, tree in zip(self.tree_ids, self._trees)
            ]

    def _fast_retransmit(self, t: int, base: int, old_base: int, seq: int) -> None:
        """Resend tree ``t``'s lowest missing packet ``base`` on a gap (see the module docstring)."""
        T = self.num_trees
        tree = self._trees[t]
        if base != old_base:
            # The ack moved. Within a recovery a gap that remains is a partial ack: the new
            # lowest missing packet was sent before the ones already answered, resend it.
            tree.dups = 0
            if base > tree.recover or tree.high < base:
                return
        elif seq > base:
            tree.dups += 1
            if tree.dups != self.dupthresh:
                return
            tree.recover = tree.gen_start + tree.next_k - 1
        else:
            return
        i = t + T * (base - tree.gen_start)
        if (self._inflight[i] >= 0 or i in self._resent_due) and i not in self._retx_queue:
            self._retx_queue.append(i)
            self._retries[i] = self._retries.get(i, 0) + 1
            self.stats["fast_retransmits"] += 1

    def _ignore(self, reason: str) -> None:
        ignored = self.stats["ignored"]
        ignored[reason] = ignored.get(reason, 0) + 1

    # ------------------------------------------------------------------ timers
    def handle_timer(self, now: int) -> None:
        """Queue every packet whose timer expired for retransmission (sent by the next ``poll``)."""
        if not self.active:
            return
        if 0 <= self._probe_at <= now:
            self._probe_at = -1  # one probe per quiet spell: the next result arms it again
            self._probe()
        rto = self.rto_ps
        expired = []
        for n in range(self._head, self._n_new):
            i = self._order[n]
            sent_at = self._inflight[i]
            if sent_at < 0:
                continue  # answered or resent
            if sent_at + rto > now:
                break
            expired.append(i)
        heap, due = self._resent_heap, self._resent_due
        while heap and heap[0][0] <= now:
            deadline, i = heapq.heappop(heap)
            if due.get(i) == deadline:
                expired.append(i)
        if not expired:
            return
        T = self.num_trees
        trees_hit = set()
        for i in expired:
            tries = self._retries.get(i, 0) + 1
            if tries > self.max_retries:
                t = i % T
                raise TransportError(
                    f"job {self.job_id} rank {self.rank}: no result for tree {self.tree_ids[t]} "
                    f"seq {self._trees[t].gen_start + i // T} (generation {self.generation}) after "
                    f"{self.max_retries} retransmissions; {self._remaining} of {self._npkts} packets missing"
                )
            self._retries[i] = tries
            trees_hit.add(i % T)
            # Due again only once poll() has resent it (with the backed-off deadline).
            self._inflight[i] = -1
            due[i] = -1
        queued = set(self._retx_queue)
        self._retx_queue.extend(i for i in expired if i not in queued)
        for t in trees_hit:
            self.cc[t].on_timeout()
        self.stats["timeouts"] += 1

    def _probe(self) -> None:
        """Queue every tree's lowest outstanding packet (the tail-loss probe, see the module
        docstring); its deadline, once resent, is one RTO at its current back-off."""
        T = self.num_trees
        queued = set(self._retx_queue)
        probes = 0
        for t in range(T):
            tree = self._trees[t]
            base = tree.base
            if base >= tree.gen_start + tree.next_k:
                continue  # nothing of this tree outstanding
            i = t + T * (base - tree.gen_start)
            if i in queued or not (self._inflight[i] >= 0 or i in self._resent_due):
                continue
            self._retries.setdefault(i, 0)  # resent without a back-off
            self._retx_queue.append(i)
            probes += 1
        self.stats["probes"] += probes

    def _rtt_sample(self, rtt: int) -> None:
        # RFC 6298 section 2: SRTT/RTTVAR with alpha = 1/8, beta = 1/4.
        # Local floats (C doubles when compiled); the clamp int(max(lo, min(hi, rto))) as comparisons.
        r = float(rtt)
        if self._srtt < 0:
            srtt = r
            rttvar = r / 2
        else:
            srtt = self._srtt
            rttvar = 0.75 * self._rttvar + 0.25 * abs(srtt - r)
            srtt = 0.875 * srtt + 0.125 * r
        self._srtt = srtt
        self._rttvar = rttvar
        rto = srtt + 4 * rttvar
        lo, hi = self.min_rto_ps, self.max_rto_ps  # integers (C integers when compiled)
        if rto >= hi:
            self.rto_ps = hi
        elif rto > lo:
            self.rto_ps = int(rto)
        else:
            self.rto_ps = lo

    @property
    def srtt_ps(self) -> float | None:
        return None if self._srtt < 0 else self._srtt

    def windows(self) -> list[int]:
        return [cc.window for cc in self.cc]

    def alphas(self) -> list[float | None]:
        return [getattr(cc, "alpha", None) for cc in self.cc]
