"""The component panama.sim.placement: packets on cache lines (compiled), nothing moved
(interpreted); the same results either way (tests/sim/test_compiled.py)."""

from __future__ import annotations

import re

import pytest
from sim_helpers import python_child

from panama.sim import placement
from panama.sim.packet import SimPacket
from panama.sim.ports import Port

compiled_only = pytest.mark.skipif(placement.IMPLEMENTATION != "C", reason="only the C twin places objects")


def _packets(n: int) -> list[SimPacket]:
    return [SimPacket(0, i, i + 1, 1500, flow_hash=i, flags=0x1001) for i in range(n)]


@compiled_only
def test_every_packet_starts_on_a_line_and_keeps_its_fields():
    pkts = _packets(5_000)
    assert {id(p) % 64 for p in pkts} == {0}
    assert [(p.src, p.dst, p.flow_hash, p.flags, p.kind, p.arrive_ps) for p in pkts[:3]] == [
        (i, i + 1, i, 0x1001, 0, 0) for i in range(3)
    ]


@compiled_only
def test_every_pipe_starts_on_a_line():
    from panama.sim.fifos import PacketPipe

    assert {id(PacketPipe()) % 64 for _ in range(100)} == {0}


@compiled_only
def test_freed_packets_make_room_for_the_next_ones():
    pkts = _packets(20_000)
    first = {id(p) for p in pkts}
    reserved = placement.reserved_bytes()
    assert reserved >= 20_000 * 128
    del pkts
    again = _packets(20_000)
    assert placement.reserved_bytes() == reserved  # no new chunk: the freed blocks serve
    assert {id(p) for p in again} == first
    assert {id(p) % 64 for p in again} == {0}


@compiled_only
@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (SimPacket, "SimPacket is placed already"),
        (Port, "Port can be subclassed (declare it final)"),
        (type("Plain", (), {}), "Plain is not an extension type (a class defined in Python)"),
        (3, "3 is not a class"),
    ],
)
def test_a_type_that_cannot_be_placed_is_refused_by_name(cls, why):
    with pytest.raises(TypeError, match="^on_cache_lines: " + re.escape(why)):
        placement.on_cache_lines(cls)


def test_the_python_twin_places_nothing():
    code = (
        "from panama.sim import placement as p; from panama.sim.packet import SimPacket; "
        "print(p.IMPLEMENTATION, p.on_cache_lines(SimPacket) is SimPacket, p.reserved_bytes())"
    )
    assert python_child(code, pure=True).split() == ["python", "True", "0"]
