"""Drive the aggregation datapath in Amaranth's simulator, with the host CPU's part.

:class:`HwAccelerator` takes the same control calls as the core
:class:`~panama.core.accelerator.Accelerator` (``install_tree``, ``remove_tree``,
``remove_job``) and datagrams with the neighbour they came from. Work is queued and
run in one simulation by :meth:`HwAccelerator.run`: packets are fed back to back (a
new beat offered every cycle), control requests between packets, and every egress
beat and per-packet verdict is collected.

The host CPU's part (:class:`_Host`, here in Python, reading and writing the
datapath's control registers cycle by cycle) is the control plane of the core: tree
install/remove, the per-job/per-tree memory shares and ``cwnd_cap`` (``_rebalance``),
and handing spare memory to trees below their target (``_grow``) when the datapath
asks for it (``host_req``, raised when a floor advance shrinks a tree that held more
than its target; the datapath waits, which only happens while shares change after a
job arrives or leaves). The rules are the core's, so they are imported from it where
they are functions (:func:`~panama.core.accelerator.cwnd_cap_for_slots`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from amaranth.sim import Simulator

from panama.core.accelerator import AcceleratorError, cwnd_cap_for_slots
from panama.hw.datapath import AggregationDatapath
from panama.hw.layout import EVENTS, HOLD_NONE, HOLD_WAIT_RESULT, KEY_BYTES, F, HwConfig


class HwError(ValueError):
    """A request the hardware configuration cannot hold (too many trees, children or ports)."""


@dataclass
class PacketOutcome:
    """What the datapath did with one ingress datagram."""

    event: str
    emitted: list[tuple[tuple, bytes, int]] = field(default_factory=list)  # (destinations, datagram, ecn)


@dataclass
class RunStats:
    cycles: int = 0
    packets: int = 0
    busy_cycles: int = 0  # from the first packet's header accept to the last beat accepted, back to back
    host_grow_requests: int = 0
    bad_key_drops: int = 0  # the datapath's counter at the end of the run
    event_cycles: list[int] = field(default_factory=list)  # cycle of each verdict (the packet enters the pipeline)


class _Host:
    """The host CPU: shares and tree table, over the control registers."""

    def __init__(self, cfg: HwConfig, io):
        self.cfg = cfg
        self.io = io
        self.trees: dict[tuple[int, int], int] = {}  # (job, tree) -> table index, install order
        self.jobs: dict[int, list[int]] = {}
        self.free = list(range(cfg.max_trees - 1, -1, -1))

    async def rd(self, t, name, index=0):
        return await self.io.ctl(t, F[name], index, None)

    async def wr(self, t, name, value, index=0):
        await self.io.ctl(t, F[name], index, value)

    async def install(self, job_id, tree_id, child_ports, parent_port, key=0, reserve=0):
        idx = self.free.pop()
        await self.wr(idx, "job_id", job_id)
        await self.wr(idx, "tree_id", tree_id)
        await self.wr(idx, "nchildren", len(child_ports))
        mask = 0
        for i, port in enumerate(child_ports):
            await self.wr(idx, "child_port", port, i)
            mask |= 1 << port
        await self.wr(idx, "child_mask", mask)
        await self.wr(idx, "is_root", parent_port is None)
        await self.wr(idx, "parent", 0 if parent_port is None else parent_port)
        for name in ("target", "cap", "hold_cap", "hold_seq"):
            await self.wr(idx, name, 0)
        await self.wr(idx, "key_hi", key >> 32)
        await self.wr(idx, "key_lo", key & 0xFFFFFFFF)
        await self.wr(idx, "init", 1)
        await self.wr(idx, "valid", 1)
        self.trees[(job_id, tree_id)] = idx
        self.jobs.setdefault(job_id, []).append(idx)
        await self.rebalance(reserve)

    async def remove(self, keys, reserve=0):
        for key in keys:
            idx = self.trees.pop(key)
            await self.wr(idx, "release", 1)
            await self.wr(idx, "valid", 0)
            self.jobs[key[0]].remove(idx)
            if not self.jobs[key[0]]:
                del self.jobs[key[0]]
            self.free.append(idx)
        await self.rebalance(reserve)

    async def rebalance(self, reserve):
        """The core's ``_rebalance`` on the tree table."""
        share = self.cfg.slots // max(1, len(self.jobs) + reserve)
        for idxs in self.jobs.values():
            per_tree = share // len(idxs)
            cap = cwnd_cap_for_slots(per_tree)
            for t in idxs:
                await self.wr(t, "target", per_tree)
                await self.wr(t, "cap", cap)
                limit = await self.rd(t, "limit")
                if limit <= per_tree:
                    continue
                used = await self.rd(t, "used")
                cap_sent = await self.rd(t, "cap_sent")
                hmode = await self.rd(t, "hold_mode")
                if not used:
                    await self.wr(t, "hold_mode", HOLD_NONE)
                    await self.wr(t, "limit", per_tree)
                elif cap_sent > cap:
                    earlier = await self.rd(t, "hold_cap") if hmode != HOLD_NONE else 0
                    await self.wr(t, "hold_mode", HOLD_WAIT_RESULT)
                    await self.wr(t, "hold_cap", max(earlier, cap_sent))
                    await self.wr(t, "cap_sent", cap)
                elif hmode == HOLD_NONE:
                    await self.wr(t, "limit", max(per_tree, used))
        await self.grow()

    async def grow(self):
        """The core's ``_grow``: spare memory to trees below their target, in install order."""
        limits = {t: await self.rd(t, "limit") for t in self.trees.values()}
        spare = self.cfg.slots - sum(limits.values())
        for t in self.trees.values():
            if spare <= 0:
                break
            target = await self.rd(t, "target")
            if limits[t] < target:
                extra = min(spare, target - limits[t])
                await self.wr(t, "limit", limits[t] + extra)
                spare -= extra


