"""Simulator memory per host, per port and per flow (tracemalloc), for the scale section
of docs/simulator-network.md.

    python bench/bench_memory.py               # fat-trees k = 4, 8, 16; 10,000 flows
    PANAMA_NO_EXTENSIONS=1 python bench/bench_memory.py

Network: bytes allocated while building ``Network(Engine(), fat_tree(k), lossless)``
(hosts, switches, ports, forwarding tables), divided by hosts and by ports (two per
link). Flow: bytes per DCTCP flow object (sender and receiver state, timer) created
with ``start_flow`` on the k=4 network, before it sends anything; a flow in flight
adds about its window in packet objects.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from panama import _ext
from panama.core.topology import fat_tree
from panama.sim.dctcp import Dctcp, DctcpConfig
from panama.sim.engine import Engine
from panama.sim.network import Network, NetworkConfig
from panama.sim.packet import KIND_DATA, SimPacket


def measure(fn):
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = fn()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return obj, after - before


def main() -> None:
    print(f"compiled: {_ext.compiled()}")
    for k in (4, 8, 16):
        topo = fat_tree(k)
        net, b = measure(lambda: Network(Engine(), topo, NetworkConfig(lossless=True), rng=np.random.default_rng(1)))
        hosts, ports = len(net.hosts), len(net.ports)
        print(
            f"fat-tree k={k:2d}: {hosts:5d} hosts {len(net.switches):4d} switches {ports:6d} ports: "
            f"{b / 2**20:7.1f} MiB = {b / hosts / 1024:6.1f} KiB/host, {b / ports:7.0f} B/port"
        )
    net = Network(Engine(), fat_tree(4), NetworkConfig(lossless=True), rng=np.random.default_rng(1))
    tcp = Dctcp(net, DctcpConfig(), rng=np.random.default_rng(2))
    n = 10_000
    _, b = measure(lambda: [tcp.start_flow(i % 16, (i + 5) % 16, 100_000, 0) for i in range(n)])
    print(f"DCTCP flow: {b / n:6.0f} B/flow ({n:,} flows; scheduled start event included)")
    _, b = measure(lambda: [SimPacket(KIND_DATA, 0, 1, 1500) for _ in range(n)])
    print(f"SimPacket: {b / n:6.0f} B/packet in flight")


if __name__ == "__main__":
    main()
