"""Host-based ring allreduce over DCTCP flows (the baseline PANAMA is compared with).

Schedule
--------
``N`` workers in a ring (rank ``r`` sends to rank ``(r + 1) mod N``). One allreduce of
``S`` bytes is ``2 (N - 1)`` steps (``N - 1`` of reduce-scatter, ``N - 1`` of
all-gather); in every step each worker sends one chunk of ``ceil(S / N)`` bytes to its
successor as one DCTCP flow. So each worker's uplink carries ``2 (N - 1) / N * S``
payload bytes per allreduce, against ``S`` under in-network aggregation.

A worker starts step ``k + 1`` once its own step-``k`` flow has completed (the sender
saw its last byte acknowledged) *and* the step-``k`` flow of its predecessor has
completed (it holds the chunk it must reduce or forward). Workers progress on their own
(a fast worker may start the next iteration's step 0 while its neighbour is finishing
the previous one); receipts are counted per iteration, so nothing is confused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from panama.core.errors import FieldError
from panama.sim.dctcp import Dctcp, Flow

__all__ = ["RingAllreduce", "ring_steps", "ring_chunk_bytes"]


def ring_steps(num_workers: int) -> int:
    """Steps of one ring allreduce: ``2 (N - 1)``."""
    return 2 * (num_workers - 1)


def ring_chunk_bytes(size_bytes: int, num_workers: int) -> int:
    """Bytes each worker sends per step: ``ceil(S / N)``."""
    return -(-size_bytes // num_workers)


class RingAllreduce:
    """Ring allreduce of one job over ``stack`` (a :class:`Dctcp` transport).

    ``start(rank, iteration)`` begins that rank's allreduce; ``on_done(rank)`` is called
    when the rank has finished all ``2 (N - 1)`` steps. ``flows`` lists every flow made.
    """

    def __init__(
        self,
        stack: Dctcp,
        hosts: Sequence[str],
        size_bytes: int,
        on_done: Callable[[int], None],
        *,
        name: str = "ring",
    ):
        if len(hosts) < 2:
            raise FieldError("hosts", "a ring needs at least two workers")
        self.stack = stack
        self.hosts = list(hosts)
        self.n = len(self.hosts)
        self.size_bytes = size_bytes
        self.chunk_bytes = ring_chunk_bytes(size_bytes, self.n)
        self.steps = ring_steps(self.n)
        self.on_done = on_done
        self.name = name
        n = self.n
        self._iter = [-1] * n  # iteration each rank is reducing (-1: idle)
        self._step = [0] * n  # current step of each rank
        self._sent = [0] * n  # completed sends of the current iteration
        self._recv: list[dict[int, int]] = [{} for _ in range(n)]  # iteration -> completed receipts
        self._active = [False] * n
        self.flows: list[Flow] = []

    def start(self, rank: int, iteration: int) -> None:
        """Rank ``rank`` joins allreduce number ``iteration`` (0, 1, ...)."""
        if self._active[rank]:
            raise RuntimeError(f"{self.name}: rank {rank} is still in iteration {self._iter[rank]}")
        self._active[rank] = True
        self._iter[rank] = iteration
        self._step[rank] = 0
        self._sent[rank] = 0
        self._send_step(rank)

    def _send_step(self, rank: int) -> None:
        it = self._iter[rank]
        step = self._step[rank]
        dst = self.hosts[(rank + 1) % self.n]
        flow = self.stack.start_flow(
            self.hosts[rank],
            dst,
            self.chunk_bytes,
            None,
            partial(self._flow_done, rank, it),
            tag=f"{self.name}:it{it}:step{step}:r{rank}",
        )
        self.flows.append(flow)

    def _flow_done(self, rank: int, it: int, flow: Flow) -> None:
        self._sent[rank] += 1
        succ = (rank + 1) % self.n
        recv = self._recv[succ]
        recv[it] = recv.get(it, 0) + 1
        self._advance(rank)
        if succ != rank:
            self._advance(succ)

    def _advance(self, rank: int) -> None:
        if not self._active[rank]:
            return
        it = self._iter[rank]
        step = self._step[rank]
        if self._sent[rank] < step + 1 or self._recv[rank].get(it, 0) < step + 1:
            return
        step += 1
        self._step[rank] = step
        if step < self.steps:
            self._send_step(rank)
            return
        self._active[rank] = False
        self._recv[rank].pop(it, None)
        self.on_done(rank)
