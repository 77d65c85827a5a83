"""The loopback floor of ``panama bench allreduce``: its arithmetic, and a small real measurement."""

import pytest

from panama.benchmarks import loopback_floor

COSTS = {"send_us": 10.0, "recv_us": 5.0}


@pytest.mark.parametrize(
    ("size_bytes", "workers", "block_bytes", "blocks"),
    [
        (4 * 65_504, 4, 65_504, 24.0),  # every rank sends 2 (n - 1) / n = 1.5 vectors of 4 blocks
        (65_504, 2, 65_504, 2.0),  # 2 ranks: each sends its half and gets the other half back
        (1_000, 8, 1_000, 14.0),
    ],
)
def test_ring_blocks(size_bytes, workers, block_bytes, blocks):
    assert loopback_floor.ring_blocks(size_bytes, workers, block_bytes) == pytest.approx(blocks)


@pytest.mark.parametrize(
    ("sends", "receives", "ms"),
    [(0, 0, 0.0), (100, 0, 1.0), (0, 200, 1.0), (1_000, 4_000, 30.0)],
)
def test_floor_ms(sends, receives, ms):
    assert loopback_floor.floor_ms(sends, receives, COSTS) == pytest.approx(ms)


def test_least_costs_take_the_cheapest_run_per_protocol():
    runs = [
        {"udp": {"send_us": 10.0, "recv_us": 4.0}, "tcp": {"send_us": 20.0, "recv_us": 8.0}},
        {"udp": {"send_us": 9.0, "recv_us": 6.0}, "tcp": {"send_us": 16.0, "recv_us": 10.0}},
    ]
    assert loopback_floor.least_costs(runs, "udp") == {"send_us": 10.0, "recv_us": 4.0}
    assert loopback_floor.least_costs(runs, "tcp") == {"send_us": 16.0, "recv_us": 10.0}


def test_measure_moves_every_block_and_keeps_the_cheapest_run():
    m = loopback_floor.measure(blocks=300, block_bytes=2_000, repeats=2)
    assert m["block_bytes"] == 2_000
    for proto in ("udp", "tcp"):
        r = m[proto]
        assert r["blocks"] == 300 and r["received"] == 300
        assert r["send_us"] > 0 and r["recv_us"] > 0
        assert len(r["totals_us"]) == 2
        assert r["send_us"] + r["recv_us"] == pytest.approx(min(r["totals_us"]))
