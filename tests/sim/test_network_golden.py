"""Determinism and a golden regression of one tiny seeded scenario.

Re-bless after an intended behaviour change with
``PANAMA_BLESS=1 python -m pytest tests/sim/test_network_golden.py``
and explain the change in the commit message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from panama.core.topology import leaf_spine
from panama.core.units import us
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig

GOLDEN = Path(__file__).parent / "golden" / "network_tiny.json"


def tiny(seed: int, lossless: bool) -> dict:
    rng = np.random.default_rng(seed)
    eng = Engine()
    topo = leaf_spine(2, 2, 3)
    cfg = NetworkConfig(
        lossless=lossless,
        queue_limit_bytes=12 * 1500,
        ecn_k_bytes=6 * 1500,
        switch_buffer_bytes=150_000 if lossless else None,
    )
    net = Network(eng, topo, cfg, rng=rng)
    tcp = Dctcp(net, rng=rng)
    starts = rng.integers(0, us(20), size=8)
    sizes = [3_000, 40_000, 120_000, 9_000, 60_000, 1_500, 200_000, 30_000]
    pairs = [
        ("h0", "h5"),
        ("h1", "h5"),
        ("h2", "h5"),
        ("h3", "h5"),
        ("h4", "h5"),
        ("h0", "h3"),
        ("h1", "h4"),
        ("h5", "h0"),
    ]
    for (a, b), size, t in zip(pairs, sizes, starts):
        tcp.start_flow(a, b, size, int(t))
    sampler = net.sample_queues(us(2))
    events = eng.run()
    c = net.counters()
    return {
        "events": events,
        "end_ps": eng.now,
        "counters": c,
        "busiest_queue": sampler.stats()["port"],
        "flows": [
            {
                k: f.record()[k]
                for k in (
                    "flow_id",
                    "src",
                    "dst",
                    "size_bytes",
                    "start_ps",
                    "finish_ps",
                    "ideal_fct_ps",
                    "retransmits",
                    "timeouts",
                    "fast_retransmits",
                    "ece_acks",
                )
            }
            for f in tcp.flows
        ],
    }


def test_same_seed_gives_identical_results():
    for lossless in (False, True):
        assert tiny(5, lossless) == tiny(5, lossless)


def test_golden_tiny_scenario():
    got = {"lossy": tiny(1, False), "lossless": tiny(1, True)}
    got = json.loads(json.dumps(got))  # tuples -> lists, as stored
    if os.environ.get("PANAMA_BLESS") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert GOLDEN.exists(), f"{GOLDEN} missing: bless it with PANAMA_BLESS=1"
    want = json.loads(GOLDEN.read_text())
    assert got == want
    # The scenario exercises what it is meant to: every flow completes, the lossy run
    # drops and recovers, the lossless run pauses and never drops.
    assert all(f["finish_ps"] is not None for run in got.values() for f in run["flows"])
    assert got["lossy"]["counters"]["drops_total"] > 0
    assert got["lossless"]["counters"]["drops_total"] == 0
    assert got["lossless"]["counters"]["pfc_pauses"] > 0
