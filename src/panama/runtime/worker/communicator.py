"""Worker library: one rank of one job doing PANAMA allreduce through the switch daemons.

``Communicator`` registers with the controller service (``POST /v1/jobs/{job}/register``,
a barrier that answers once every rank of the job has registered and the controller has
installed the job's trees on the daemons), then drives one
:class:`panama.core.transport.WorkerTransport` over a UDP socket: it sends what the
transport wants sent to the worker's first-hop (leaf) daemon, feeds it every result
datagram from that daemon, and fires its timer. Protocol decisions (packetisation, tree
round robin, windows, retransmissions) stay in the core.

Batching (:mod:`panama.runtime.net.offload`) and multicast results
(:mod:`panama.runtime.net.mcast`): docs/runtime.md, "Worker library"; ``stats()`` says which
paths a rank took (``offload``, ``io``, ``results_path``, ``multicast``).

A background thread heart-beats (:mod:`panama.runtime.worker.heartbeat`); the next wait fails at
once with the controller's reason when it ends the job (a rank stopped, a daemon died, a
size mismatch), names a peer that left cleanly, or says the cluster is gone. Every wait is
bounded by ``timeout_s`` and its error says what was missing.

Admission: a job the controller refuses (below its size threshold, no room) raises
:class:`JobRefused` with its reason; this runtime has no host-based fallback (docs/runtime.md).
"""

from __future__ import annotations

import logging
import secrets
import select
import socket
import time
from typing import Any, TypeVar

import numpy as np

from panama import environment
from panama.core import codec
from panama.core.errors import FieldError
from panama.core.transport import TransportError, WorkerTransport, same_vector
from panama.core.units import s as seconds_to_ps
from panama.runtime.control.client import HttpError, error_text
from panama.runtime.control.messages import (
    JOB_NAME_RE,
    JOB_NAME_RULE,
    HeartbeatReply,
    JobDetail,
    LeaveReply,
    ProgressBody,
    RegisterBody,
    RegisterReply,
    Reply,
    ResultsGroup,
    UnicastBody,
    UnicastReply,
)
from panama.runtime.control.tokens import resolve_job_token, resolve_token
from panama.runtime.net import mcast, mmsg, offload
from panama.runtime.net.udp import (
    DEFAULT_SOCKET_BUFFER_BYTES,
    RUNTIME_PAYLOAD_ELEMS,
    Address,
    PacketSocket,
    format_addr,
    now_ps,
    parse_addr,
)
from panama.runtime.settings import CommunicatorConfig
from panama.runtime.worker.arrays import as_float32_vector, as_output_vector
from panama.runtime.worker.diagnosis import job_probe_notes, local_facts
from panama.runtime.worker.heartbeat import Heartbeat
from panama.runtime.worker.link import ControllerLink
from panama.runtime.worker.results import FOREIGN_SOURCE, RECV_BATCH, receive_batch, receive_gro

__all__ = ["Communicator", "CommunicatorError", "FOREIGN_SOURCE", "JobRefused"]

log = logging.getLogger("panama.communicator")
R = TypeVar("R", bound=Reply)

HURRY_AFTER_S = 0.3  # a call slower than this makes the heartbeat report every 0.25 s
HEARTBEAT_DEADLINE_S = 5.0  # the controller's heartbeat_timeout_s when its reply names none


# The keyword defaults of Communicator are those of its settings model, declared there once.
_DEFAULTS = CommunicatorConfig()


class CommunicatorError(RuntimeError):
    """An allreduce (or the registration before it) could not complete; the message says why."""


