"""Burst statistics of PANAMA traffic (panama.sim.bursts) on a hand-built fan-out."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from sim_helpers import star

from panama.core.packet import FLAG_RESULT
from panama.core.units import us
from panama.sim.bursts import BurstMeter
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig, SimPacket
from panama.sim.packet import KIND_PANAMA


def test_a_known_fan_out_gives_the_packets_per_microsecond_we_expect():
    """h0 sends three 100-byte results back to back (0.08 µs each at 10 Gb/s, 1 µs links):
    they reach tor0 at 1.08, 1.16 and 1.24 µs, all in the bin [1, 2) µs, and the switch's
    hook copies each to h1 and h2; a fourth result at 10 µs lands alone in [11, 12). One
    gradient goes to h1 only. Per port: 3 results in one bin, then 1."""
    eng = Engine()
    net = Network(eng, star(3), NetworkConfig(), rng=np.random.default_rng(0))
    for h in ("h1", "h2"):
        net.attach(h, lambda p: None)

    def fan_out(pkt, frm):
        if pkt.inner.flags & FLAG_RESULT:
            copy = SimPacket(KIND_PANAMA, -1, -1, pkt.size_bytes, inner=pkt.inner)
            return [("h1", pkt), ("h2", copy)]
        return [("h1", pkt)]

    net.set_packet_hook("tor0", fan_out)
    meter = BurstMeter(eng)
    meter.install(net, ["tor0"])
    result, gradient = SimpleNamespace(flags=FLAG_RESULT), SimpleNamespace(flags=0)
    for _ in range(3):
        net.send("h0", SimPacket(KIND_PANAMA, 0, -1, 100, inner=result))
    eng.at(us(10), lambda: net.send("h0", SimPacket(KIND_PANAMA, 0, -1, 100, inner=result)))
    eng.at(us(20), lambda: net.send("h0", SimPacket(KIND_PANAMA, 0, -1, 100, inner=gradient)))
    eng.run()
    s = meter.summary()
    res = s["result"]["tor->host"]
    assert res["ports"] == 2 and res["packets"] == 8 and res["busy_bins"] == 4
    assert res["max_per_us"] == 3 and res["p99_per_us"] == 3 and res["mean_per_us"] == 2.0
    assert res["max_at_us"] == 1.0 and res["max_port"] == "tor0->h1"
    grad = s["gradient"]["tor->host"]
    assert grad == {
        "ports": 1,
        "packets": 1,
        "busy_bins": 1,
        "mean_per_us": 1.0,
        "p99_per_us": 1,
        "max_per_us": 1,
        "max_port": "tor0->h1",
        "max_at_us": 21.0,
    }


def test_switches_without_a_panama_hook_are_left_alone():
    eng = Engine()
    net = Network(eng, star(2), NetworkConfig(), rng=np.random.default_rng(0))
    meter = BurstMeter(eng)
    meter.install(net, ["tor0"])
    assert net.switch("tor0").hooks[KIND_PANAMA] is None
    assert meter.summary() == {"gradient": {}, "result": {}}


def test_the_meter_is_off_by_default_and_changes_nothing_when_on():
    """The golden tiny scenario under PANAMA with ``burst_bin_us = 1``: bursts are reported
    and every other output is
    that of the run without the meter."""
    from pathlib import Path

    from panama.sim.outputs import NONDETERMINISTIC_KEYS
    from panama.sim.runner import run_scenario
    from panama.sim.scenario import load_scenario

    base = load_scenario(Path(__file__).parent / "golden_sim" / "tiny.toml").with_scheme("panama")
    off = run_scenario(base, progress=False).summary
    on = run_scenario(base.model_copy(update={"burst_bin_us": 1.0}), progress=False).summary
    assert off["diagnostics"]["panama_bursts"] == {}
    bursts = on["diagnostics"].pop("panama_bursts")
    off["diagnostics"].pop("panama_bursts")
    assert {k: v for k, v in on.items() if k not in NONDETERMINISTIC_KEYS} == {
        k: v for k, v in off.items() if k not in NONDETERMINISTIC_KEYS
    }
    assert bursts["gradient"] and bursts["result"]
    assert all(v["max_per_us"] >= v["p99_per_us"] >= 1 for t in bursts.values() for v in t.values())
