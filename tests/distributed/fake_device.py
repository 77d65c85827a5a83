"""A model of device streams for tests without a GPU: CPU tensors play the device tensors.

:class:`FakeDevice` implements :class:`panama.distributed.staging.DeviceApi`. Work queued
on a stream (copies, test "kernels", waits for events) runs in order, and, in the default
lazy mode, only when the device is made to progress: when the host polls an event
(``event_done``: the device runs that stream up to the event) or a test calls ``run``.
So a reduction that reads the host buffer before waiting for the copy in, a copy out queued
on another stream than the caller's, a wait() that does not order the caller's stream
after the copy out, or a buffer reused before its last copy out ran, ends in a wrong result
(pinned buffers start as NaN) instead of a lucky right one. ``log`` records every call.

``FakeDevice(lazy=False)`` runs every operation when it is queued (for DDP, whose C++
reducer waits on futures without this model's help).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


class FakeStream:
    def __init__(self, name: str):
        self.name = name
        self.ops: list[Callable[[], None]] = []
        self.done = 0  # ops[:done] have run

    def __repr__(self) -> str:
        return f"FakeStream({self.name}, {self.done}/{len(self.ops)} run)"


@dataclass
class FakeEvent:
    stream: FakeStream
    position: int  # complete once stream.ops[:position] have run
    id: int

    @property
    def complete(self) -> bool:
        return self.stream.done >= self.position


class FakeFuture(torch.futures.Future):
    """What ``torch.futures.Future(devices=[device])`` does with streams, on the model."""

    def __init__(self, dev: FakeDevice, device: torch.device):
        super().__init__()
        self.dev, self.device = dev, device
        self.event: FakeEvent | None = None
        self.completed_on: FakeStream | None = None

    def set_result(self, result: Any) -> None:
        self.completed_on = self.dev.current()  # torch records an event on the completing thread's current stream
        self.event = self.dev.record_event(self.completed_on)
        super().set_result(result)

    def wait(self) -> Any:
        value = super().wait()
        if self.event is not None:  # torch makes the waiting thread's current stream wait for it
            self.dev.wait_event(self.dev.current(), self.event)
        return value


class FakeDevice:
    def __init__(self, lazy: bool = True):
        self.lazy = lazy
        self.default = FakeStream("default")
        self._local = threading.local()
        self._lock = threading.RLock()
        self._ids = itertools.count()
        self.log: list[tuple[Any, ...]] = []
        self.allocated: list[int] = []
        self.futures: list[FakeFuture] = []

    # ------------------------------------------------------------------ for tests
    def current(self) -> FakeStream:
        return getattr(self._local, "stream", self.default)

    def set_current(self, stream: FakeStream) -> None:
        self._local.stream = stream

    def launch(self, fn: Callable[[], Any], what: str = "kernel") -> None:
        """Queue ``fn`` on the current stream, as a kernel launch would."""
        self._enqueue(self.current(), what, fn)

    def run(self, stream: FakeStream | None = None) -> None:
        """Let the device run everything queued on ``stream`` (default: the current one)."""
        stream = stream or self.current()
        self._run(stream, len(stream.ops))

    def calls(self, *kinds: str) -> list[tuple[Any, ...]]:
        return [entry for entry in self.log if entry[0] in kinds]

    # ------------------------------------------------------------------ DeviceApi
    def current_stream(self, device: torch.device) -> FakeStream:
        return self.current()

    @contextlib.contextmanager
    def use_stream(self, stream: FakeStream) -> Iterator[None]:
        had = getattr(self._local, "stream", None)
        self._local.stream = stream
        self.log.append(("use_stream", stream.name))
        try:
            yield
        finally:
            if had is None:
                del self._local.stream
            else:
                self._local.stream = had

    def record_event(self, stream: FakeStream) -> FakeEvent:
        with self._lock:
            event = FakeEvent(stream, len(stream.ops), next(self._ids))
        self.log.append(("record", stream.name, event.id))
        return event

    def wait_event(self, stream: FakeStream, event: FakeEvent) -> None:
        self._enqueue(stream, ("wait", event.id), lambda: self._run(event.stream, event.position))

    def event_done(self, event: FakeEvent) -> bool:
        self.log.append(("poll", event.stream.name, event.id))
        self._run(event.stream, event.position)  # a host waiting on an event lets the device progress
        return event.complete

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self._enqueue(self.current(), ("copy", tuple(dst.shape)), lambda: dst.copy_(src))

    def pinned_empty(self, numel: int) -> torch.Tensor:
        self.allocated.append(numel)
        self.log.append(("alloc", numel))
        return torch.full((numel,), float("nan"))

    def future(self, device: torch.device) -> FakeFuture:
        fut = FakeFuture(self, device)
        self.futures.append(fut)
        return fut

    # ------------------------------------------------------------------ the model
    def _enqueue(self, stream: FakeStream, what: Any, fn: Callable[[], Any]) -> None:
        kind, detail = (what[0], what[1:]) if isinstance(what, tuple) else (what, ())
        with self._lock:
            stream.ops.append(fn)
            self.log.append((kind, stream.name, *detail))
        if not self.lazy:
            self._run(stream, len(stream.ops))

    def _run(self, stream: FakeStream, upto: int) -> None:
        with self._lock:
            while stream.done < upto:
                op = stream.ops[stream.done]
                stream.done += 1
                op()
