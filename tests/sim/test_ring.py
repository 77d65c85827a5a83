"""Ring allreduce schedule over DCTCP flows."""

from __future__ import annotations

import numpy as np
import pytest

from panama.core.topology import parse_topology
from panama.sim.dctcp import Dctcp
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig
from panama.sim.ring import RingAllreduce, ring_chunk_bytes, ring_steps


def test_step_and_chunk_formulas():
    assert ring_steps(2) == 2 and ring_steps(8) == 14
    assert ring_chunk_bytes(100, 4) == 25 and ring_chunk_bytes(101, 4) == 26


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_dependencies_and_completion(n):
    eng = Engine()
    net = Network(
        eng,
        parse_topology("leaf-spine:leaves=2,spines=1,hosts_per_leaf=3"),
        NetworkConfig(),
        rng=np.random.default_rng(0),
    )
    tcp = Dctcp(net, rng=np.random.default_rng(1))
    hosts = [f"h{i}" for i in range(n)]
    done: list[tuple[int, int]] = []
    ring = RingAllreduce(tcp, hosts, 30_000, lambda r: done.append((r, eng.now)), name="r")
    for rank in range(n):
        ring.start(rank, 0)
    eng.run()
    assert sorted(r for r, _ in done) == list(range(n))
    steps = ring_steps(n)
    assert len(ring.flows) == n * steps
    by = {}
    for f in ring.flows:
        _, it, step, rank = f.tag.split(":")
        by[(int(step[4:]), int(rank[1:]))] = f
        assert f.size_bytes == ring_chunk_bytes(30_000, n)
        assert net.host_names[f.dst] == hosts[(hosts.index(net.host_names[f.src]) + 1) % n]
    for (step, rank), f in by.items():
        if step == 0:
            continue
        # Step k+1 starts only after the rank's own step-k send and its predecessor's step-k send completed.
        assert f.start_ps >= by[(step - 1, rank)].finish_ps
        assert f.start_ps >= by[(step - 1, (rank - 1) % n)].finish_ps
    # A rank is done when its last send and last receipt are done.
    for rank, t in done:
        assert t == max(by[(steps - 1, rank)].finish_ps, by[(steps - 1, (rank - 1) % n)].finish_ps)


def test_ranks_may_run_ahead_into_the_next_iteration():
    eng = Engine()
    net = Network(
        eng,
        parse_topology("leaf-spine:leaves=1,spines=1,hosts_per_leaf=3"),
        NetworkConfig(),
        rng=np.random.default_rng(0),
    )
    tcp = Dctcp(net, rng=np.random.default_rng(1))
    finished: dict[int, int] = {}
    ring = None

    def on_done(rank):
        finished[rank] = finished.get(rank, 0) + 1
        if finished[rank] < 3:
            ring.start(rank, finished[rank])  # no compute: straight into the next iteration

    ring = RingAllreduce(tcp, ["h0", "h1", "h2"], 10_000, on_done)
    for rank in range(3):
        ring.start(rank, 0)
    eng.run()
    assert finished == {0: 3, 1: 3, 2: 3}
    assert len(ring.flows) == 3 * 3 * ring_steps(3)
    with pytest.raises(ValueError):
        RingAllreduce(tcp, ["h0"], 10, on_done)