class HwAccelerator:
    """The RTL datapath plus its host, behind the core accelerator's control calls.

    ``reserve_shares`` as in the core. Nodes (children, parents, senders) are mapped to
    ports in order of first appearance; at most ``cfg.ports``.
    """

    def __init__(self, cfg: HwConfig = HwConfig(), *, reserve_shares: int = 0, name: Hashable = "hw"):
        self.cfg = cfg
        self.name = name
        self.reserve_shares = reserve_shares
        self.ports: dict[Hashable, int] = {}
        self.nodes: list[Hashable] = []
        self._queue: list[tuple] = []
        self._installed: dict[tuple[int, int], tuple[tuple, Hashable | None]] = {}
        self._jobs: dict[int, list[int]] = {}
        self.stats = RunStats()
        self.keys: dict[int, int] = {}

    def set_job_key(self, job_id: int, key: int) -> None:
        """The key trailer emitted packets of ``job_id`` carry (set before installing its trees)."""
        self.keys[job_id] = key

    # ------------------------------------------------------------------ queueing (checked like the core)
    def port_of(self, node: Hashable) -> int:
        port = self.ports.get(node)
        if port is None:
            if len(self.nodes) >= self.cfg.ports:
                raise HwError(f"{self.name}: more than {self.cfg.ports} neighbours")
            port = self.ports[node] = len(self.nodes)
            self.nodes.append(node)
        return port

    def install_tree(self, job_id: int, tree_id: int, children: Sequence[Hashable], parent: Hashable | None) -> None:
        key = (job_id, tree_id)
        children = tuple(children)
        if key in self._installed:
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} is already installed")
        if not children or len(set(children)) != len(children) or (parent is not None and parent in children):
            raise AcceleratorError(
                f"{self.name}: job {job_id} tree {tree_id}: bad children {children} / parent {parent!r}"
            )
        if len(children) > self.cfg.max_children:
            raise HwError(f"{self.name}: {len(children)} children, the datapath holds {self.cfg.max_children}")
        if len(self._installed) >= self.cfg.max_trees:
            raise HwError(f"{self.name}: tree table full ({self.cfg.max_trees} entries)")
        jobs = len(self._jobs) + (job_id not in self._jobs) + self.reserve_shares
        trees_of_job = len(self._jobs.get(job_id, ())) + 1
        most = max([trees_of_job] + [len(t) for j, t in self._jobs.items() if j != job_id])
        if self.cfg.slots // jobs < most:
            raise AcceleratorError(f"{self.name}: no room for job {job_id} tree {tree_id}")
        ports = [self.port_of(c) for c in children]
        pport = None if parent is None else self.port_of(parent)
        self._installed[key] = (children, parent)
        self._jobs.setdefault(job_id, []).append(tree_id)
        self._queue.append(("install", job_id, tree_id, ports, pport, self.keys.get(job_id, 0)))

    def remove_tree(self, job_id: int, tree_id: int) -> None:
        if (job_id, tree_id) not in self._installed:
            raise AcceleratorError(f"{self.name}: job {job_id} tree {tree_id} is not installed")
        del self._installed[(job_id, tree_id)]
        self._jobs[job_id].remove(tree_id)
        if not self._jobs[job_id]:
            del self._jobs[job_id]
        self._queue.append(("remove", [(job_id, tree_id)]))

    def remove_job(self, job_id: int) -> None:
        trees = self._jobs.pop(job_id, None)
        if trees is None:
            raise AcceleratorError(f"{self.name}: job {job_id} is not installed")
        for t in trees:
            del self._installed[(job_id, t)]
        self._queue.append(("remove", [(job_id, t) for t in trees]))

    def send(self, datagram: bytes, from_node: Hashable, ecn: int = 2) -> int:
        """Queue one ingress datagram; returns its index in :meth:`run`'s outcomes."""
        self._queue.append(("packet", bytes(datagram), ecn & 3, self.port_of(from_node)))
        return sum(1 for item in self._queue if item[0] == "packet") - 1

    # ------------------------------------------------------------------ simulation
    def run(self) -> list[PacketOutcome]:
        """Simulate everything queued (in one fresh simulation); one outcome per datagram."""
        queue, self._queue = self._queue, []
        cfg = self.cfg
        dut = AggregationDatapath(cfg)
        sim = Simulator(dut)
        sim.add_clock(4e-9)
        outcomes: list[PacketOutcome] = []
        emit_order: list[int] = []  # packet index of each expected emission, in egress order
        stats = self.stats = RunStats()
        beat_bytes = cfg.width // 8
        nodes = self.nodes
        io = _Io(dut, outcomes, emit_order, stats, nodes, beat_bytes)
        host = _Host(cfg, io)
        reserve = self.reserve_shares

        async def bench(ctx):
            io.ctx = ctx
            ctx.set(dut.out_ready, 1)
            i = 0
            while i < len(queue):
                item = queue[i]
                if item[0] == "install":
                    await host.install(item[1], item[2], item[3], item[4], item[5], reserve)
                    i += 1
                elif item[0] == "remove":
                    await host.remove(item[1], reserve)
                    i += 1
                else:
                    j = i
                    while j < len(queue) and queue[j][0] == "packet":
                        j += 1
                    await io.feed(queue[i:j], host)
                    i = j
            await io.drain()
            stats.bad_key_drops = ctx.get(dut.bad_key_drops)

        sim.add_testbench(bench)
        sim.run()
        if len(io.pending) or any(o is None for o in outcomes):
            raise RuntimeError(f"{self.name}: {len(io.pending)} emissions expected but not seen")
        return outcomes


