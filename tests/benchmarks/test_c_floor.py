"""bench/sim_c_floor.py's C loop is the heapq baseline loop of ``panama bench sim`` in C:
same hops, same final busy-until time on every link."""

import sys
from pathlib import Path

import pytest

from panama.benchmarks.sim import ACK_BYTES, DATA_BYTES, DELAY_PS, RATE_BPS, minimal_loop, ps_per_byte

pyximport = pytest.importorskip("pyximport")
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def c_loop(tmp_path_factory):
    importers = pyximport.install(language_level=3, build_dir=str(tmp_path_factory.mktemp("pyx")))
    sys.path.insert(0, str(BENCH))
    try:
        from c_floor_loop import c_loop
    finally:
        sys.path.remove(str(BENCH))
        pyximport.uninstall(*importers)
    return c_loop


@pytest.mark.parametrize("n_hops, n_flows, window", [(1, 4, 32), (50_000, 4, 32), (20_000, 3, 5)])
def test_the_c_loop_moves_the_same_hops_as_the_heapq_loop(c_loop, n_hops, n_flows, window):
    busy: list[int] = []
    hops, _ = minimal_loop(n_hops, n_flows, window, busy_out=busy)
    ppb = ps_per_byte(RATE_BPS)
    c_hops, _, c_busy = c_loop(n_hops, n_flows, window, ppb, DELAY_PS, DATA_BYTES, ACK_BYTES)
    assert (c_hops, c_busy) == (hops, busy)
    assert len(busy) == 2 * n_flows + 2 and max(busy) > 0
