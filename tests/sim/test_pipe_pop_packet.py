"""``PacketPipe.pop_packet`` (the ports' arrival loops): the same packets in the same order
as ``pop_head`` on both implementations of the FIFO component (``sim/fifos.py`` and its C
twin), and on the C twin a TypeError, not a bad cast, for an entry that is not a
SimPacket."""

from __future__ import annotations

import pytest

from panama.sim import fifos
from panama.sim.fifos import PacketPipe
from panama.sim.packet import SimPacket


def test_pop_packet_pops_the_head_in_order_through_growth():
    pipe, model = PacketPipe(), []
    for i in range(40):  # past the C ring's first growth (16 slots)
        p = SimPacket(kind=0, src=0, dst=1, size_bytes=100 + i)
        p.arrive_ps = i
        pipe.push(i, p)
        model.append(p)
        if i % 3 == 2:
            assert pipe.pop_packet() is model.pop(0)
    while model:
        assert pipe.head_time() == model[0].arrive_ps
        assert pipe.pop_packet() is model.pop(0)
    with pytest.raises(IndexError):
        pipe.pop_packet()


@pytest.mark.skipif(fifos.IMPLEMENTATION != "C", reason="only the C twin checks the type")
def test_pop_packet_rejects_other_objects_on_the_c_twin():
    class _Pkt:
        arrive_ps = 0

    pipe = PacketPipe()
    pipe.push(0, _Pkt())
    with pytest.raises(TypeError):
        pipe.pop_packet()
    assert len(pipe) == 0
