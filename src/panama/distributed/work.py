"""Work objects of the ``panama`` backend and the worker thread's handling of one collective.

:class:`PanamaProcessGroup <panama.distributed.backend.PanamaProcessGroup>` queues every
collective to its worker thread as ``(fn, future, backward box, OnDevice or None)`` and
returns a :class:`FutureWork` over the future. For a collective of device (CUDA) tensors
the future is ``DeviceApi.future(device)`` (``torch.futures.Future(devices=[device])``)
and the worker thread runs ``fn`` and completes the future with the caller's stream
current (:class:`OnDevice`), so waiting on either orders the waiter's current stream after
the result instead of blocking on the device.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
from torch._C._distributed_c10d import Work

from panama.distributed.staging import DeviceApi

__all__ = ["FutureWork", "OnDevice", "backward_box", "run_item", "tensors_in"]


class FutureWork(Work):
    """A work object over a future: ``wait()`` raises the collective's error.

    (``_create_work_from_future`` would not: its ``wait()`` returns normally on a failed
    future, and DDP's reducer then crashes reading the value.) ``on_interrupt(exc)`` is
    called when the wait itself is interrupted (``KeyboardInterrupt`` from Ctrl-C), before
    ``exc`` propagates: the group abandons the collective instead of letting it run on.
    """

    def __init__(self, fut: torch.futures.Future, on_interrupt: Callable[[BaseException], None] | None = None):
        super().__init__()
        self._fut = fut
        self._done = threading.Event()
        self._on_interrupt = on_interrupt
        fut.add_done_callback(lambda _: self._done.set())

    def wait(self, timeout: timedelta | None = None) -> bool:  # bounded by the collective's own timeout
        # Wait in Python, in slices: a signal handler (SIGTERM from torchrun's agent, Ctrl-C)
        # runs while a collective is blocked, which it could not inside Future.wait().
        try:
            while not self._done.wait(0.5):
                pass
        except KeyboardInterrupt as exc:
            if self._on_interrupt is not None:
                self._on_interrupt(exc)
            raise
        self._fut.wait()  # raises the collective's error
        return True

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:
            return False
        return True

    def exception(self) -> Any:
        try:
            self._fut.value()
        except Exception as exc:
            return exc
        return None

    def result(self) -> Any:
        self.wait()  # a device future orders the current stream after the result
        return self._fut.value()


@dataclass(slots=True)
class OnDevice:
    """A collective of device tensors: where its worker-thread part runs and completes."""

    api: DeviceApi
    device: torch.device
    stream: Any  # the caller's current stream at the call


def run_item(fn: Callable[[], Any], fut: torch.futures.Future, backward_box: list[Any] | None) -> None:
    """Run one queued collective on the worker thread and complete its future."""
    try:
        value = fn()
    except BaseException as exc:  # handed to whoever waits on the work
        if backward_box is None:
            fut.set_exception(exc)
            return
        # Inside backward (DDP's reducer): a failed future from a Python process
        # group crashes torch 2.13 (SIGSEGV in the reducer), so the future completes
        # and the autograd final callback queued at submission raises the error.
        backward_box.append(exc)
        value = backward_box[0]
    fut.set_result(value)


def tensors_in(args: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``args`` (tensors, and lists or tuples of them, nested)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            yield arg
        elif isinstance(arg, (list, tuple)):
            yield from tensors_in(arg)


def backward_box(fut: torch.futures.Future, value_on_error: Any) -> list[Any] | None:
    """During a backward pass: queue an autograd final callback that raises the collective's error.

    Returns the box the worker thread puts the error in (after ``value_on_error``, what the
    future completes with instead), or None outside backward (the future then carries the
    error, and ``wait()`` raises it with its type).
    """
    box: list[Any] = [value_on_error]

    def raise_if_failed() -> None:
        fut.wait()
        if len(box) > 1:
            raise box[1]

    try:
        torch.autograd.Variable._execution_engine.queue_callback(raise_if_failed)
    except RuntimeError:  # "Final callbacks can only be installed during backward pass"
        return None
    return box
