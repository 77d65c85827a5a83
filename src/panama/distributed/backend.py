"""The ``panama`` torch.distributed backend: all_reduce through PANAMA switch daemons.

``import panama.distributed`` registers it (``torch.distributed.Backend.register_backend``,
devices ``cpu`` and ``cuda``). Each process group is a :class:`PanamaProcessGroup`, a Python subclass of torch's
``ProcessGroup`` (the same kind PyTorch's own tests run DDP on), holding:

- one :class:`panama.Communicator`: one PANAMA job per group, named by
  :func:`panama.runtime.worker.env.job_name` (torchrun run id, restart count, a nonce drawn
  by the group's rank 0 for this run, the torch group name); it registers with the
  controller at the group's first PANAMA all_reduce;
- one inner gloo group (``ProcessGroupGloo`` on the same store, prefix ``panama-gloo/``)
  for every operation PANAMA does not aggregate;
- one worker thread. Every collective is queued to it and returns at once with a work
  object whose future completes when the thread has run it, so DDP's gradient buckets
  are reduced while backward goes on. The thread runs a group's collectives one at a
  time in the order they were issued (the order every rank issues them), whichever path
  each takes, so a broadcast issued after an all_reduce sees its result.

Which path (decided per call from the dtype, device and op, identical on every rank):

| operation | path |
|---|---|
| ``all_reduce`` SUM / AVG, float32 CPU tensor | PANAMA (AVG: the sum divided by the group size) |
| ``all_reduce`` SUM / AVG, float32 CUDA tensor | PANAMA, staged through pinned host memory (below) |
| ``all_reduce`` other ops or dtypes | gloo (AVG: gloo SUM, then divided; integer AVG refused) |
| every other collective (``broadcast``, ``all_gather[_into_tensor]``, ``gather``, ``scatter``, | gloo, through |
| ``reduce``, ``reduce_scatter[_tensor]``, ``all_to_all[_single]``, ``barrier``, ...) | the worker thread |
| ``send``, ``recv``, ``recv_anysource`` | gloo directly (not queued behind pending collectives) |

CUDA tensors. gloo handles those of the operations it serves itself (it stages them
through host memory); the worker thread runs its call with the caller's current stream
(captured at the call) as its current stream. A float32 SUM/AVG all_reduce of CUDA tensors
is staged by :class:`panama.distributed.staging.PinnedStaging`: copied into a reused
pinned host buffer on the caller's current stream (at the call, so DDP's backward goes on
while earlier buckets are summed); the worker thread waits for that copy's event only,
sums the buffer through the switches, and queues the copy back on the same stream. Every
collective with a CUDA tensor returns a work whose future is a
``torch.futures.Future(devices=[device])`` completed on that stream: ``wait()``, DDP's
reducer and ``then`` callbacks make their current stream wait for the result, never the
host for the whole device. No GPU is needed to test this: the device operations are a
:class:`~panama.distributed.staging.DeviceApi` (``_device_apis``), replaced in the
tests by a stream model on CPU tensors.

Discovery (at group creation): the default group's rank 0 asks the runtime
(:func:`panama.runtime.cluster.find_or_start_cluster`: ``$PANAMA_CONTROLLER`` + ``$PANAMA_TOKEN``,
on this machine or another, else a one-rack :class:`LocalCluster` it starts for the world)
and publishes the controller's address and token through the c10d store; the other ranks
wait for them (bounded by the group's timeout). Subgroups reuse the default group's
cluster. Each rank's communicator is built from one
:class:`~panama.runtime.settings.CommunicatorConfig`
(:func:`panama.runtime.worker.env.communicator_config`: its UDP socket binds
``$PANAMA_BIND_HOST``, else the address of its route to the controller, docs/several-machines.md;
every wait is bounded by ``$PANAMA_TIMEOUT_S``, else the config's default, lowered to the
group's timeout when that is shorter).
The local cluster is stopped when the default group is destroyed (after every rank has
closed its communicator, or after a bounded wait) or when rank 0 exits.

Ctrl-C. A rank whose main thread gets ``KeyboardInterrupt`` while it waits for a
collective (``work.wait()``, a synchronous ``all_reduce``), or that destroys its group while
handling one, interrupts its PANAMA job: the all_reduce under way on the worker thread ends
within one poll of the communicator (50 ms), the group is broken, and the rank leaves the
job at once with the error ``interrupted (KeyboardInterrupt) ...`` (the controller fails
the job naming it; the other ranks' calls fail within their heartbeat, not at a timeout);
``destroy_process_group`` then waits at most ``INTERRUPT_GRACE_S`` for the worker thread,
and rank 0 does not wait for the other ranks before stopping a local cluster it owns. A
collective that gloo runs, and the wait inside DDP's C++ reducer (where Python cannot
take the signal), end as they would without the interrupt (bounded by the group timeout).

Refusal: a job the controller does not admit (below its aggregation threshold, no
accelerator memory) is reduced by gloo instead, with one warning line on the group's
rank 0 and the counter ``fallback_calls``. A failure once the job runs (a daemon died, a
rank stopped, a timeout) fails that collective with :class:`PanamaFabricError` on every
rank, and every later collective of the group with the same error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllreduceOptions,
    PrefixStore,
    ProcessGroupGloo,
    ReduceOp,
)

from panama.distributed.staging import CudaApi, DeviceApi, PinnedStaging, StagingError
from panama.distributed.work import FutureWork, OnDevice, backward_box, run_item, tensors_in
from panama.runtime.cluster import FoundCluster, find_or_start_cluster
from panama.runtime.control.client import HttpError, check_access
from panama.runtime.control.tokens import new_token
from panama.runtime.worker import env
from panama.runtime.worker.communicator import Communicator, CommunicatorError, JobRefused

BACKEND_NAME = "panama"
log = logging.getLogger("panama.distributed")

SETUP_KEY = "panama/setup"
CLOSED_KEY = "panama/closed"
# Rank 0 waits at most this long for the other ranks to close before stopping its cluster.
CLOSE_WAIT_S = 30.0
# Upper bound of the wait for rank 0's cluster address (also bounded by the group's timeout).
SETUP_WAIT_S = 120.0
# After Ctrl-C: how long the rank waits for its worker thread to leave the interrupted collective.
INTERRUPT_GRACE_S = 2.0


class PanamaDistributedError(RuntimeError):
    """The ``panama`` backend could not set up or run a collective; the message says why."""


class PanamaFabricError(PanamaDistributedError, CommunicatorError):
    """In-network aggregation failed for a running job (daemon, rank or controller gone, timeout)."""


@dataclass
class GroupStats:
    """Counters of one group on one rank (``panama.distributed.stats(group)``)."""

    job: str
    mode: str = "pending"  # pending (not registered yet), panama, gloo (refused), broken
    panama_calls: int = 0
    panama_elems: int = 0
    panama_seconds: float = 0.0
    fallback_calls: int = 0
    fallback_reason: str | None = None
    gloo_calls: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    staged_calls: int = 0  # all_reduces of device (CUDA) tensors staged through pinned host memory
    staging_seconds: float = 0.0  # of which the worker thread waited for copies into host memory
    pinned_bytes: int = 0  # pinned host memory the staging buffers hold
    pinned_allocations: int = 0  # staging buffers ever allocated (flat once the buffers fit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "mode": self.mode,
            "panama_calls": self.panama_calls,
            "panama_elems": self.panama_elems,
            "panama_seconds": self.panama_seconds,
            "fallback_calls": self.fallback_calls,
            "fallback_reason": self.fallback_reason,
            "gloo_calls": dict(self.gloo_calls),
            "error": self.error,
            "staged_calls": self.staged_calls,
            "staging_seconds": self.staging_seconds,
            "pinned_bytes": self.pinned_bytes,
            "pinned_allocations": self.pinned_allocations,
        }


_default_cluster: FoundCluster | None = None
_groups: weakref.WeakSet = weakref.WeakSet()  # this process's live panama groups
_lock = threading.Lock()


class PanamaProcessGroup(dist.ProcessGroup):
    """One torch process group on one rank (see the module docstring)."""

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: timedelta,
        group_id: str,
        is_default: bool,
    ):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._store = store
        self._timeout = timeout
        self._group_id = str(group_id)
        self._is_default = is_default
        self._closed = False
        self._broken: PanamaFabricError | None = None
        self._interrupted: str | None = None  # why the rank interrupted its collectives (Ctrl-C)
        self._idle = threading.Event()  # set while the worker thread runs no collective
        self._idle.set()
        self._cluster: FoundCluster | None = None
        self._comm: Communicator | None = None
        self._warned = False
        # Device types whose tensors go through a stream-aware path (tests put a stream model here).
        self._device_apis: dict[str, DeviceApi] = {"cuda": CudaApi()}
        self._stagings: dict[str, PinnedStaging] = {}
        self._gloo = ProcessGroupGloo(PrefixStore("panama-gloo/", store), rank, size, timeout)
        nonce = self._setup()
        self.stats = GroupStats(job=env.job_name(self._group_id, nonce))
        self._size_hint: int | None = None  # $PANAMA_SIZE_BYTES: announced at the first PANAMA all_reduce
        self._timeout_s = env.timeout_s(timeout.total_seconds())  # the staging's waits follow the same rule
        if size > 1:
            assert self._cluster is not None
            config = env.communicator_config(self._cluster.controller, limit_s=timeout.total_seconds())
            self._size_hint, self._timeout_s = config.size_bytes, config.timeout_s
            self._comm = Communicator.from_config(  # registers at the first all_reduce, on the worker thread
                self._cluster.controller,
                self.stats.job,
                rank,
                size,
                config.replace(size_bytes=None),
                token=self._cluster.token,
                job_token=self._job_token,
            )
            try:  # a dead controller or a wrong token fails init_process_group, not the first backward()
                check_access(self._comm.controller, self._comm.token)
            except HttpError as exc:
                self._comm.close()
                raise PanamaDistributedError(f"panama backend: group {self._group_id} rank {rank}: {exc}") from None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"panama-pg-{self._group_id}-r{rank}", daemon=True)
        self._thread.start()
        _groups.add(self)

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> str:
        """Find (or, on rank 0, start) the cluster; agree on a nonce. Returns the nonce."""
        global _default_cluster
        self._cluster_scope = False
        self._job_token: str | None = None
        if self._size == 1:
            return secrets.token_hex(4)
        if self._rank == 0:
            nonce = secrets.token_hex(4)
            try:
                cluster = self._find_or_start_cluster()
            except Exception as exc:
                self._store.set(SETUP_KEY, json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
                raise PanamaDistributedError(f"panama backend: rank 0 could not set up PANAMA: {exc}") from exc
            self._job_token = new_token()  # the group's run: its ranks share this job token
            self._store.set(
                SETUP_KEY,
                json.dumps(
                    {"controller": cluster.controller, "token": cluster.token, "nonce": nonce, "job": self._job_token}
                ),
            )
        else:
            info = self._wait_setup()
            if "error" in info:
                raise PanamaDistributedError(f"panama backend: rank 0 could not set up PANAMA: {info['error']}")
            nonce = info["nonce"]
            self._job_token = info["job"]
            cluster = self._known_cluster() or FoundCluster(info["controller"], info.get("token"))
        self._cluster = cluster
        # Whether this group found (or started) the cluster itself rather than borrowing the
        # default group's: it then closes it (a subgroup when the default group is not panama).
        self._cluster_scope = self._is_default or cluster is not _default_cluster
        if self._is_default:
            with _lock:
                _default_cluster = cluster
        return nonce

    def _known_cluster(self) -> FoundCluster | None:
        if not self._is_default and _default_cluster is not None:
            return _default_cluster
        return None

    def _find_or_start_cluster(self) -> FoundCluster:
        known = self._known_cluster()
        if known is not None:
            return known
        found = find_or_start_cluster(self._size)
        if found.local is not None:
            log.info(
                "panama backend: started a local cluster for %d ranks, controller %s", self._size, found.controller
            )
        return found

    def _wait_setup(self) -> dict[str, Any]:
        wait_s = min(SETUP_WAIT_S, self._timeout.total_seconds())
        try:
            self._store.wait([SETUP_KEY], timedelta(seconds=wait_s))
        except Exception as exc:
            raise PanamaDistributedError(
                f"panama backend: group {self._group_id} rank {self._rank} waited {wait_s:g} s for rank 0 to publish "
                f"the PANAMA controller address (store key {SETUP_KEY!r}); is rank 0 alive? ({exc})"
            ) from None
        return json.loads(self._store.get(SETUP_KEY).decode())

    # ------------------------------------------------------------------ the worker thread
    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, fut, box, on = item
            self._idle.clear()
            try:  # a device collective runs, and its future completes, on the caller's stream
                with contextlib.nullcontext() if on is None else on.api.use_stream(on.stream):
                    run_item(fn, fut, box)
            finally:
                self._idle.set()

    def _submit(self, fn: Callable[[], Any], value_on_error: Any = None, on: OnDevice | None = None) -> Any:
        self._check_open()
        fut: torch.futures.Future = torch.futures.Future() if on is None else on.api.future(on.device)
        box = backward_box(fut, value_on_error)
        self._queue.put((fn, fut, box, on))
        return FutureWork(fut, on_interrupt=self.interrupt)

    def interrupt(self, exc: BaseException) -> None:
        """The rank was interrupted (``exc``: KeyboardInterrupt) while waiting for a collective:
        end the PANAMA all_reduce under way (within one poll of the communicator), break the
        group, and leave the job now with an error saying "interrupted" (module docstring,
        "Ctrl-C"). Idempotent; called from the waiting (main) thread."""
        if self._interrupted is not None or self._closed:
            return
        why = f"interrupted ({type(exc).__name__}) on rank {self._rank}"
        self._interrupted = why
        if self._broken is None:
            self._broken = PanamaFabricError(
                f"panama backend: group {self._group_id} rank {self._rank} (job {self.stats.job}): {why}"
            )
            self.stats.mode, self.stats.error = "broken", str(self._broken)
        comm = self._comm
        if comm is None:
            return
        comm.interrupt(why)
        # Once the worker thread is out of the communicator, leave at once: the script may
        # never destroy the group. (Still inside, e.g. a registration: the leave waits for shutdown.)
        if self._idle.wait(INTERRUPT_GRACE_S):
            comm.close()

    def _check_open(self) -> None:
        if self._closed:
            raise PanamaDistributedError(f"panama backend: group {self._group_id} was destroyed")

    def _on_device(self, args: Any) -> OnDevice | None:
        """The first tensor in ``args`` on a device with a stream-aware path, with the current stream."""
        for t in tensors_in(args):
            api = self._device_apis.get(t.device.type)
            if api is not None:
                return OnDevice(api, t.device, api.current_stream(t.device))
        return None

    def _gloo_call(self, name: str, *args: Any, value_on_error: Any = None) -> Any:
        """Run ``name`` on the inner gloo group from the worker thread, in issue order."""

        def run() -> Any:
            self._check_broken()
            self.stats.gloo_calls[name] = self.stats.gloo_calls.get(name, 0) + 1
            getattr(self._gloo, name)(*args).wait()  # not every gloo work has a future
            return args[0] if args else None  # the output argument, as torch's works return

        return self._submit(run, value_on_error, self._on_device(args))

    def _check_broken(self) -> None:
        if self._broken is not None:
            raise PanamaFabricError(str(self._broken))

    # ------------------------------------------------------------------ all_reduce
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        is_sum, is_avg = op == ReduceOp.SUM, op == ReduceOp.AVG
        if is_avg and any(not (t.is_floating_point() or t.is_complex()) for t in tensors):
            raise ValueError(
                "panama backend: all_reduce AVG needs floating-point tensors (gloo has no AVG to fall back on)"
            )
        for t in tensors:
            if t.device.type != "cpu" and t.device.type not in self._device_apis:
                raise PanamaDistributedError(
                    f"panama backend: CPU and CUDA tensors only, got one on {t.device} (torch replaces the whole "
                    "group by a Python process group, so 'cpu:panama,xpu:...' does not reach another backend; use a "
                    "separate group)"
                )
        devices = sorted({str(t.device) for t in tensors})
        if len(devices) > 1:
            raise PanamaDistributedError(f"panama backend: one all_reduce takes tensors of one device, got {devices}")
        on = self._on_device(tensors)
        float_sum = (is_sum or is_avg) and all(t.dtype == torch.float32 for t in tensors)
        if on is not None and float_sum:
            return self._staged_allreduce(on, tensors, avg=is_avg)
        if not (float_sum and self._size > 1):
            if is_avg:
                return self._submit(lambda: self._gloo_allreduce(tensors, avg=True), tensors, on)
            return self._gloo_call(
                "allreduce", tensors, opts if opts is not None else AllreduceOptions(), value_on_error=tensors
            )
        return self._submit(lambda: self._panama_allreduce(tensors, avg=is_avg), tensors)

    def _staged_allreduce(self, on: OnDevice, tensors: list[torch.Tensor], avg: bool) -> Any:
        """Float32 SUM/AVG of device tensors through pinned host memory (module docstring, "CUDA tensors")."""
        self._check_open()  # nothing is staged for a destroyed group
        staging = self._stagings.get(on.device.type)
        if staging is None:
            staging = self._stagings[on.device.type] = PinnedStaging(on.api)
        staged = staging.copy_in(tensors)  # now, on the caller's current stream (on.stream)

        def run() -> list[torch.Tensor]:
            try:
                self._check_broken()
                start = time.perf_counter()
                try:
                    staging.wait_copied_in(staged, self._timeout_s)
                except StagingError as exc:  # this rank cannot contribute: the group's sums would shift
                    self._fail(exc, f"all_reduce of {staged.numel} float32 on {staged.device}")
                self.stats.staging_seconds += time.perf_counter() - start
                self._host_allreduce(staged.views, avg)
            except BaseException:
                staging.abandon(staged)
                raise
            staging.copy_out(staged)  # on on.stream, which is current here (_serve)
            self.stats.staged_calls += 1
            self.stats.pinned_bytes = sum(s.pinned_bytes for s in self._stagings.values())
            self.stats.pinned_allocations = sum(s.allocations for s in self._stagings.values())
            return tensors

        return self._submit(run, tensors, on)

    def _host_allreduce(self, tensors: list[torch.Tensor], avg: bool) -> list[torch.Tensor]:
        """Float32 SUM/AVG of host tensors, run on the worker thread: the path a CPU tensor takes."""
        if self._size > 1:
            return self._panama_allreduce(tensors, avg)
        return self._gloo_allreduce(tensors, avg)

    def _gloo_allreduce(self, tensors: list[torch.Tensor], avg: bool) -> list[torch.Tensor]:
        self._check_broken()
        self.stats.gloo_calls["allreduce"] = self.stats.gloo_calls.get("allreduce", 0) + 1
        work = self._gloo.allreduce(tensors, AllreduceOptions())  # SUM
        work.wait()
        if avg:
            for t in tensors:
                t.div_(self._size)
        return tensors

    def _panama_allreduce(self, tensors: list[torch.Tensor], avg: bool) -> list[torch.Tensor]:
        self._check_broken()
        if self.stats.mode == "pending":
            self._register(tensors)
        if self.stats.mode == "gloo":
            self.stats.fallback_calls += 1
            return self._gloo_allreduce(tensors, avg)
        comm = self._comm
        assert comm is not None
        start = time.perf_counter()
        for t in tensors:
            try:
                if t.is_contiguous():
                    comm.allreduce(t, out=t)
                else:
                    t.copy_(comm.allreduce(t))
            except CommunicatorError as exc:
                self._fail(exc, f"all_reduce of {t.numel()} float32")
            if avg:
                t.div_(self._size)
            self.stats.panama_elems += t.numel()
        self.stats.panama_calls += 1
        self.stats.panama_seconds += time.perf_counter() - start
        return tensors

    def _register(self, tensors: list[torch.Tensor]) -> None:
        comm = self._comm
        assert comm is not None
        size = self._size_hint if self._size_hint is not None else sum(4 * t.numel() for t in tensors)
        try:
            comm.connect(size)
        except CommunicatorError as exc:
            if not isinstance(exc, JobRefused):
                self._fail(exc, "registration")
            self.stats.mode = "gloo"
            self.stats.fallback_reason = str(exc)
            comm.close()
            if self._rank == 0 and not self._warned:
                self._warned = True
                log.warning(
                    "panama backend: job %s not admitted for in-network aggregation (%s); its all_reduce goes "
                    "through gloo "
                    "(counted in panama.distributed.stats()['fallback_calls'])",
                    self.stats.job,
                    exc.reason,
                )
            return
        self.stats.mode = "panama"

    def _fail(self, exc: Exception, what: str) -> None:
        err = PanamaFabricError(
            f"panama backend: group {self._group_id} rank {self._rank} (job {self.stats.job}): {what} failed: {exc}"
        )
        self._broken = err
        self.stats.mode = "broken"
        self.stats.error = str(err)
        raise err from None

    # ------------------------------------------------------------------ everything else: gloo
    def allreduce_coalesced(self, tensors, opts=None):  # noqa: ANN001 - torch's signature
        return self._gloo_call("allreduce_coalesced", tensors, *_opt(opts))

    def barrier(self, opts=None):  # noqa: ANN001
        return self._gloo_call("barrier", *_opt(opts))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):  # noqa: ANN001
        def run() -> None:
            self._check_broken()
            self._gloo.monitored_barrier(*(() if timeout is None else (timeout,)), wait_all_ranks)

        self._submit(run).wait()

    def broadcast(self, tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("broadcast", tensors, *_opt(opts))

    def allgather(self, output_tensors, input_tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("allgather", output_tensors, input_tensors, *_opt(opts))

    def _allgather_base(self, output, input, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("_allgather_base", output, input, *_opt(opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):  # noqa: ANN001
        return self._gloo_call("allgather_coalesced", output_lists, input_list, *_opt(opts))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):  # noqa: ANN001
        return self._gloo_call("allgather_into_tensor_coalesced", outputs, inputs, *_opt(opts))

    def gather(self, output_tensors, input_tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("gather", output_tensors, input_tensors, *_opt(opts))

    def scatter(self, output_tensors, input_tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("scatter", output_tensors, input_tensors, *_opt(opts))

    def reduce(self, tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("reduce", tensors, *_opt(opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("reduce_scatter", output_tensors, input_tensors, *_opt(opts))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("_reduce_scatter_base", output, input, *_opt(opts))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):  # noqa: ANN001
        return self._gloo_call("reduce_scatter_tensor_coalesced", outputs, inputs, *_opt(opts))

    def alltoall(self, output_tensors, input_tensors, opts=None):  # noqa: ANN001
        return self._gloo_call("alltoall", output_tensors, input_tensors, *_opt(opts))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("alltoall_base", output, input, output_split_sizes, input_split_sizes, *_opt(opts))

    # torch >= 2.7 calls these names on Python process groups
    def all_gather_single(self, output, input, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("_allgather_base", output, input, *_opt(opts))

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("_reduce_scatter_base", output, input, *_opt(opts))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: ANN001, A002
        return self._gloo_call("alltoall_base", output, input, output_split_sizes, input_split_sizes, *_opt(opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):  # noqa: ANN001
        return self._gloo_sequence("_allgather_base", list(zip(outputs, inputs, strict=True)), opts, outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):  # noqa: ANN001
        return self._gloo_sequence("_reduce_scatter_base", list(zip(outputs, inputs, strict=True)), opts, outputs)

    def _gloo_sequence(self, name: str, pairs: list[tuple[Any, Any]], opts: Any, outputs: Any) -> Any:
        def run() -> Any:
            self._check_broken()
            for out, inp in pairs:
                self.stats.gloo_calls[name] = self.stats.gloo_calls.get(name, 0) + 1
                getattr(self._gloo, name)(out, inp, *_opt(opts)).wait()
            return outputs

        return self._submit(run, on=self._on_device(pairs))

    def send(self, tensors, dst, tag=0):  # noqa: ANN001
        return self._gloo.send(tensors, dst, tag)

    def recv(self, tensors, src, tag=0):  # noqa: ANN001
        return self._gloo.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):  # noqa: ANN001
        return self._gloo.recv_anysource(tensors, tag)

    # ------------------------------------------------------------------ facts and lifecycle
    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"PanamaProcessGroup(group={self._group_id}, rank={self._rank}, size={self._size}, job={self.stats.job})"

    def shutdown(self) -> None:
        """Stop the worker thread, leave the PANAMA job, stop an owned local cluster. Idempotent.

        Called while a KeyboardInterrupt is being handled (``destroy_process_group`` in an
        ``except`` or ``finally`` after Ctrl-C), it interrupts first (:meth:`interrupt`)."""
        global _default_cluster
        if self._closed:
            return
        pending = sys.exc_info()[1]
        if isinstance(pending, KeyboardInterrupt):
            self.interrupt(pending)
        self._close_own()
        if self._is_default:
            # This process is leaving the cluster: its other groups' jobs end first, so the
            # owner of a local cluster stops it only after every job of every rank has left.
            for group in list(_groups):
                if group is not self:
                    group._close_own()
            with _lock:
                _default_cluster = None
        if self._size > 1 and self._cluster_scope:
            self._close_cluster()

    def _close_own(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=INTERRUPT_GRACE_S if self._interrupted else self._timeout.total_seconds())
        if self._thread.is_alive():
            log.warning("panama backend: group %s worker thread still busy at shutdown", self._group_id)
        if self._comm is not None:
            self._comm.close()
        _groups.discard(self)

    def _close_cluster(self) -> None:
        local = self._cluster.local if self._cluster is not None else None
        try:
            if local is None:
                self._store.add(CLOSED_KEY, 1)
                return
            # Rank 0 owns the daemons: let the other ranks finish and leave first (bounded;
            # not after Ctrl-C: the job has failed, and the user wants the process to end).
            deadline = time.monotonic() + (0.0 if self._interrupted else CLOSE_WAIT_S)
            closed = self._store.add(CLOSED_KEY, 0)
            while closed < self._size - 1 and time.monotonic() < deadline:
                time.sleep(0.05)
                closed = self._store.add(CLOSED_KEY, 0)
            if closed < self._size - 1:
                log.warning(
                    "panama backend: stopping the local cluster although only %d of %d other ranks closed within %g s",
                    closed,
                    self._size - 1,
                    CLOSE_WAIT_S,
                )
        except Exception as exc:  # the store may be gone already at exit
            log.info("panama backend: store unavailable at shutdown (%s)", exc)
        finally:
            if local is not None:
                local.stop()


def _opt(opts: Any) -> tuple[Any, ...]:
    return () if opts is None else (opts,)


def _create(common_opts: Any, backend_opts: Any) -> PanamaProcessGroup:
    return PanamaProcessGroup(
        common_opts.store,
        common_opts.group_rank,
        common_opts.group_size,
        common_opts.timeout,
        common_opts.group_id,
        is_default=not dist.is_initialized(),
    )


def register() -> None:
    """Register ``"panama"`` with torch.distributed (idempotent; done by ``import panama.distributed``)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def stats(group: Any = None) -> dict[str, Any]:
    """This rank's counters of ``group`` (default: the default group); see :class:`GroupStats`."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, PanamaProcessGroup):
        raise PanamaDistributedError(f"not a panama process group: {pg!r}")
    return pg.stats.as_dict()
