"""Device tensors through reused pinned host buffers, for a reduction that runs on the host.

PANAMA sums float32 vectors held in host memory (the UDP payloads of the switch daemons).
A CUDA tensor reaches them as gloo's CUDA path does, through pinned host memory, with
torch's stream semantics kept:

1. ``copy_in`` (on the caller's thread): the tensors are copied into one pinned host buffer
   on the caller's *current stream*, so the copy follows every kernel the caller queued
   before the call (the gradient's computation, DDP's division); an event is recorded
   after the copy. Nothing blocks here.
2. ``wait_copied_in`` (on the thread that reduces): the host waits for *that event only*
   (polled, bounded by a timeout), never for the whole device.
3. the caller reduces ``Staged.views`` (host tensors shaped like the inputs) in place.
4. ``copy_out``: the views are copied back into the tensors on the *same stream* the copy
   in used (non-contiguous tensors included: each view is contiguous, the copy scatters),
   and an event is recorded after it. The buffer returns to the pool with that event.
5. the result's future is completed inside ``use_stream(stream)``: a
   ``torch.futures.Future(devices=[device])`` (``DeviceApi.future``) records an event on
   that stream and makes whoever waits on it (``Work.wait()``, DDP's reducer, ``then``
   callbacks) order their current stream after it.

Buffers: one per operation in flight, reused. A buffer leaves the pool for an operation and
comes back, with the event after the device last reads it, when the operation ends; the
next operation that takes it makes its stream wait for that event before writing into it
(a device-side wait: the host never blocks on it). An operation takes the smallest free
buffer that fits; when none fits, the largest free one is dropped and one of the needed
size allocated. So the pool holds at most as many buffers as operations were ever in flight
at once (DDP: at most its buckets of one step), each as large as the largest operation it
served; once it has met the most operations in flight at once, nothing more is allocated.

Every device operation goes through a :class:`DeviceApi` (:class:`CudaApi` for torch.cuda),
so this logic runs in CI without a GPU against a stream model
(``tests/distributed/fake_device.py``), with CPU tensors in the role of device tensors.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

__all__ = ["CudaApi", "DeviceApi", "PinnedStaging", "Staged", "StagingError"]

POLL_S = 50e-6  # sleep between two polls of the copy-in event (Python's sleep adds ~50 us more)


class StagingError(RuntimeError):
    """A copy between device and host memory did not finish in time; the message says which."""


class DeviceApi(Protocol):
    """The device operations staging needs: torch.cuda's (:class:`CudaApi`) or a test double's."""

    def current_stream(self, device: torch.device) -> Any:
        """The calling thread's current stream on ``device``."""
        ...

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """Context in which ``stream`` is the calling thread's current stream."""
        ...

    def record_event(self, stream: Any) -> Any:
        """An event recorded on ``stream`` now (complete once the stream's earlier work is)."""
        ...

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream``'s later work wait for ``event`` (on the device; the host does not block)."""
        ...

    def event_done(self, event: Any) -> bool:
        """Whether ``event`` has completed (does not block)."""
        ...

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)`` queued on the current stream, asynchronous to the host."""
        ...

    def pinned_empty(self, numel: int) -> torch.Tensor:
        """A new flat float32 host tensor in page-locked memory."""
        ...

    def future(self, device: torch.device) -> torch.futures.Future:
        """A future whose completion and waits follow the streams of ``device``."""
        ...


class CudaApi:
    """:class:`DeviceApi` of torch.cuda (the only one the backend uses outside tests).

    Constructing it touches no device: a CPU-only torch can hold one.
    """

    def current_stream(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def record_event(self, stream: Any) -> Any:
        event = torch.cuda.Event()  # no timing: the cheapest kind
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def event_done(self, event: Any) -> bool:
        return bool(event.query())

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src, non_blocking=True)  # asynchronous: one side is pinned host memory

    def pinned_empty(self, numel: int) -> torch.Tensor:
        return torch.empty(numel, dtype=torch.float32, pin_memory=True)

    def future(self, device: torch.device) -> torch.futures.Future:
        return torch.futures.Future(devices=[device])


@dataclass(slots=True, eq=False)  # identity: the pool removes this buffer, not an equal one
class _Buffer:
    host: torch.Tensor  # flat float32, pinned
    free_after: Any = None  # event after the device's last read of ``host`` (None: never read)


@dataclass(slots=True)
class Staged:
    """One operation's tensors, their host views and the stream and event of the copy in."""

    tensors: list[torch.Tensor]
    views: list[torch.Tensor]  # host, contiguous, shaped like ``tensors``, in one buffer
    device: torch.device
    stream: Any
    copied_in: Any  # event after the copy into ``views``
    buffer: _Buffer | None  # None once returned to the pool
    numel: int = field(default=0)


