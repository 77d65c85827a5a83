"""The switch daemon's memory under many control connections (issue 35 item 4).

The data plane turns the cyclic collector off process-wide, and aiohttp leaves each closed
connection in reference cycles: before, a daemon kept ~1.1 KB per connection forever
(``bench/bench_daemon_connections.py``: 78.6 -> 100.5 MB over 20,000). The event loop now
collects them (``GC_INTERVAL_S``); this is the smaller version of that benchmark.
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path

from panama.runtime.cluster import LocalCluster


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _connections(addr, token: str, n: int) -> None:
    for _ in range(n):
        conn = http.client.HTTPConnection(addr[0], addr[1], timeout=10.0)
        try:
            conn.request("GET", "/health", headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
        finally:
            conn.close()


def test_daemon_rss_stays_flat_over_thousands_of_http_connections():
    """After 5,000 connections of warm-up (the garbage of one collection interval is the
    high-water mark), 6,000 more grow the daemon's RSS by less than 2 MB (before: ~1.1 KB
    each, 6.4 MB)."""
    from panama.runtime.switch.daemon import GC_INTERVAL_S

    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="WARNING") as lc:
        leaf = lc.procs["leaf0"]
        _connections(leaf.control, lc.token, 5000)
        time.sleep(2 * GC_INTERVAL_S)  # a collection pass has run since
        before = _rss_kb(leaf.pid)
        _connections(leaf.control, lc.token, 6000)
        time.sleep(2 * GC_INTERVAL_S)
        grown_kb = _rss_kb(leaf.pid) - before
    assert grown_kb < 2048, f"daemon RSS grew {grown_kb} KB over 6,000 connections"
