"""``panama switch``: a UDP daemon that runs one aggregation accelerator (one PSwitch).

Data plane (one thread, the plain loop of :mod:`panama.runtime.switch.loop_plain`; its
state, counters and per-datagram work are a
:class:`~panama.runtime.switch.dataplane.DataPlane`, ``SwitchDaemon.dp``):
datagrams are drained from the UDP socket, and from the group sockets the daemon joined
(``install_job``'s ``join``), in batches of up to ``batch`` into preallocated buffers
(:class:`panama.runtime.net.mmsg.Receiver`: one ``recvmmsg`` where compiled, else one
``recvmsg_into`` per datagram; one ``poll`` over all sockets when every queue is empty),
decoded by :mod:`panama.core.codec`, handed to
:meth:`panama.core.accelerator.Accelerator.receive` with the source address as
``from_node``, and what it emits is encoded and sent at once, to all its destinations
with one :meth:`~panama.runtime.net.udp.PacketSocket.send_all` (one ``sendmmsg`` where
compiled), so the accelerator runs with ``copy_payloads=False``. ``/stats`` ``io`` names
the I/O in use. Nothing here decides protocol behaviour.

Multicast results (:mod:`panama.runtime.net.mcast`): a job installed with a loopback group
(``multicast``: group and members, from the controller) has every emission whose
destination set is exactly the members sent as one datagram to the group (same
codepoint), when this daemon can (socket bound to 127.0.0.1, TTL 0, interface
127.0.0.1, the plain loop); otherwise, or once the kernel refuses a group send, one copy
per child as before, the reason counted in ``/stats`` ``multicast``.

ECN: the daemon reads each datagram's codepoint (``IP_RECVTOS``) and passes it to the
codec; the accelerator decides every emitted packet's codepoint (CE of contributions
folded into the slot: partials leave as CE, results carry ``FLAG_ECE``; a result that
arrived CE is relayed down as CE, see :mod:`panama.core.accelerator`). The daemon marks
CE itself when its backlog exceeds
``ecn_threshold_pkts``. Backlog is measured in bytes at dequeue: the datagrams already
drained in the current batch and not yet processed, plus, when the batch came back full
(so more may wait), the datagrams in the kernel's receive queue (``SO_MEMINFO``
rmem_alloc, one ``getsockopt`` per full batch, divided by the buffer memory one full
datagram takes, measured once at start) counted as full datagrams. The threshold is
``ecn_threshold_pkts`` full datagrams
(``ecn_threshold_pkts * datagram_size(payload_elems)`` bytes). Marking happens on what the
daemon emits while the backlog is above it (RED-style on the instantaneous queue, as in
DCTCP's switch rule).

Control plane (HTTP/JSON via aiohttp on ``control``, see docs/runtime.md):
``GET /health``, ``GET /stats``, ``GET /metrics`` (Prometheus text), ``GET /jobs``,
``PUT /jobs/{job_id}`` (install trees), ``DELETE /jobs/{job_id}``. Control requests
and the data plane share the accelerator under one lock. Every request but ``/health``
needs ``Authorization: Bearer <token>`` (401 otherwise); a job is installed with its
data-plane key, and datagrams of that job carrying another key are dropped
(``malformed["bad_key"]``). An install is validated whole (every address parsed,
resolved and checked routable from the data-plane socket) before anything is applied:
400 naming the field, nothing installed.

Batching: with ``offload`` (default) the data plane runs the batched loop of
:mod:`panama.runtime.switch.loop_batch` (UDP GRO receives, GSO sends, :mod:`.offload`) where
the kernel has them and 2+ datagrams of ``payload_elems`` fit one GSO send; otherwise
the loop below. ``/stats`` reports which (``offload``), ``rx_syscalls``, ``gso_sends``.

Faults: malformed datagrams are counted by codec reason (``malformed``), never
raised; ``drop_prob`` (seeded) drops received datagrams before processing to inject loss.
No send error ends the data plane: the socket counts them per destination and reason
(``send_errors``, ``last_send_error``); any other exception in the data plane is
logged, counted (``data_plane.errors``) and the loop restarts. ``/health`` reports the
data plane's liveness and last error, and answers 503 while it is not running.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter

from aiohttp import web

from panama.core import codec
from panama.core.accelerator import Accelerator, AcceleratorError
from panama.core.errors import FieldError
from panama.runtime.control.admission import KEEPALIVE_TIMEOUT_S, Admission, start_site
from panama.runtime.control.messages import DataPlaneFacts, InstallBody, MulticastBody, SwitchHealth, TreeBody
from panama.runtime.net import mcast, mmsg, offload
from panama.runtime.net.udp import (
    DEFAULT_SOCKET_BUFFER_BYTES,
    Address,
    AddressError,
    PacketSocket,
    format_addr,
    parse_destination,
    parse_ipv4_addr,
)
from panama.runtime.process import main_from_file, write_ready_file
from panama.runtime.settings import SwitchConfig, SwitchProcess
from panama.runtime.switch.api import SwitchHttp
from panama.runtime.switch.dataplane import DataPlane, log
from panama.runtime.switch.loop_batch import batched_loop
from panama.runtime.switch.loop_plain import plain_loop

GROUP_BATCH = 16  # datagrams per receive on a joined group's socket (results from parents)
# The data plane turns the automatic cyclic collector off (gc.disable() is process-wide), but
# the control plane makes cycles (aiohttp keeps ~1.1 KB per closed connection in them: 80 ->
# 99 MB over 18,000 connections, issue 35). The event loop collects them every this many
# seconds and after every GC_EVERY_RESPONSES answers, whichever comes first, so the garbage
# between two passes stays small at any request rate; what start-up made is frozen
# (gc.freeze), so a pass walks only newer objects. Every 256 answers, the garbage between
# passes raised RSS 8.8 MB over the first 4,000 connections before it flattened; every 64,
# 0.6 MB over 20,000 (bench/bench_daemon_connections.py --connections 20000).
GC_INTERVAL_S = 0.5
GC_EVERY_RESPONSES = 64


class SwitchDaemon:
    """One accelerator behind a UDP socket, with an HTTP control and metrics endpoint
    (:class:`~panama.runtime.switch.api.SwitchHttp`, built from it)."""

    def __init__(self, config: SwitchConfig, token: str | None = None):
        """``token``: the bearer token control requests must carry (None: no authentication,
        for in-process use without HTTP; ``panama switch`` always has one)."""
        self.config = config
        self.token = token
        self.acc = Accelerator(config.packet_memory, config.payload_elems, name=config.switch_id, copy_payloads=False)
        self.lock = threading.Lock()
        datagram_bytes = codec.datagram_size(config.payload_elems)
        want = config.offload and offload.env_allows() and offload.segments_per_send(datagram_bytes) >= 2
        self.sock = PacketSocket(config.udp, offload=want)
        # The batched loop only where it pays: 2+ datagrams per GSO send and GSO or GRO here.
        self.batched = want and (self.sock.offload.gso or self.sock.offload.gro)
        self.udp_addr = self.sock.addr
        self.control_addr: Address | None = None
        self._stop = threading.Event()
        self.gc_passes = 0  # collections of the control plane's cycles (_collect_cycles)
        self._responses_since_gc = 0
        self.gc_max_pause_s = 0.0
        self.started_at = time.monotonic()
        # The data plane's state and counters (read and changed under ``lock``): the
        # installed jobs' keys and groups are its dicts, changed in place.
        self.dp = DataPlane(config, self.acc)
        self.keys = self.dp.keys
        self.jobs_installed: dict[int, list[dict]] = {}
        self.sock.trailers = {}
        self.control_counters: dict[str, int] = {}
        self.admission = Admission()  # who may hold a control connection
        self.dp_errors = 0
        self.dp_last_error: str | None = None
        self._thread: threading.Thread | None = None
        # Loopback multicast of results (panama.runtime.net.mcast): None when this socket can
        # send to groups (TTL 0, interface 127.0.0.1), else why not. ``groups``: per job,
        # (member set, (group,)); a result to exactly the members leaves as one datagram.
        self.mcast_reason = mcast.enable_sender(self.sock.sock)
        if self.mcast_reason is None and self.batched:
            self.mcast_reason = "the batched GSO loop sends one copy per child"
        self.groups = self.dp.groups
        self.group_texts: dict[int, str] = {}
        self.unicast_reasons: dict[int, str] = {}  # per job whose group was turned off, why
        self.mcast_sends = 0  # results sent as one multicast datagram
        self.mcast_copies_saved = 0  # unicast datagrams those replaced, minus the multicast ones
        self.mcast_fallbacks: Counter[str] = Counter()  # groups installed but served by unicast, by reason
        # Groups this daemon receives its parents' results from (install_job's ``join``),
        # per job; the data plane reads ``_group_sources`` (all of them, a tuple replaced
        # whole) and closes what ``_retired`` holds (removed jobs' sockets).
        self.joined: dict[int, list[mcast.GroupReceiver]] = {}
        self._group_sources: tuple = ()
        self._retired: list[mcast.GroupReceiver] = []
        self.join_reasons: Counter[str] = Counter()  # joins refused, by reason

    # ------------------------------------------------------------------ data plane
    def start_data_plane(self) -> None:
        self._thread = threading.Thread(target=self._serve_udp, name=f"switch-{self.config.switch_id}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the data-plane thread and close the socket (for daemons used without :meth:`serve`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.sock.close()
        self._close_groups()

    def _publish_groups(self) -> None:
        """Hand the data plane every joined group socket (under ``lock``): a new tuple, which
        the loop sees by identity and re-registers with its poller."""
        self._group_sources = tuple(g for gs in self.joined.values() for g in gs)

    def _close_groups(self) -> None:
        """Close every group socket (the data plane has stopped)."""
        with self.lock:
            sources = [g for gs in self.joined.values() for g in gs] + self._retired
            self.joined.clear()
            self._group_sources = ()
            self._retired = []
        for g in sources:
            g.close()

    def _serve_udp(self) -> None:
        """Run the data-plane loop until stopped; an unexpected error is logged, counted and the loop restarts."""
        # Per-packet objects are acyclic and freed by reference counting; the cyclic
        # collector would only add pauses to the data plane of this process.
        gc.disable()
        while not self._stop.is_set():
            try:
                if self.batched:
                    batched_loop(self)
                else:
                    plain_loop(self)
            except Exception as exc:  # noqa: BLE001 - the data plane must outlive any one packet
                with self.lock:
                    self.dp_errors += 1
                    self.dp_last_error = f"{type(exc).__name__}: {exc}"
                if self.dp_errors <= 10 or self.dp_errors % 1000 == 0:
                    log.exception("data plane error %d (loop restarted)", self.dp_errors)
                time.sleep(0.001)

    def data_plane_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def _send_group(self, pkt, group: tuple, destinations, tos: int) -> int:
        """Send ``pkt`` once to its job's group (called under ``lock``); when the kernel
        refuses, the group is dropped for good (counted reason, logged) and this and every
        later result go to each child. Returns the datagrams that failed."""
        sock = self.sock
        if not sock.send_all(pkt, group[1], tos):
            self.mcast_sends += 1
            self.mcast_copies_saved += len(destinations) - 1
            return 0
        self._group_off(pkt.job_id, f"send to group refused: {sock.last_send_error}")
        return sock.send_all(pkt, destinations, tos)

    def _group_off(self, job_id: int, reason: str) -> None:
        """Serve ``job_id``'s results by unicast from now on (under ``lock``)."""
        self.groups.pop(job_id, None)
        self.unicast_reasons[job_id] = reason
        self.mcast_fallbacks[reason] += 1
        log.warning("job %d: multicast results off, unicast per child: %s", job_id, reason)

    # ------------------------------------------------------------------ control plane
    def install_job(
        self,
        job_id: int,
        trees: list[dict],
        key: int = 0,
        multicast: dict | None = None,
        join: list | None = None,
    ) -> str | None:
        """Install every tree of ``job_id`` with data-plane ``key`` atomically (all or none).

        ``trees``: ``[{"tree_id": T, "children": ["HOST:PORT", ...], "parent": "HOST:PORT"
        or None}, ...]``, the fields of :class:`~panama.runtime.control.messages.TreeBody`.
        ``multicast``: ``{"group": "239.x.y.z:PORT", "members": ["HOST:PORT", ...]}`` (from the
        controller, panama.runtime.net.mcast): results to exactly these children (every member a
        child of the job's trees) leave as one datagram to the group, when this daemon can
        send loopback multicast (else unicast per child, the reason counted in ``/stats``).
        ``join``: ``["239.x.y.z:PORT", ...]``, the groups this daemon's parents send the
        job's results to (from the controller): the data plane receives from a socket
        joined to each, besides its own. Returns None when every group was joined (or none
        asked), else why not (nothing joined: the parents must send unicast); a join never
        fails the install.
        Everything is validated before anything is applied (FieldError/AddressError,
        naming the field); AcceleratorError when the accelerator refuses (nothing stays).
        """
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= codec.MAX_KEY:
            raise FieldError("key", f"expected an integer in [0, 2^64), got {key!r}")
        body = {"trees": trees, "multicast": multicast, "join": join}
        return self.install(job_id, InstallBody.parse({k: v for k, v in body.items() if v is not None}), key)

    def install(self, job_id: int, body: InstallBody, key: int) -> str | None:
        """:meth:`install_job` of a parsed install body (``PUT /jobs/{job_id}``): the
        addresses resolved and checked first, then applied under ``lock``, all or none."""
        parsed = self._resolve_trees(body.trees)
        group = self._parse_group(body.multicast, {k for _, kids, _ in parsed for k in kids})
        join_groups = self._parse_join(body.join)
        trees = [t.model_dump(exclude_unset=True) for t in body.trees]  # as given (GET /jobs)
        with self.lock:
            if job_id in self.acc.jobs():
                raise AcceleratorError(f"{self.config.switch_id}: job {job_id} is already installed")
            done = []
            try:
                for tree_id, kids, par in parsed:
                    self.acc.install_tree(job_id, tree_id, kids, par)
                    done.append(tree_id)
            except AcceleratorError:
                for tree_id in done:
                    self.acc.remove_tree(job_id, tree_id)
                raise
            # Groups are joined last, after every check passed (a join costs a socket and its buffers).
            receivers, join_reason = self._join(join_groups)
            if receivers:
                self.joined[job_id] = receivers
                self._publish_groups()
            if join_reason is not None:
                self.join_reasons[join_reason] += 1
            self.jobs_installed[job_id] = trees
            self.keys[job_id] = key
            self.sock.trailers[job_id] = codec.key_trailer(key)
            if group is not None:
                self.group_texts[job_id] = body.multicast.group
                if self.mcast_reason is None:
                    self.groups[job_id] = group
                else:
                    self.mcast_fallbacks[self.mcast_reason] += 1
        log.info(
            "installed job %d: %s (multicast %s, join %s%s)",
            job_id,
            json.dumps(trees),
            json.dumps(body.multicast and body.multicast.model_dump()),
            json.dumps(body.join),
            "" if join_reason is None else f": not joined, {join_reason}",
        )
        return join_reason

    def _resolve_trees(self, trees: list[TreeBody]) -> list[tuple[int, tuple[Address, ...], Address | None]]:
        """``(tree_id, children, parent)`` of each tree, every address resolved and one this
        daemon can send to (FieldError naming the tree's field otherwise)."""
        parsed = []
        for i, tree in enumerate(trees):
            where = f"trees[{i}]"
            kids = tuple(self._destination(c, f"{where}.children") for c in tree.children)
            if len(set(kids)) != len(kids):
                raise FieldError(f"{where}.children", "duplicate address")
            par = None if tree.parent is None else self._destination(tree.parent, f"{where}.parent")
            if par is not None and par in kids:
                raise FieldError(f"{where}.parent", f"{tree.parent} is also a child")
            parsed.append((tree.tree_id, kids, par))
        if len({t for t, _, _ in parsed}) != len(parsed):
            raise FieldError("trees", "duplicate tree_id")
        return parsed

    def _parse_join(self, join: list[str] | None) -> list[Address]:
        """An install's ``join`` list: the group addresses, validated (FieldError naming the entry)."""
        if join is None:
            return []
        out = [mcast.parse_group(text, f"join[{i}]") for i, text in enumerate(join)]
        if len(set(out)) != len(out):
            raise FieldError("join", "duplicate group")
        return out

    def _join(self, join_groups: list[Address]) -> tuple[list[mcast.GroupReceiver], str | None]:
        """Sockets joined to ``join_groups`` for the data plane, or none and why not."""
        if not join_groups:
            return [], None
        if self.batched:
            return [], "the batched GSO/GRO loop reads its own socket only"
        if self.sock.addr[0] != mcast.LOOPBACK:
            return [], f"data-plane socket is bound to {self.sock.addr[0]}, not {mcast.LOOPBACK}"
        size = codec.datagram_size(self.config.payload_elems) + 1  # one more: a longer datagram is cut
        receivers: list[mcast.GroupReceiver] = []
        for group in join_groups:
            try:
                receivers.append(mcast.GroupReceiver(group, GROUP_BATCH, DEFAULT_SOCKET_BUFFER_BYTES, size))
            except OSError as exc:
                for g in receivers:
                    g.close()
                return [], f"could not join group {format_addr(group)}: {exc}"
        return receivers, None

    def multicast_off(self, job_id: int, reason: str) -> str | None:
        """Serve ``job_id``'s results to every child by unicast from now on (the controller
        asks when a member could not join the group after all); returns the path as
        :meth:`multicast_path`. AcceleratorError when the job is not installed."""
        with self.lock:
            if job_id not in self.acc.jobs():
                raise AcceleratorError(f"{self.config.switch_id}: job {job_id} is not installed")
            if job_id in self.groups:
                self._group_off(job_id, reason)
        return self.multicast_path(job_id)

    def multicast_path(self, job_id: int) -> str | None:
        """How ``job_id``'s results to its group's members leave: None (no group installed),
        ``"multicast"``, or ``"unicast: <why>"``."""
        with self.lock:
            if job_id not in self.group_texts:
                return None
            if job_id in self.groups:
                return "multicast"
            return f"unicast: {self.unicast_reasons.get(job_id) or self.mcast_reason}"

    def _parse_group(self, multicast: MulticastBody | None, children: set) -> tuple[frozenset, tuple[Address]] | None:
        """An install's ``multicast`` object: (member set, (group,)), or None when absent."""
        if multicast is None:
            return None
        group = mcast.parse_group(multicast.group, "multicast.group")
        members = multicast.members
        addrs = frozenset(_resolve(m, "multicast.members") for m in members)
        if len(addrs) != len(members):
            raise FieldError("multicast.members", "duplicate address")
        stray = sorted(format_addr(a) for a in addrs - children)
        if stray:
            raise FieldError("multicast.members", f"{stray[0]} is not a child of the job's trees")
        return addrs, (group,)

    def _destination(self, text: object, field: str) -> Address:
        """A child or parent address: an IPv4 literal, one peers can send to (the one rule:
        :mod:`panama.addresses`), and one this daemon's socket can send to (a route
        lookup: what the rule cannot tell)."""
        host, port = parse_destination(text, field=field)
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.bind((self.udp_addr[0], 0))
            probe.connect((host, port))  # route lookup only: nothing is sent
        except OSError as exc:
            raise AddressError(
                field,
                f"{text} is not reachable from this daemon's socket {format_addr(self.udp_addr)} "
                f"({exc.strerror or exc})",
            ) from None
        finally:
            probe.close()
        return host, port

    def remove_job(self, job_id: int) -> None:
        with self.lock:
            self.acc.remove_job(job_id)
            self.jobs_installed.pop(job_id, None)
            self.keys.pop(job_id, None)
            self.sock.trailers.pop(job_id, None)
            self.groups.pop(job_id, None)
            self.group_texts.pop(job_id, None)
            self.unicast_reasons.pop(job_id, None)
            left = self.joined.pop(job_id, [])
            if left:
                self._publish_groups()
                if self.data_plane_alive():
                    self._retired.extend(left)  # closed by the data plane, their only reader
                    left = []
        for g in left:
            g.close()
        log.info("removed job %d", job_id)

    def stats(self) -> dict:
        with self.lock:
            acc = self.acc.stats()
            drops = Counter(self.acc.drops)
            dp = self.dp
            drops.update(dp.drops)
            return {
                "id": self.config.switch_id,
                "udp": format_addr(self.udp_addr),
                "uptime_s": round(time.monotonic() - self.started_at, 3),
                "payload_elems": self.config.payload_elems,
                "packet_memory": self.config.packet_memory,
                "rx_packets": dp.rx_packets,
                "rx_bytes": dp.rx_bytes,
                "tx_packets": self.sock.sent_packets,
                "tx_bytes": self.sock.sent_bytes,
                "rx_syscalls": dp.rx_syscalls,
                "tx_syscalls": self.sock.tx_syscalls,
                "gso_sends": self.sock.gso_sends,
                "gso_datagrams": self.sock.gso_datagrams,
                "offload": {**self.sock.offload.as_dict(), "batched_loop": self.batched},
                "io": "gso/gro" if self.batched else mmsg.IMPLEMENTATION,
                "drops": dict(drops),
                "malformed": dict(dp.malformed),
                "send_errors": self.sock.send_errors,
                "send_errors_by_dest": {d: dict(v) for d, v in self.sock.send_errors_by_dest.items()},
                "data_plane": self.data_plane_facts().to_json(),
                "control": dict(self.control_counters),
                "retransmits_received": dp.retransmits_received,
                "ce_received": dp.ce_received,
                "ce_marked": dp.ce_marked,
                "batches": dp.batches,
                "max_backlog_pkts": dp.max_backlog_pkts,
                "accelerator": acc,
                "occupancy": {str(k): v for k, v in acc["occupancy"].items()},
                "jobs": sorted(self.acc.jobs()),
                "multicast": self._multicast_facts(),
            }

    def _multicast_facts(self) -> dict:
        """``/stats`` ``multicast`` (under ``lock``): whether this daemon can send results as
        loopback multicast (``reason`` when not), per job the group in use (``path``
        ``multicast``) or installed but served unicast, datagrams sent and copies saved."""
        return {
            "available": self.mcast_reason is None,
            "reason": self.mcast_reason,
            "jobs": {
                str(j): {"group": g, "path": "multicast" if j in self.groups else "unicast"}
                for j, g in self.group_texts.items()
            },
            "sends": self.mcast_sends,
            "copies_saved": self.mcast_copies_saved,
            "fallbacks": dict(self.mcast_fallbacks),
            "joined": {str(j): {g.text(): g.datagrams for g in gs} for j, gs in self.joined.items()},
            "join_refused": dict(self.join_reasons),
        }

    def data_plane_facts(self) -> DataPlaneFacts:
        """Whether the data-plane loop runs, its restarts and send errors."""
        return DataPlaneFacts(
            alive=self.data_plane_alive(),
            errors=self.dp_errors,
            last_error=self.dp_last_error,
            send_errors=self.sock.send_errors,
            last_send_error=self.sock.last_send_error,
        )

    def health(self) -> SwitchHealth:
        """``GET /health``: identity, sizes, the data plane's facts and the jobs installed."""
        with self.lock:
            dp = self.data_plane_facts()
            jobs = sorted(self.acc.jobs())
        return SwitchHealth(
            id=self.config.switch_id,
            udp=format_addr(self.udp_addr),
            payload_elems=self.config.payload_elems,
            packet_memory=self.config.packet_memory,
            status="ok" if dp.alive else "data plane down",
            data_plane=dp,
            jobs=jobs,
        )

    def installed(self) -> dict[int, list[dict]]:
        """The trees installed per job id, as their installs gave them (``GET /jobs``)."""
        with self.lock:
            return dict(self.jobs_installed)

    async def serve(self, ready: asyncio.Event | None = None) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT when run as the main program)."""
        app = SwitchHttp(self).make_app()
        app.on_response_prepare.append(self._count_response)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT_S, shutdown_timeout=2.0)
        await runner.setup()
        server, watchdog = await start_site(runner, self.config.control[0], self.config.control[1], self.admission)
        self.control_addr = tuple(server.sockets[0].getsockname()[:2])
        self.start_data_plane()
        log.info(
            "switch %s: udp %s, control http://%s, packet_memory %d x %d floats, ecn threshold %d, drop_prob %g",
            self.config.switch_id,
            format_addr(self.udp_addr),
            format_addr(self.control_addr),
            self.config.packet_memory,
            self.config.payload_elems,
            self.config.ecn_threshold_pkts,
            self.config.drop_prob,
        )
        if ready is not None:
            ready.set()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self._async_stop = (loop, stop)
        gc.freeze()  # start-up's objects live as long as the daemon: no collection needs to walk them
        collector = asyncio.create_task(self._collect_cycles())
        try:
            while not stop.is_set() and not self._stop.is_set():
                interval = self.config.status_interval_s
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval if interval > 0 else 3600)
                except asyncio.TimeoutError:
                    st = self.stats()
                    log.info(
                        "status: rx %d pkts / %d B, tx %d pkts, jobs %s, used slots %d, drops %s, malformed %s",
                        st["rx_packets"],
                        st["rx_bytes"],
                        st["tx_packets"],
                        st["jobs"],
                        st["accelerator"]["used_slots"],
                        st["drops"],
                        st["malformed"],
                    )
        finally:
            self._stop.set()
            collector.cancel()
            watchdog.cancel()
            server.close()
            await runner.cleanup()
            if self._thread is not None:
                self._thread.join(timeout=2.0)
            self.sock.close()
            self._close_groups()
            log.info("switch %s stopped", self.config.switch_id)

    async def _collect_cycles(self) -> None:
        """Collect the control plane's reference cycles every ``GC_INTERVAL_S`` (see there)."""
        while True:
            await asyncio.sleep(GC_INTERVAL_S)
            self._collect()

    async def _count_response(self, request: web.Request, response: web.StreamResponse) -> None:
        """Every ``GC_EVERY_RESPONSES`` answers, a collection pass (see ``GC_INTERVAL_S``)."""
        self._responses_since_gc += 1
        if self._responses_since_gc >= GC_EVERY_RESPONSES:
            self._collect()

    def _collect(self) -> None:
        """One pass of the cyclic collector; ``gc_passes`` and ``gc_max_pause_s`` count them
        (the data plane waits for the GIL during a pass)."""
        start = time.perf_counter()
        gc.collect()
        self.gc_max_pause_s = max(self.gc_max_pause_s, time.perf_counter() - start)
        self.gc_passes += 1
        self._responses_since_gc = 0

    def stop(self) -> None:
        """Ask a running :meth:`serve` to return (thread-safe)."""
        self._stop.set()
        pending = getattr(self, "_async_stop", None)
        if pending is not None:
            loop, event = pending
            loop.call_soon_threadsafe(event.set)


