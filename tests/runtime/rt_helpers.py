"""Shared helpers of the runtime tests: run several ranks in threads, check sums, wait for a state."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from panama.core import codec
from panama.core.packet import Packet
from panama.runtime.net.udp import Address, PacketSocket
from panama.runtime.worker.communicator import Communicator

F32_EPS = float(np.finfo(np.float32).eps)


def reference_sum(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return np.sum(np.stack([a.astype(np.float64) for a in arrays]), axis=0)


def assert_close_to_reference(out: np.ndarray, arrays: Sequence[np.ndarray]) -> None:
    """|out - sum| within float32 rounding of a sum of len(arrays) terms, in any order."""
    ref = reference_sum(arrays)
    bound = (len(arrays) + 1) * F32_EPS * np.sum(np.abs(np.stack(arrays).astype(np.float64)), axis=0) + 1e-30
    err = np.abs(out.astype(np.float64) - ref)
    worst = int(np.argmax(err - bound)) if err.size else 0
    assert np.all(err <= bound), f"element {worst}: got {out.reshape(-1)[worst]}, expected {ref.reshape(-1)[worst]}"


def run_ranks(
    controller: str,
    job: str,
    world_size: int,
    body: Callable[[Communicator, int], Any],
    **options: Any,
) -> tuple[list[Any], list[BaseException | None]]:
    """Run ``body(comm, rank)`` for every rank in its own thread; return results and errors."""
    results: list[Any] = [None] * world_size
    errors: list[BaseException | None] = [None] * world_size

    def run(rank: int) -> None:
        try:
            with Communicator(controller, job, rank, world_size, **options) as comm:
                results[rank] = body(comm, rank)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors[rank] = exc

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a rank thread did not finish within 120 s"
    return results, errors


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 30.0, poll_s: float = 0.05) -> Any:
    """Poll ``predicate()`` until it returns a true value (returned); fail naming ``what``
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(poll_s)


def random_arrays(rng: np.random.Generator, world_size: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(np.float32) * (r + 1) for r in range(world_size)]


def recv_packet(sock: PacketSocket, timeout_s: float = 5.0) -> tuple[Packet, Address]:
    """The next datagram on ``sock`` decoded (no key check), and its source; raises
    ``TimeoutError`` after ``timeout_s``."""
    sock.settimeout(timeout_s)
    buf = bytearray(65536)
    n, ecn, src = sock.recv_into(buf)
    return codec.decode(bytes(buf[:n]), ecn), src