class PinnedStaging:
    """Pool of pinned host buffers and the copies in and out of them (see the module docstring).

    ``copy_in`` runs on the caller's thread, the rest on the thread that reduces; the pool
    is shared between them under a lock. Counters: ``allocations`` (buffers ever allocated)
    and ``pinned_bytes`` (bytes of the buffers alive, in the pool or in flight).
    """

    def __init__(self, api: DeviceApi):
        self.api = api
        self._free: list[_Buffer] = []
        self._lock = threading.Lock()
        self.allocations = 0
        self.pinned_bytes = 0

    def copy_in(self, tensors: list[torch.Tensor]) -> Staged:
        """Copy ``tensors`` (float32, one device, any strides) into one host buffer on the current stream."""
        if not tensors:
            raise ValueError("staging needs at least one tensor")
        device = tensors[0].device
        for t in tensors:
            if t.device != device or t.dtype != torch.float32:
                raise ValueError(f"staging takes float32 tensors of one device, got {t.dtype} on {t.device}")
        api = self.api
        stream = api.current_stream(device)
        numel = sum(t.numel() for t in tensors)
        buf = self._acquire(numel)
        if buf.free_after is not None:  # the previous operation's copy out may still read it
            api.wait_event(stream, buf.free_after)
        views, offset = [], 0
        for t in tensors:
            view = buf.host[offset : offset + t.numel()].view(t.shape)
            api.copy(view, t)
            views.append(view)
            offset += t.numel()
        return Staged(list(tensors), views, device, stream, api.record_event(stream), buf, numel)

    def wait_copied_in(self, staged: Staged, timeout_s: float) -> None:
        """Block until the copy in has completed (its event only), at most ``timeout_s``."""
        api, event = self.api, staged.copied_in
        if api.event_done(event):
            return
        deadline = time.monotonic() + timeout_s
        while not api.event_done(event):
            if time.monotonic() >= deadline:
                raise StagingError(
                    f"the copy of {staged.numel} float32 from {staged.device} into pinned host memory did not "
                    f"finish within {timeout_s:g} s (is the device busy or hung?)"
                )
            time.sleep(POLL_S)

    def copy_out(self, staged: Staged) -> None:
        """Copy the views back into the tensors on the copy in's stream; the buffer returns to the pool."""
        api, stream = self.api, staged.stream
        with api.use_stream(stream):
            for t, view in zip(staged.tensors, staged.views, strict=True):
                api.copy(t, view)
            done = api.record_event(stream)
        self._release(staged, done)

    def abandon(self, staged: Staged) -> None:
        """The reduction failed: the tensors stay as they were; the buffer returns to the pool."""
        self._release(staged, staged.copied_in)

    def _acquire(self, numel: int) -> _Buffer:
        with self._lock:
            fits = [b for b in self._free if b.host.numel() >= numel]
            if fits:
                buf = min(fits, key=lambda b: b.host.numel())
                self._free.remove(buf)
                return buf
            if self._free:  # grow: the largest free buffer is replaced by one that fits
                # (dropping it is safe before its last copy has run: torch's pinned memory
                # allocator holds a block until the events of the copies that used it complete)
                dropped = max(self._free, key=lambda b: b.host.numel())
                self._free.remove(dropped)
                self.pinned_bytes -= 4 * dropped.host.numel()
            self.allocations += 1
            self.pinned_bytes += 4 * numel
        return _Buffer(self.api.pinned_empty(numel))

    def _release(self, staged: Staged, free_after: Any) -> None:
        buf = staged.buffer
        if buf is None:
            return
        staged.buffer = None
        buf.free_after = free_after
        with self._lock:
            self._free.append(buf)
