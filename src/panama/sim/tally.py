"""What the ports and nodes of a simulated network report while packets move: drops by
reason, and the queueing charged to tracked packets.

Contract: a :class:`NetworkTally` is created by :class:`panama.sim.network.Network` and
handed to every port and node it builds (``tally``); they call :meth:`NetworkTally.drop`
for every packet they discard and :attr:`NetworkTally.ahead` for every packet with
``FLAG_TRACKED`` they queue. It owns the drop counters (``drops``, by reason) and, when
the runner sets one, the attribution of tracked packets' queueing
(``queue_ahead``: a :class:`panama.sim.qahead.QueueAhead`). A drop is traced when the
engine traces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from panama.sim.engine import Engine
    from panama.sim.nodes import Node
    from panama.sim.packet import SimPacket
    from panama.sim.ports import Port

__all__ = ["NetworkTally"]


def _unattributed(port: Port, pkt: SimPacket, now: int) -> None:
    """:attr:`NetworkTally.ahead` while no attribution is set: tracked packets cost nothing more."""


class NetworkTally:
    """Drops by reason and the queue-ahead attribution of one network (see the module docstring)."""

    __slots__ = ("engine", "drops", "_queue_ahead", "ahead")

    def __init__(self, engine: Engine):
        self.engine = engine
        self.drops: Counter[str] = Counter()
        self._queue_ahead: Any = None
        # ahead(port, pkt, now): a packet with FLAG_TRACKED was queued at port; charge the
        # traffic ahead of it. The attribution's own add, bound when it is set (the ports
        # call it once per tracked packet: no interpreted frame in between).
        self.ahead: Callable[[Port, SimPacket, int], None] = _unattributed

    @property
    def queue_ahead(self) -> Any:
        """The attribution of tracked packets' queueing (a :class:`panama.sim.qahead.QueueAhead`), or None."""
        return self._queue_ahead

    @queue_ahead.setter
    def queue_ahead(self, value: Any) -> None:
        self._queue_ahead = value
        self.ahead = _unattributed if value is None else value.add

    def drop(self, port: Port | None, pkt: SimPacket, reason: str, node: Node | None = None) -> None:
        """``pkt`` was discarded at ``port`` (or, before any port was chosen, at ``node``)."""
        self.drops[reason] += 1
        if port is not None:
            port.drops += 1
        trace = self.engine.trace
        if trace is not None:
            where = port.owner.name if port is not None else (node.name if node is not None else "?")
            peer = port.peer.name if port is not None else ""
            trace((self.engine.now, "drop", where, peer, pkt.kind, pkt.src, pkt.dst, pkt.seq, pkt.size_bytes, reason))
