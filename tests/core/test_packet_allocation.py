"""A compiled ``Packet`` lives on a free list and outside the cyclic garbage collector (as
``SimPacket``): an accelerator allocates one per emission. Interpreted, it is a plain
dataclass, which the collector tracks; the fields and dataclass behaviour are the same."""

from __future__ import annotations

import dataclasses
import gc

from panama import _ext
from panama.core.packet import Packet


def test_a_packet_is_untracked_by_the_collector_exactly_when_compiled():
    p = Packet(1, 2, 3, 4, 5)
    assert gc.is_tracked(p) is not _ext.compiled()


def test_a_packet_keeps_its_dataclass_behaviour():
    p = Packet(1, 2, 3, 4, 5, flags=8)
    assert p == Packet(1, 2, 3, 4, 5, flags=8) and p != Packet(1, 2, 3, 4, 6, flags=8)
    assert dataclasses.replace(p, seq=9).seq == 9 and p.seq == 3
    assert repr(p).startswith("Packet(job_id=1, tree_id=2, seq=3")
    for _ in range(3000):  # more than the free list holds: reused and fresh objects alike
        q = Packet(7, 0, 1, 0, 2)
        assert q.payload is None and q.ack == 0
