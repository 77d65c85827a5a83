"""The opcode counter behind ``bench/bench_core.py --opcodes`` and ``bench/bench_sim.py --opcodes``."""

import sys

from panama.benchmarks.opcodes import count_opcodes


def _helper(n):
    total = 0
    for i in range(n):
        total += i
    return total


def test_counts_callees_by_name_but_not_the_driver_and_stops_tracing():
    def driver():
        for _ in range(50):  # the driver's own loop is not counted
            _helper(10)

    counts = count_opcodes(driver)
    assert set(counts) == {"_helper"}
    once = count_opcodes(lambda: _helper(10))["_helper"]
    assert counts["_helper"] == 50 * once and once > 10
    assert count_opcodes(lambda: _helper(20))["_helper"] > once  # grows with the work
    assert sys.gettrace() is None
