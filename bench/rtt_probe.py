"""PANAMA worker RTT samples and retransmission timeouts of one scenario (pure Python).

    PANAMA_NO_EXTENSIONS=1 PYTHONPATH=src python bench/rtt_probe.py SCENARIO.toml [KEY=VALUE ...]

Wraps ``WorkerTransport._rtt_sample`` and ``handle_timer`` (so it needs the pure path)
and prints the RTT distribution and, at each timeout, the RTO, SRTT and the age of the
oldest packet in flight. Used for issue 18 (docs/experiments.md, 100 Gb/s)."""

from __future__ import annotations

import statistics
import sys
import tomllib

from panama.core import transport
from panama.sim.runner import run_scenario
from panama.sim.scenario import Scenario, load_scenario


def main(argv: list[str]) -> None:
    if transport.__file__.endswith(".so"):
        sys.exit("run with PANAMA_NO_EXTENSIONS=1")
    samples: list[float] = []
    timeouts: list[tuple[float, float, float]] = []
    cls = transport.WorkerTransport
    sample, timer = cls._rtt_sample, cls.handle_timer

    def rtt_sample(self, rtt):
        samples.append(rtt / 1e6)
        sample(self, rtt)

    def handle_timer(self, now):
        before, rto = self.stats["timeouts"], self.rto_ps
        oldest = max((now - s for s in self._inflight.values()), default=0)
        timer(self, now)
        if self.stats["timeouts"] > before:
            timeouts.append((rto / 1e6, (self._srtt or 0) / 1e6, oldest / 1e6))

    cls._rtt_sample, cls.handle_timer = rtt_sample, handle_timer
    data = load_scenario(argv[0]).model_dump()
    for kv in argv[1:]:
        key, value = kv.split("=", 1)
        *path, last = key.split(".")
        node = data
        for k in path:
            node = node[k]
        node[last] = tomllib.loads("v = " + value)["v"]
    run_scenario(Scenario.model_validate(data), progress=False, plots=False)
    q = statistics.quantiles(samples, n=100)
    print(f"rtt samples {len(samples)}: p50 {q[49]:.1f} p99 {q[98]:.1f} max {max(samples):.1f} us")
    print(f"timeouts {len(timeouts)}")
    if timeouts:
        med = [statistics.median(t[i] for t in timeouts) for i in range(3)]
        print(f"at a timeout (medians): rto {med[0]:.0f} us, srtt {med[1]:.1f} us, oldest in flight {med[2]:.0f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