def run_switch(config: SwitchConfig, ready_file: str | None = None, token: str | None = None) -> None:
    """Run a daemon in the foreground until SIGTERM or SIGINT.

    ``ready_file``: once both sockets listen, write ``{"id", "udp", "control", "pid"}``
    there (atomically), so a supervisor learns the ports chosen for port 0.
    """
    daemon = SwitchDaemon(config, token=token)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, daemon.stop)
        ready = asyncio.Event()
        task = asyncio.create_task(daemon.serve(ready))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set() and ready_file:
            write_ready_file(
                ready_file,
                {
                    "id": config.switch_id,
                    "udp": format_addr(daemon.udp_addr),
                    "control": format_addr(daemon.control_addr),
                    "pid": os.getpid(),
                },
            )
        waiter.cancel()
        await task

    asyncio.run(main())


# ---------------------------------------------------------------------- helpers
def _resolve(text: object, field: str) -> Address:
    """``HOST:PORT`` with an IPv4 literal host (issue 35: a name made the daemon call a blocking
    ``gethostbyname`` in its event loop, and a slow resolver stalled every other job's
    control requests); :class:`AddressError` naming ``field`` otherwise."""
    return parse_ipv4_addr(text, field=field)


def run_switch_process(settings: SwitchProcess, token: str) -> None:
    """Run the daemon a :class:`SwitchProcess` file describes (``panama switch`` and ``-m``)."""
    run_switch(settings.switch, str(settings.ready_file) if settings.ready_file else None, token=token)


if __name__ == "__main__":  # python -m panama.runtime.switch.daemon CONFIG.json (LocalCluster starts daemons so)
    sys.exit(main_from_file(sys.argv[1:], SwitchProcess, run_switch_process, "panama.runtime.switch.daemon"))
