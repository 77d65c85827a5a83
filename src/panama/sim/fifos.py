"""The FIFOs of the simulated network: one component, two implementations.

* :class:`PacketPipe`: the packets a port has accepted and that have not arrived at its
  peer, oldest first, each with its arrival time (``arrive_ps``, never decreasing): the
  arrival loop reads the head's time without touching the packet
  (:class:`panama.sim.ports.Port`).
* :class:`ReleaseRings`: per port of a lossless switch, the ``(end_ps, size, in_idx)``
  of every packet the port has accepted and not finished transmitting, oldest first
  (ends never decrease within a ring), so the shared buffer is freed, per ingress, when
  a transmission ends (in the ingress counters it was built with);
  :meth:`ReleaseRings.release` settles every ring at once and
  :meth:`ReleaseRings.next_end` is the earliest pending end
  (:class:`panama.sim.nodes.Switch`).
* :class:`DelayLine`: the ``(due_ps, out, in_idx)`` of every packet list a switch hook
  returned and that waits out the hook's latency (:class:`panama.sim.nodes.Switch`).

``fifos.py`` (this file) keeps them in deques; ``fifos.pyx`` (with ``fifos.pxd``) in C
ring buffers of structs. Which one runs is chosen once at import,
with the rest of the compiled fast path, as for :mod:`panama.sim.heap` (see
:mod:`panama._ext`); both hold the same entries in the same order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["PacketPipe", "ReleaseRings", "DelayLine", "IMPLEMENTATION"]

IMPLEMENTATION = "python"  # "C" in fifos.pyx


_NEVER = 1 << 62  # later than any simulated time (panama.sim.engine)


class PacketPipe(deque):
    """Packets in flight on one port, with their arrival times (see the module docstring).
    Indexing (``pipe[0]``, ``pipe[-1]``) gives packets."""

    __slots__ = ()

    def push(self, arrive_ps: int, pkt: Any) -> None:
        """Append ``pkt``, arriving at ``arrive_ps`` (no earlier than the newest entry;
        the caller has set ``pkt.arrive_ps`` to it)."""
        self.append(pkt)

    def head_time(self) -> int:
        """Arrival time of the oldest packet, or -1 if there is none."""
        return self[0].arrive_ps if self else -1

    def back_time(self) -> int:
        """Arrival time of the newest packet, or -1 if there is none."""
        return self[-1].arrive_ps if self else -1

    # The deque's own methods (no Python frame per call: the arrival loops call them for
    # every packet hop on this path).
    #: ``at(i)``: the packet at position ``i`` (0: oldest; negative from the newest).
    at = deque.__getitem__
    #: ``pop_head()``: remove and return the oldest packet (IndexError if empty).
    pop_head = deque.popleft
    #: ``pop_packet()``: ``pop_head()`` where every entry is a
    #: :class:`panama.sim.packet.SimPacket` (a port's pipe): the C twin checks the exact
    #: type inline (TypeError otherwise), so its callers need no type test of their own.
    pop_packet = deque.popleft
    #: ``pop_back()``: remove and return the newest packet (IndexError if empty).
    pop_back = deque.pop


class ReleaseRings:
    """Pending buffer releases of the ports of one switch, one ring per port (see the
    module docstring)."""

    __slots__ = ("_rings", "_next", "_ingress")

    def __init__(self, nrings: int, ingress: Any) -> None:
        """``ingress``: the per-ingress byte counters (a writable buffer of signed 64-bit
        integers, e.g. ``array("q")``) that :meth:`release` decreases."""
        if nrings < 0:
            raise ValueError(f"nrings must be >= 0, got {nrings}")
        self._rings = [deque() for _ in range(nrings)]
        self._next = _NEVER
        self._ingress = ingress

    def __len__(self) -> int:
        return sum(len(r) for r in self._rings)

    def pending(self, ring: int) -> int:
        """Entries of ring ``ring``."""
        return len(self._ring(ring))

    def _ring(self, ring: int) -> deque:
        if ring < 0 or ring >= len(self._rings):
            raise IndexError(f"ring {ring} out of range [0, {len(self._rings)})")
        return self._rings[ring]

    def put(self, ring: int, end_ps: int, size: int, in_idx: int) -> None:
        """Append to ring ``ring`` the release of ``size`` bytes of ingress ``in_idx`` at ``end_ps``."""
        self._ring(ring).append((end_ps, size, in_idx))
        if end_ps < self._next:
            self._next = end_ps

    def pop_back(self, ring: int) -> int:
        """Withdraw the newest entry of ring ``ring`` (a packet held by PAUSE before it
        started); its ingress. ``next_end`` may stay early (a lower bound)."""
        r = self._ring(ring)
        if not r:
            raise IndexError("pop from an empty release ring")
        return r.pop()[2]

    def next_end(self) -> int:
        """The earliest pending end (a lower bound after ``pop_back``), or 2**62 if none."""
        return self._next

    def release(self, now: int) -> int:
        """Remove the entries of every ring that ended by ``now``, subtracting each size
        from ``ingress[in_idx]``; returns the bytes freed."""
        ingress = self._ingress
        freed = 0
        nxt = _NEVER
        for r in self._rings:
            while r:
                end, size, in_idx = r[0]
                if end > now:
                    if end < nxt:
                        nxt = end
                    break
                r.popleft()
                ingress[in_idx] -= size
                freed += size
        self._next = nxt
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