class JobRefused(CommunicatorError):
    """The controller did not admit the job for in-network aggregation (below its size
    threshold, no accelerator room, one host...); ``reason`` is the controller's. Callers
    with a host-based path (the torch backend) fall back on this error."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class Communicator:
    """One rank of one job: ``allreduce(x)`` returns the elementwise sum over all ranks.

    ``controller``: ``"HOST:PORT"`` of ``panama controller serve``. ``job``: job name shared
    by the ranks; ``rank`` in ``[0, world_size)``. The options are the fields of
    :class:`~panama.runtime.settings.CommunicatorConfig` (declared, bounded and described
    there; :meth:`from_config` takes one whole): ``size_bytes`` (gradient size
    hint for admission; default: the first allreduce's size), ``timeout_s`` (bound of every
    wait), ``trees`` (number of aggregation trees to ask for; default: the controller's),
    ``payload_elems`` (floats per datagram, at most what the daemons hold),
    ``cc``/``cc_options`` (congestion control by name), ``drop_prob``/``seed`` (drop own
    outgoing datagrams, for tests), ``heartbeat_s``, RTO bounds in seconds, ``min_pto_s``
    (the floor of the tail-loss probe timeout, :mod:`panama.core.transport`; None: no
    probes), ``bind_host`` (the address daemons send results to), ``multicast``,
    ``offload`` (UDP GSO/GRO where they pay; ``$PANAMA_UDP_OFFLOAD=0`` still turns them off);
    a bad value raises :class:`~panama.settings.SettingsError` naming it. Besides them:
    ``token`` (the cluster's bearer token; default ``$PANAMA_TOKEN``), ``job_token`` (the
    run's, shared by its ranks; default ``$PANAMA_JOB_TOKEN``, else one per process:
    :func:`~panama.runtime.worker.link.process_job_token`) and ``connect``. After
    registration the job's requests (heartbeats, leave) carry the job token only.
    ``world_size=1`` returns a copy at once.
    Registration happens at construction when ``size_bytes`` (or ``connect=True``) is
    given, else at the first ``allreduce``.

    Works for float32 numpy arrays and CPU float32 torch tensors of any shape; the result
    has the input's shape and type and is bitwise identical on every rank. Not
    thread-safe: one allreduce at a time.
    """

    def __init__(
        self,
        controller: str,
        job: str,
        rank: int,
        world_size: int,
        *,
        size_bytes: int | None = _DEFAULTS.size_bytes,
        timeout_s: float = _DEFAULTS.timeout_s,
        trees: int | None = _DEFAULTS.trees,
        payload_elems: int | None = _DEFAULTS.payload_elems,
        cc: str = _DEFAULTS.cc,
        cc_options: dict | None = _DEFAULTS.cc_options,
        drop_prob: float = _DEFAULTS.drop_prob,
        seed: int = _DEFAULTS.seed,
        heartbeat_s: float = _DEFAULTS.heartbeat_s,
        initial_rto_s: float = _DEFAULTS.initial_rto_s,
        min_rto_s: float = _DEFAULTS.min_rto_s,
        max_rto_s: float = _DEFAULTS.max_rto_s,
        min_pto_s: float | None = _DEFAULTS.min_pto_s,
        connect: bool = False,
        bind_host: str = _DEFAULTS.bind_host,
        token: str | None = None,
        job_token: str | None = None,
        multicast: bool = _DEFAULTS.multicast,
        offload: bool = _DEFAULTS.offload,
    ):
        config = CommunicatorConfig(
            size_bytes=size_bytes,
            timeout_s=timeout_s,
            trees=trees,
            payload_elems=payload_elems,
            cc=cc,
            cc_options=cc_options,
            drop_prob=drop_prob,
            seed=seed,
            heartbeat_s=heartbeat_s,
            initial_rto_s=initial_rto_s,
            min_rto_s=min_rto_s,
            max_rto_s=max_rto_s,
            min_pto_s=min_pto_s,
            bind_host=bind_host,
            multicast=multicast,
            offload=offload,
        )
        self._setup(controller, job, rank, world_size, config, token, job_token)
        if (connect or config.size_bytes is not None) and world_size > 1:
            self.connect()

    @classmethod
    def from_config(
        cls,
        controller: str,
        job: str,
        rank: int,
        world_size: int,
        config: CommunicatorConfig | None = None,
        *,
        token: str | None = None,
        job_token: str | None = None,
        connect: bool = False,
    ) -> Communicator:
        """A communicator whose knobs are ``config`` (default: every default); registers at
        once when ``connect`` or ``config.size_bytes`` is given, as the constructor."""
        return cls(
            controller,
            job,
            rank,
            world_size,
            token=token,
            job_token=job_token,
            connect=connect,
            **dict(config or CommunicatorConfig()),
        )

    def _setup(
        self,
        controller: str,
        job: str,
        rank: int,
        world_size: int,
        config: CommunicatorConfig,
        token: str | None,
        job_token: str | None,
    ) -> None:
        """Identity checked, knobs taken from ``config``, the socket and receive buffers made."""
        if not isinstance(job, str) or not JOB_NAME_RE.match(job):
            raise FieldError("job", f"{job!r} is not a valid job name ({JOB_NAME_RULE})")
        if not isinstance(world_size, int) or world_size < 1:
            raise FieldError("world_size", f"must be a positive integer, got {world_size!r}")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise FieldError("rank", f"must be an integer in [0, {world_size}), got {rank!r}")
        self.config = config
        self.controller: Address = parse_addr(controller, field="controller")
        self.token = resolve_token(token)
        self.link = ControllerLink(self.controller, job, self.token, resolve_job_token(job_token))  # job requests
        self.incarnation = secrets.token_hex(8)  # this registration (a restarted rank replaces its stale self)
        self.job, self.rank, self.world_size = job, rank, world_size
        self.size_bytes = config.size_bytes
        self.timeout_s = config.timeout_s
        self.trees_requested = config.trees
        self.payload_elems_requested = config.payload_elems or RUNTIME_PAYLOAD_ELEMS
        self.drop_prob = config.drop_prob
        self._rng = np.random.default_rng(config.seed)
        self.sock = PacketSocket((config.bind_host, 0))
        self._gso = self._gro = False  # set by connect()
        self.addr = self.sock.addr
        self._recv_buf = bytearray(offload.RECV_BUFFER_BYTES)  # a datagram, or a GRO buffer of several
        self._recv_view = memoryview(self._recv_buf)
        self._recv_floats = codec.payload_view(self._recv_buf)  # decode slices payloads from it
        self._recv_f32 = np.frombuffer(self._recv_buf, dtype="<f4", count=len(self._recv_buf) // 4)
        self._recv_f32.flags.writeable = False  # segment k's payload: a slice from its offset
        self._rx: mmsg.Receiver | None = None  # the plain path's batch receiver (made at first use)
        self.transport: WorkerTransport | None = None
        self.registration: RegisterReply | None = None  # the controller's admission, typed
        self.plan: dict[str, Any] | None = None  # the same as JSON
        self.first_hop, self.first_hop_name = None, None  # Address, switch name: set by connect()
        self.job_id: int | None = None
        self.ignored: dict[str, int] = {}
        self.malformed: dict[str, int] = {}
        self.calls = 0
        self.dropped_sends = 0
        self.refused = 0  # ICMP port unreachable from the first hop (its socket is gone)
        self.gro_buffers = 0  # receives that returned several datagrams (GRO)
        self._stage: np.ndarray | None = None
        self._broken: str | None = None
        self._interrupted: str | None = None  # set by interrupt(), from any thread
        self._closed = False
        self._hb: Heartbeat | None = None
        self._in_call: tuple[int, int] | None = None  # (call index, elements) while an allreduce runs
        self._last: int | None = None  # elements of the last completed allreduce
        self.refused_at = 0.0  # when the first hop last answered ICMP port unreachable
        # None: this rank can join a loopback group (probed now); else why it cannot.
        multicast = config.multicast
        self.mcast_reason = mcast.probe_join(config.bind_host) if multicast else "multicast=False (communicator option)"
        self._group: mcast.GroupReceiver | None = None

    # ------------------------------------------------------------------ registration
    def connect(self, size_bytes: int | None = None) -> dict[str, Any]:
        """Register with the controller and wait (up to ``timeout_s``) for the job's trees."""
        if self.plan is not None:
            return self.plan
        self._check_open()
        if size_bytes is not None:
            self.size_bytes = size_bytes
        reply = self._register()
        if reply.job_id is None or reply.first_hop is None or reply.key is None or reply.payload_elems is None:
            raise CommunicatorError(
                f"job {self.job} rank {self.rank}: the controller admitted the job without a job_id, first_hop, key "
                f"or payload_elems: {reply.to_json()}"
            )
        self.registration, self.plan = reply, reply.to_json()
        self.job_id = reply.job_id
        self.first_hop = parse_addr(reply.first_hop.udp, field="first_hop")
        self.first_hop_name = reply.first_hop.switch
        try:
            self.sock.connect(self.first_hop)
        except OSError as exc:  # e.g. EINVAL: bound to loopback, first hop on another machine
            raise CommunicatorError(
                f"rank {self.rank}: cannot send from {format_addr(self.addr)} to first-hop switch "
                f"{self.first_hop_name} ({format_addr(self.first_hop)}): {exc.strerror or exc}; bind an "
                "address that switch can reach (bind_host=, or $PANAMA_BIND_HOST)"
            ) from exc
        # GSO sends and GRO receives where 2+ datagrams fit one send and the kernel has them.
        datagram_bytes = codec.datagram_size(reply.payload_elems)
        if self.config.offload and offload.env_allows() and offload.segments_per_send(datagram_bytes) >= 2:
            found = self.sock.enable_offload(gro=True)
            self._gso, self._gro = found.gso, found.gro
        self.key = int(reply.key, 16)
        self.sock.set_key(self.key)
        self._keys = {self.job_id: self.key}
        self.transport = self._transport(reply)
        self._join_group(reply.multicast)
        # Beats at least 4 per controller deadline, each attempt up to half of it (heartbeat.py)
        deadline_s = reply.heartbeat_timeout_s or HEARTBEAT_DEADLINE_S
        attempt_s = max(1.0, deadline_s / 2)
        self._hb = Heartbeat(
            lambda body: self.link.call("POST", "heartbeat", body, HeartbeatReply, attempt_s),
            self._progress,
            min(self.config.heartbeat_s, deadline_s / 4),
            f"panama-hb-{self.job}-{self.rank}",
            f"job {self.job} rank {self.rank}",
            f"job {self.job} (job_id {self.job_id})",
        )
        self._hb.start()
        log.info(
            "job %s rank %d: job_id %d, trees %s, first hop %s (%s), payload %d floats",
            self.job,
            self.rank,
            self.job_id,
            [t.tree_id for t in reply.trees],
            self.first_hop_name,
            format_addr(self.first_hop),
            reply.payload_elems,
        )
        return self.plan

    def _register(self) -> RegisterReply:
        """``POST register`` (retried while the controller is at its connection limit) and
        its admitted plan; CommunicatorError or JobRefused otherwise."""

        def body(wait_s: float) -> RegisterBody:
            return RegisterBody(
                job_token=self.link.job_token,
                rank=self.rank,
                world_size=self.world_size,
                size_bytes=int(self.size_bytes or 0),
                udp=format_addr(self.addr),
                trees=self.trees_requested,
                payload_elems=self.payload_elems_requested,
                wait_s=wait_s,
                incarnation=self.incarnation,
                multicast=self.mcast_reason is None,
            )

        try:
            reply = self.link.register(body, self.timeout_s)
        except HttpError as exc:
            if exc.status is None:
                raise CommunicatorError(f"job {self.job} rank {self.rank}: registration failed: {exc}") from None
            refused = exc.status in (401, 403)
            hint = f" (pass token= or set {environment.TOKEN} to the cluster's token)" if refused else ""
            raise CommunicatorError(
                f"job {self.job} rank {self.rank}: controller refused registration (HTTP {exc.status}): "
                f"{error_text(exc.body) if exc.status != 200 else exc}{hint}"
            ) from None
        if not reply.admitted:
            reason = reply.reason
            raise JobRefused(
                f"job {self.job} rank {self.rank}: not admitted for in-network aggregation: {reason}; "
                "a Communicator has no host-based fallback (lower the controller's --threshold-bytes, or use "
                'the torch backend, which falls back to gloo: init_process_group("panama"))',
                reason,
            )
        return reply

    def _transport(self, plan: RegisterReply) -> WorkerTransport:
        """The core transport of this rank for the admitted ``plan``, with this communicator's knobs."""
        cfg = self.config
        assert self.job_id is not None and plan.payload_elems is not None
        return WorkerTransport(
            self.job_id,
            self.rank,
            [t.tree_id for t in plan.trees],
            payload_elems=plan.payload_elems,
            cwnd_caps=[t.cwnd_cap for t in plan.trees],
            cc=cfg.cc,
            cc_options=cfg.cc_options,
            initial_rto_ps=seconds_to_ps(cfg.initial_rto_s),
            min_rto_ps=seconds_to_ps(cfg.min_rto_s),
            max_rto_ps=seconds_to_ps(cfg.max_rto_s),
            min_pto_ps=None if cfg.min_pto_s is None else seconds_to_ps(cfg.min_pto_s),
            max_retries=1_000_000,  # timeout_s bounds every call instead
        )

    def _join_group(self, info: ResultsGroup | None) -> None:
        """Join the results group the plan names for this rank, if any (else keep the reason)."""
        text = info.group if info is not None else None
        if text is None:
            if self.mcast_reason is None:
                self.mcast_reason = str(info.reason if info is not None else "no group in the plan")
            return
        try:
            group = mcast.parse_group(text, "multicast.group")
            self._group = mcast.GroupReceiver(group, RECV_BATCH, DEFAULT_SOCKET_BUFFER_BYTES, offload.RECV_BUFFER_BYTES)
        except (OSError, FieldError) as exc:
            self._unicast_after_all(f"could not join group {text}: {exc}")
            return
        self.mcast_reason = None

    def _unicast_after_all(self, why: str) -> None:
        """The probe joined but the plan's group could not be: ask the controller to have
        the leaf send this job's results by unicast (else they would reach this rank only
        as answers to its retransmissions); CommunicatorError when it cannot."""
        body = UnicastBody(rank=self.rank, job_id=self.job_id, reason=why[:300])
        try:
            self.link.call("POST", "unicast", body, UnicastReply, 30.0)
        except HttpError as exc:
            if exc.status is None:
                raise CommunicatorError(
                    f"job {self.job} rank {self.rank}: {why}, and asking the controller for unicast results failed: "
                    f"{exc}"
                ) from None
            raise CommunicatorError(
                f"job {self.job} rank {self.rank}: {why}, and the controller could not switch its leaf to unicast "
                f"(HTTP {exc.status}): {error_text(exc.body)}"
            ) from None
        self.mcast_reason = f"{why}; the leaf sends results by unicast"
        log.warning("job %s rank %d: %s", self.job, self.rank, self.mcast_reason)

    def _progress(self) -> ProgressBody:
        """What a heartbeat reports: calls completed and, during one, its index and size."""
        current = self._in_call
        call, elems = current if current is not None else (None, None)
        return ProgressBody(
            rank=self.rank, job_id=self.job_id, calls=self.calls, last=self._last, call=call, elems=elems
        )

    @property
    def _failure(self) -> str | None:
        """Why this rank's current call cannot complete, as far as the heartbeat knows, else None."""
        hb, rank = self._hb, self.rank
        return hb and hb.stop_reason(rank, self.calls, self.refused_at, self.first_hop_name)

    # ------------------------------------------------------------------ allreduce
    def allreduce(self, x: Any, out: Any = None) -> Any:
        """Elementwise sum of ``x`` over every rank (float32 numpy array or CPU torch tensor).

        Returns a new array/tensor shaped like ``x``, or, with ``out`` (a contiguous
        writable float32 array/tensor of ``x``'s size, ``x`` itself for in place), writes
        the sum there and returns ``out``. Reusing ``out`` across calls avoids faulting in
        a fresh result vector every call (docs/runtime.md).
        """
        self._check_open()
        arr, wrap = as_float32_vector(x)
        out_flat = None if out is None else as_output_vector(out, arr.size)
        if self.world_size == 1:  # nothing to aggregate: no controller, no network
            self.calls += 1
            if out_flat is None:
                return wrap(arr.copy())
            out_flat[:] = arr
            return out
        if self.plan is None:
            self.connect(arr.nbytes if self.size_bytes is None else None)
        if self._broken is not None:
            raise CommunicatorError(f"job {self.job} rank {self.rank}: communicator unusable after: {self._broken}")
        if out_flat is not None and np.may_share_memory(out_flat, arr) and not same_vector(out_flat, arr):
            # Partly overlapping: a result could overwrite a contribution the transport has
            # yet to send, so it sends from a staging copy (one buffer reused across calls).
            # In place proper (out is x) needs none: see WorkerTransport.start.
            if self._stage is None or self._stage.size < arr.size:
                self._stage = np.empty(arr.size, dtype=np.float32)
            stage = self._stage[: arr.size]
            stage[:] = arr
            arr = stage
        try:
            result = self._run(arr, out_flat)
        except BaseException as exc:  # the transport is mid-generation: no further calls
            self._broken = str(exc) or type(exc).__name__
            raise
        self._last, self.calls = arr.size, self.calls + 1
        return wrap(result) if out is None else out

    def _run(self, flat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        tr = self.transport
        assert tr is not None and self.first_hop is not None
        raw = self.sock.sock
        raw.setblocking(True)
        leaf = self.first_hop
        view = self._recv_view
        poller = select.poll()
        poller.register(raw, select.POLLIN)
        gro = self._gro
        cmsg_space = offload.RECV_CMSG_SPACE if gro else socket.CMSG_SPACE(4)
        f32 = self._recv_f32
        deadline = time.monotonic() + self.timeout_s
        rx = None if gro else self._receiver()
        grp = self._group
        if grp is not None:
            poller.register(grp.sock, select.POLLIN)
        failure = self._failure
        if failure is not None:
            raise CommunicatorError(f"job {self.job} rank {self.rank}: {failure}")
        decode, iov = codec.decode, [view]
        self._in_call = (self.calls, int(flat.size))
        hurry_at = time.monotonic() + HURRY_AFTER_S
        try:
            return self._loop(tr, flat, out, deadline, hurry_at, poller, rx, grp, leaf, iov, cmsg_space, f32, decode)
        finally:
            self._in_call = None
            if self._hb is not None:
                self._hb.hurry(False)

    def _loop(self, tr, flat, out, deadline, hurry_at, poller, rx, grp, leaf, iov, cmsg_space, f32, decode):
        """The send/receive loop of one allreduce (:meth:`_run` prepares its arguments)."""
        view, keys, recv, hb = iov[0], self._keys, self.sock.sock.recvmsg_into, self._hb
        floats = self._recv_floats
        tr.start(now_ps(), flat, out=out)
        while not tr.done:
            if self._interrupted is not None:  # interrupt() from another thread: end within one poll
                raise CommunicatorError(f"job {self.job} rank {self.rank}: {self._interrupted}")
            now = now_ps()
            self._send(tr.poll(now))
            # Drain what has arrived; wait (bounded) only when nothing has.
            if rx is not None:
                got = receive_batch(self, rx, self._rx_views, self._rx_floats, tr, leaf, decode, keys)
            else:
                got = receive_gro(self, tr, leaf, recv, iov, cmsg_space, view, f32, floats, decode, keys)
            if grp is not None and not tr.done:
                n = receive_batch(self, grp.rx, grp.views, grp.floats, tr, leaf, decode, keys)
                grp.datagrams += n
                got += n
            if tr.done:
                break
            now = now_ps()
            timer = tr.timer()
            if timer is not None and timer <= now:
                try:
                    tr.handle_timer(now)
                except TransportError as exc:  # pragma: no cover - max_retries is effectively off
                    raise CommunicatorError(self._timeout_message(str(exc))) from None
                continue
            if hb is not None and hb.alert:  # the controller said something (cheap check first)
                failure = self._failure
                if failure is not None:
                    raise CommunicatorError(f"job {self.job} rank {self.rank}: {failure}")
            t = time.monotonic()
            left = deadline - t
            if t > hurry_at and hb is not None:
                hurry_at = deadline  # once: a slow call makes the heartbeat report often (leave, size mismatch)
                hb.hurry()
            if left <= 0:
                raise CommunicatorError(
                    self._timeout_message(f"allreduce did not finish within timeout_s={self.timeout_s:g}")
                )
            if got == 0:
                wait_s = min(left, 0.05)
                if timer is not None:
                    wait_s = min(wait_s, max(0.0, (timer - now) / 1e12))
                poller.poll(max(1, int(wait_s * 1000)))
        # The closing acks: the switches free what they kept for this call at once.
        self._send(tr.poll(now_ps()))
        return tr.result()

    def _send(self, packets: list) -> None:
        """Send what the transport wants sent to the first hop: GSO batches (copied at once)
        where the socket has GSO, else one :meth:`PacketSocket.send_each` (one ``sendmmsg``
        per 64 datagrams where compiled, no copy). ``drop_prob`` drops some first."""
        if not packets:
            return
        if self.drop_prob:
            rng = self._rng
            kept = []
            for pkt in packets:
                if rng.random() < self.drop_prob:
                    self.dropped_sends += 1
                else:
                    kept.append(pkt)
            packets = kept
        sock, leaf = self.sock, self.first_hop
        if self._gso:
            for pkt in packets:
                sock.stage(pkt, leaf, pkt.ecn)  # copied now; sent below in GSO batches
            sock.flush()
        elif packets:
            sock.send_each(packets, leaf)

    def _receiver(self) -> mmsg.Receiver:
        """The batch receiver of the plain path (one datagram per buffer), made once."""
        if self._rx is None:
            bufs = [bytearray(offload.RECV_BUFFER_BYTES) for _ in range(RECV_BATCH)]
            self._rx_views = [memoryview(b) for b in bufs]
            self._rx_floats = [codec.payload_view(b) for b in bufs]
            self._rx = mmsg.Receiver(self.sock.sock, bufs)
        return self._rx

    def _timeout_message(self, what: str) -> str:
        msg = local_facts(self, what)
        if self._failure is not None:
            return f"{msg}; {self._failure}"
        try:
            detail = self.link.call("GET", "?probe=1", None, JobDetail, 5.0)
        except HttpError as exc:
            if exc.status is None:
                return f"{msg}; controller unreachable: {exc}"
            return f"{msg}; controller: {error_text(exc.body)}"
        return f"{msg}; {'; '.join(job_probe_notes(detail.to_json(), self.job_id))}"

    # ------------------------------------------------------------------ lifecycle
    def stats(self) -> dict[str, Any]:
        """Transport counters plus what the communicator itself ignored."""
        base = dict(self.transport.stats) if self.transport is not None else {}
        base.update(
            calls=self.calls,
            ignored_by_communicator=dict(self.ignored),
            malformed=dict(self.malformed),
            dropped_sends=self.dropped_sends,
            refused=self.refused,
            send_errors=self.sock.send_errors,
            offload={**self.sock.offload.as_dict(), "gso_sends": self.sock.gso_sends, "gro_buffers": self.gro_buffers},
            io="gso/gro" if self._gro else mmsg.IMPLEMENTATION,
            results_path="multicast" if self._group is not None else "unicast",
            multicast={
                "group": self._group.text() if self._group is not None else None,
                "datagrams": self._group.datagrams if self._group is not None else 0,
                "reason": self.mcast_reason,
            },
        )
        return base

    def _check_open(self) -> None:
        if self._closed:
            raise CommunicatorError(f"job {self.job} rank {self.rank}: communicator is closed")
        if self._interrupted is not None:
            raise CommunicatorError(f"job {self.job} rank {self.rank}: {self._interrupted}")

    def interrupt(self, reason: str) -> None:
        """Make the allreduce under way in another thread end within one poll (50 ms) with
        :class:`CommunicatorError` naming ``reason``, and every later call fail the same way;
        :meth:`close` then leaves with ``reason`` as the rank's error, so the controller
        fails the job saying why instead of counting a clean leave. Safe from any thread
        (one attribute store); the owner still calls :meth:`close`. ``reason`` should start
        with what happened, e.g. ``"interrupted (KeyboardInterrupt)"``."""
        if self._interrupted is None:
            self._interrupted = reason

    def close(self) -> None:
        """Leave the job (the controller frees it once every rank left) and release the socket."""
        if self._closed:
            return
        self._closed = True
        if self._hb is not None:
            self._hb.stop()
        if self.plan is not None:
            # calls: the peers' allreduces up to this many can still complete (they fail after it)
            why = self._interrupted or self._broken
            # an interrupted or failed rank (error) does not make the job "completed"
            error = why[:500] if why is not None else None
            body = ProgressBody(rank=self.rank, job_id=self.job_id, calls=self.calls, last=self._last, error=error)
            try:
                self.link.call("POST", "leave", body, LeaveReply, 2.0)
            except HttpError as exc:
                log.warning("leave failed: %s", exc)
        self.sock.close()
        if self._group is not None:
            self._group.close()

    @classmethod
    def from_env(cls, **overrides: Any) -> Communicator:
        """A communicator for this process from the environment: ``$PANAMA_CONTROLLER``,
        ``$PANAMA_TOKEN``, ``$PANAMA_JOB`` (else from ``$TORCHELASTIC_RUN_ID``), ``$RANK``,
        ``$WORLD_SIZE``, ``$PANAMA_TIMEOUT_S``, ``$PANAMA_SIZE_BYTES`` (see
        :mod:`panama.runtime.worker.env`); keyword arguments override them. A missing or malformed
        variable raises :class:`panama.runtime.worker.env.EnvError` naming it."""
        from panama.runtime.worker.env import communicator_kwargs_from_env

        return cls(**communicator_kwargs_from_env(**overrides))

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not self._closed:
                if self._hb is not None:
                    self._hb.stop(0.0)
                for part in (self.sock, self._group):
                    if part is not None:
                        part.close()
        except Exception:
            pass
