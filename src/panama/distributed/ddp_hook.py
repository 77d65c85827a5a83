"""PyTorch ``DistributedDataParallel`` communication hook that allreduces through PANAMA.

Usage, on every rank (a gloo process group still serves DDP's own bookkeeping: the
initial parameter broadcast and shape checks)::

    ddp = DistributedDataParallel(model)
    comm = panama.Communicator(controller="127.0.0.1:7000", job="j1", rank=r, world_size=w)
    register_panama_hook(ddp, comm)          # one call; training code is unchanged

Contract of :func:`panama_allreduce_hook` (torch's comm-hook API,
``hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]``):

- the bucket's flat float32 buffer (CPU or CUDA) is divided by ``state.world_size`` *before* the
  reduction (as torch's default ``allreduce_hook`` does), summed over ranks by
  ``state.communicator.allreduce`` and written back into the same buffer, so DDP sees the
  gradient average in place;
- the reduction is written into the bucket itself (``allreduce(buf, out=buf)`` when the
  communicator takes ``out=``, as :class:`panama.Communicator` does; else copied back);
- a CUDA bucket is summed on the host through a reused pinned buffer
  (:class:`~panama.distributed.staging.PinnedStaging`): divided on the device, copied to
  the buffer on the current stream, the host waits for that copy only, the sum is copied
  back on the current stream, and the future is a ``Future(devices=[device])`` completed
  on it (DDP's reducer orders its stream after the copy back);
- the returned future is already completed (the communicator call is blocking). An
  exception from the communicator surfaces from ``backward()`` with its own type: inside
  backward it is raised by an autograd final callback and the future completes (torch's
  reducer turns a failed hook future into "Unable to cast ... to Tensor"); outside
  backward it is set on the future;
- every rank ends with bitwise-identical averaged gradients (the communicator's contract),
  hence identical optimizer steps.

The hook only needs an object with ``allreduce(tensor) -> tensor`` (elementwise sum over
ranks), so it also runs on test doubles; :class:`PanamaHookState` counts calls, elements
and time spent in the reduction.
"""

# No "from __future__ import annotations": DDP checks the hook's annotations at runtime.
import functools
import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.distributed as dist

from panama.core.errors import FieldError
from panama.distributed.staging import CudaApi, DeviceApi, PinnedStaging
from panama.runtime.worker.env import timeout_s


class SumAllreducer(Protocol):
    """Anything with ``allreduce(x) -> sum of x over ranks`` (e.g. :class:`panama.Communicator`)."""

    def allreduce(self, x: Any) -> Any: ...


@dataclass
class PanamaHookState:
    """State handed to :func:`panama_allreduce_hook`: the communicator and the divisor."""

    communicator: SumAllreducer
    world_size: int
    calls: int = 0
    elems: int = 0
    seconds: float = 0.0
    in_place: bool = field(default=False, init=False)  # the communicator takes out=
    # Device types whose buckets are staged through pinned host memory (tests: a stream model).
    device_apis: dict[str, DeviceApi] = field(default_factory=lambda: {"cuda": CudaApi()})
    staging: dict[str, PinnedStaging] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        try:
            self.in_place = "out" in inspect.signature(self.communicator.allreduce).parameters
        except (TypeError, ValueError):
            self.in_place = False
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise FieldError("world_size", f"must be a positive integer, got {self.world_size!r}")
        comm_world = getattr(self.communicator, "world_size", None)
        if comm_world is not None and comm_world != self.world_size:
            raise FieldError("world_size", f"{self.world_size} differs from the communicator's world_size {comm_world}")

    @property
    def payload_bytes(self) -> int:
        """Gradient bytes this rank contributed (float32 payload only, no headers)."""
        return 4 * self.elems


def panama_allreduce_hook(state: PanamaHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average ``bucket`` over ranks through ``state.communicator``, in place; completed future."""
    buf = bucket.buffer()
    api = state.device_apis.get(buf.device.type)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future() if api is None else api.future(buf.device)
    try:
        if buf.dtype != torch.float32 or (api is None and buf.device.type != "cpu"):
            raise TypeError(
                f"panama_allreduce_hook needs float32 CPU or CUDA gradients, got {buf.dtype} on {buf.device}"
            )
        buf.div_(state.world_size)  # on the bucket's device, before the sum
        if api is None:
            _sum_in_place(state, buf)
        else:
            _sum_staged(state, api, buf)
        state.calls += 1
        state.elems += buf.numel()
    except Exception as exc:
        try:  # inside backward: raised, with its type, once DDP has finished the pass
            torch.autograd.Variable._execution_engine.queue_callback(functools.partial(_reraise, exc))
        except RuntimeError:  # not in a backward pass (the hook called directly)
            fut.set_exception(exc)
            return fut
    fut.set_result(buf)
    return fut


def _sum_in_place(state: PanamaHookState, buf: torch.Tensor) -> None:
    start = time.perf_counter()
    out = state.communicator.allreduce(buf, out=buf) if state.in_place else state.communicator.allreduce(buf)
    state.seconds += time.perf_counter() - start
    if out is not buf:
        if tuple(out.shape) != tuple(buf.shape):
            raise RuntimeError(
                f"communicator returned shape {tuple(out.shape)} for a bucket of shape {tuple(buf.shape)}"
            )
        buf.copy_(out)


def _sum_staged(state: PanamaHookState, api: DeviceApi, buf: torch.Tensor) -> None:
    """Sum a device bucket on the host: pinned buffer in and out on the current stream."""
    staging = state.staging.get(buf.device.type)
    if staging is None:
        staging = state.staging[buf.device.type] = PinnedStaging(api)
    staged = staging.copy_in([buf])
    try:
        staging.wait_copied_in(staged, getattr(state.communicator, "timeout_s", None) or timeout_s())
        _sum_in_place(state, staged.views[0])
    except BaseException:
        staging.abandon(staged)
        raise
    staging.copy_out(staged)  # on the current stream, where the future completes


def _reraise(exc: Exception) -> None:
    raise exc


def register_panama_hook(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    communicator: SumAllreducer,
    world_size: int | None = None,
) -> PanamaHookState:
    """Route ``ddp_model``'s gradient allreduce through ``communicator``; returns the hook state.

    ``world_size`` defaults to the communicator's ``world_size`` (else the default process
    group's). Call before the first backward pass, as for any DDP comm hook.
    """
    if world_size is None:
        world_size = getattr(communicator, "world_size", None)
    if world_size is None:
        world_size = dist.get_world_size()
    state = PanamaHookState(communicator=communicator, world_size=int(world_size))
    ddp_model.register_comm_hook(state, panama_allreduce_hook)
    return state
