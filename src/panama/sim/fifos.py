"""Two FIFOs of the simulated switch: one component, two implementations.

* :class:`ReleaseRing`: the ``(end_ps, size, in_idx)`` of every packet a lossless switch
  port has accepted and not finished transmitting, oldest first (ends never decrease),
  so the shared buffer is freed, per ingress, when a transmission ends
  (:class:`panama.sim.lossless.LosslessPort`).
* :class:`DelayLine`: the ``(due_ps, out, in_idx)`` of every packet list a switch hook
  returned and that waits out the hook's latency (:class:`panama.sim.nodes.Switch`).

``fifos.py`` (this file) keeps them in deques of tuples; ``fifos.pyx`` (with
``fifos.pxd``) in C ring buffers of structs. Which one runs is chosen once at import,
with the rest of the compiled fast path, as for :mod:`panama.sim.heap` (see
:mod:`panama._ext`); both hold the same entries in the same order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["ReleaseRing", "DelayLine", "IMPLEMENTATION"]

IMPLEMENTATION = "python"  # "C" in fifos.pyx


class ReleaseRing(deque):
    """Pending buffer releases of one port (see the module docstring)."""

    __slots__ = ()

    def put(self, end_ps: int, size: int, in_idx: int) -> None:
        """Append the release of ``size`` bytes of ingress ``in_idx`` at ``end_ps``."""
        self.append((end_ps, size, in_idx))

    def pop_back(self) -> int:
        """Withdraw the newest entry (a packet held by PAUSE before it started); its ingress."""
        return self.pop()[2]

    def head_end(self) -> int:
        """End time of the oldest entry, or -1 if there is none."""
        return self[0][0] if self else -1

    def release(self, now: int, ingress: Any) -> int:
        """Remove the entries that ended by ``now``, subtracting each size from
        ``ingress[in_idx]``; returns the bytes freed."""
        freed = 0
        while self:
            end, size, in_idx = self[0]
            if end > now:
                break
            self.popleft()
            ingress[in_idx] -= size
            freed += size
        return freed


class DelayLine(deque):
    """Hook outputs waiting out the hook latency of one switch (see the module docstring)."""

    __slots__ = ()

    def put(self, due_ps: int, out: list, in_idx: int) -> None:
        """Append ``out`` (received on ingress ``in_idx``), due at ``due_ps``."""
        self.append((due_ps, out, in_idx))

    def head_time(self) -> int:
        """Due time of the oldest entry, or -1 if there is none."""
        return self[0][0] if self else -1

    def head_in_idx(self) -> int:
        """Ingress of the oldest entry (the line must not be empty)."""
        return self[0][2]

    def pop_head(self) -> list:
        """Remove the oldest entry (the line must not be empty); its packet list."""
        return self.popleft()[1]
