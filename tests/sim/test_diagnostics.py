"""Mechanism diagnostics (panama.sim.diagnostics) on hand-built cases whose queueing is known."""

from __future__ import annotations

import numpy as np
import pytest
from sim_helpers import star

from panama.core.units import PS_PER_S, us
from panama.sim.diagnostics import pfc_by_tier, queues_by_tier, short_flow_delay
from panama.sim.engine import Engine
from panama.sim.network import KIND_OTHER, Network, NetworkConfig, SimPacket

MTU = 1500


def make(graph, config):
    eng = Engine()
    return eng, Network(eng, graph, config, rng=np.random.default_rng(0))


def test_a_10_to_1_gbps_burst_builds_and_drains_the_queue_we_expect():
    """h0 (10 Gb/s) sends N packets to h1 (1 Gb/s): the tor0->h1 queue rises to about N - N/10
    packets, then drains at 1 Gb/s; its time above K follows from that straight line."""
    n, k_bytes = 40, 15_000
    eng, net = make(star(2, rates={1: 1e9}), NetworkConfig(ecn_k_bytes=k_bytes))
    net.attach("h1", lambda p: None)
    sampler = net.sample_queues(us(1))
    for i in range(n):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, MTU, seq=i))
    eng.run()
    tiers = queues_by_tier(sampler.ports, sampler.samples)
    assert set(tiers) == {"tor->host"}  # the sampler sees switch output ports only
    q = tiers["tor->host"]
    assert q["ports"] == 2 and q["busiest_port"] == "tor0->h1"
    # peak: the last packet arrives after n serialisations at 10 Gb/s, by when about n/10
    # packets have left at 1 Gb/s (one more in service)
    assert (n - n // 10 - 2) * MTU <= q["max_bytes"] <= n * MTU
    # time above K: the backlog rises at 10 - 1 Gb/s until the last arrival (n x 1.2 µs),
    # then drains from its peak at 1 Gb/s (8 ns per byte); the samples span the whole
    # drain (n packets at 1 Gb/s); two ports' samples are pooled, only h1's is above K
    rise_s = n * MTU * 0.8e-9 - k_bytes / (9e9 / 8)
    fall_s = (q["max_bytes"] - k_bytes) * 8e-9
    expected = (rise_s + fall_s) / (n * MTU * 8e-9) / 2
    assert q["above_k_share"] == pytest.approx(expected, abs=0.03)
    assert q["p50_bytes"] == 0 < q["p99_bytes"] <= q["max_bytes"]  # the idle port tor0->h0 is half the samples


def test_no_marking_ports_report_no_time_above_k():
    eng, net = make(star(2, rates={1: 1e9}), NetworkConfig(ecn=False))
    net.attach("h1", lambda p: None)
    sampler = net.sample_queues(us(1))
    for i in range(5):
        net.send("h0", SimPacket(KIND_OTHER, 0, 1, MTU, seq=i))
    eng.run()
    assert queues_by_tier(sampler.ports, sampler.samples)["tor->host"]["above_k_share"] is None


def test_pfc_pause_time_by_direction_adds_up_to_the_network_counter():
    """A lossless 4-to-1 incast: the senders' NICs (host->tor) are paused, and the paused
    time per direction sums to the network-wide counter."""
    eng, net = make(star(5), NetworkConfig(lossless=True, switch_buffer_bytes=100_000))
    net.attach("h4", lambda p: None)
    for src in range(4):
        for i in range(60):
            net.send(f"h{src}", SimPacket(KIND_OTHER, src, 4, MTU, seq=i))
    eng.run()
    by_tier = pfc_by_tier(net.ports, PS_PER_S)
    counters = net.counters()
    assert counters["pfc_paused_ps"] > 0 and "host->tor" in by_tier
    assert sum(t["paused_s"] for t in by_tier.values()) == pytest.approx(counters["pfc_paused_ps"] / PS_PER_S)
    assert by_tier["host->tor"]["pauses"] > 0


def test_short_flow_delay_buckets_and_extra_delay():
    rows = [
        {"kind": "background", "size_bytes": 1_000, "fct_us": 30.0, "ideal_fct_us": 10.0},
        {"kind": "background", "size_bytes": 1_500, "fct_us": 50.0, "ideal_fct_us": 10.0},
        {"kind": "background", "size_bytes": 60_000, "fct_us": 200.0, "ideal_fct_us": 60.0},
        {"kind": "background", "size_bytes": 60_000, "fct_us": None, "ideal_fct_us": 60.0},  # unfinished
        {"kind": "ring", "size_bytes": 1_000, "fct_us": 999.0, "ideal_fct_us": 1.0},  # not background
    ]
    out = {b["bucket"]: b for b in short_flow_delay(rows)}
    assert out["<2KB"]["flows"] == 2 and out["<2KB"]["extra_delay_mean_us"] == pytest.approx(30.0)
    assert out["50-100KB"]["flows"] == 1 and out["50-100KB"]["extra_delay_p99_us"] == pytest.approx(140.0)
    assert out["2-10KB"]["flows"] == 0 and out["2-10KB"]["fct_p99_us"] is None