class _Io:
    """Cycle-level pin wiggling shared by the feeder and the host."""

    def __init__(self, dut, outcomes, emit_order, stats, nodes, beat_bytes):
        self.dut = dut
        self.ctx = None
        self.outcomes = outcomes
        self.pending = emit_order
        self.stats = stats
        self.nodes = nodes
        self.beat_bytes = beat_bytes
        self.out_beats: list[bytes] = []
        self.next_event = 0

    async def cycle(self):
        """Sample the egress and event outputs, then one clock edge."""
        ctx, dut = self.ctx, self.dut
        if ctx.get(dut.event_valid):
            k = self.next_event
            self.next_event += 1
            self.outcomes.append(PacketOutcome(EVENTS[ctx.get(dut.event_code)]))
            self.stats.event_cycles.append(self.stats.cycles)
            if ctx.get(dut.event_emit):
                self.pending.append(k)
        if ctx.get(dut.out_valid):
            self.out_beats.append(ctx.get(dut.out_data).to_bytes(self.beat_bytes, "little"))
            if ctx.get(dut.out_last):
                data = b"".join(self.out_beats)
                self.out_beats = []
                count = int.from_bytes(data[24:26], "big")
                datagram = data[: 28 + 4 * count + KEY_BYTES]
                mask = ctx.get(dut.out_dests)
                dests = tuple(self.nodes[p] for p in range(len(self.nodes)) if mask >> p & 1)
                k = self.pending.pop(0)
                self.outcomes[k].emitted.append((dests, datagram, ctx.get(dut.out_ecn)))
        await ctx.tick()
        self.stats.cycles += 1

    async def ctl(self, tree, fieldno, index, value):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.ctl_valid, 1)
        ctx.set(dut.ctl_tree, tree)
        ctx.set(dut.ctl_field, fieldno)
        ctx.set(dut.ctl_index, index)
        ctx.set(dut.ctl_we, value is not None)
        ctx.set(dut.ctl_wdata, 0 if value is None else int(value))
        while True:
            ready = ctx.get(dut.ctl_ready)
            data = ctx.get(dut.ctl_rdata)
            await self.cycle()
            if ready:
                break
        ctx.set(dut.ctl_valid, 0)
        return data

    async def feed(self, packets, host):
        """Offer the packets' beats back to back; serve the host's grow requests."""
        ctx, dut = self.ctx, self.dut
        bb = self.beat_bytes
        started = None
        for _, datagram, ecn, port in packets:
            nbeats = max(1, -(-len(datagram) // bb))
            padded = datagram + bytes(nbeats * bb - len(datagram))
            b = 0
            while b < nbeats:
                if ctx.get(dut.host_req):
                    self.stats.host_grow_requests += 1
                    ctx.set(dut.in_valid, 0)
                    await host.grow()
                    await self.ctl(0, F["grow_done"], 0, 1)
                    continue
                ctx.set(dut.in_valid, 1)
                ctx.set(dut.in_data, int.from_bytes(padded[b * bb : (b + 1) * bb], "little"))
                ctx.set(dut.in_last, b == nbeats - 1)
                ctx.set(dut.in_port, port)
                ctx.set(dut.in_ecn, ecn)
                ctx.set(dut.in_length, len(datagram))
                ready = ctx.get(dut.in_ready)
                await self.cycle()
                if ready:
                    if started is None:
                        started = self.stats.cycles - 1
                    b += 1
            self.stats.packets += 1
        ctx.set(dut.in_valid, 0)
        if started is not None:
            self.stats.busy_cycles += self.stats.cycles - started
        # let the last packet reach a verdict before control requests
        while ctx.get(dut.busy) or ctx.get(dut.host_req):
            if ctx.get(dut.host_req):
                self.stats.host_grow_requests += 1
                await host.grow()
                await self.ctl(0, F["grow_done"], 0, 1)
                continue
            await self.cycle()

    async def drain(self):
        for _ in range(64):
            if not self.pending and not self.out_beats and self.next_event >= len(self.outcomes):
                pass
            await self.cycle()
        while self.pending:
            await self.cycle()
