"""Switch daemon RSS over many HTTP connections (issue 35: a daemon kept ~1.1 KB per connection).

    python bench/bench_daemon_connections.py [--connections 20000] [--sample-every 2000] [--json FILE]

Starts a local cluster (1 leaf, 1 spine), then opens ``--connections`` HTTP connections to
the leaf daemon's control port one after the other, each an authenticated ``GET /health``
and a close, as probes and installs are. The daemon's RSS (``/proc/PID/status`` VmRSS) is
read before the first connection and after every ``--sample-every``; the table and the
growth from the first sample after warm-up (the first ``--sample-every`` connections) to the
last are printed, with the verdict against the 5 MB bound of issue 35.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from pathlib import Path

from panama.runtime.cluster import LocalCluster

BOUND_MB = 5.0


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def one_connection(addr: tuple[str, int], token: str) -> None:
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=10.0)
    try:
        conn.request("GET", "/health", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/health answered HTTP {resp.status}")
    finally:
        conn.close()


def measure(connections: int, sample_every: int) -> dict:
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, log_level="WARNING") as lc:
        proc = lc.procs["leaf0"]
        samples = [(0, rss_kb(proc.pid))]
        start = time.monotonic()
        for i in range(1, connections + 1):
            one_connection(proc.control, lc.token)
            if i % sample_every == 0 or i == connections:
                time.sleep(0.2)  # let the daemon close its side of the last connections
                samples.append((i, rss_kb(proc.pid)))
        seconds = time.monotonic() - start
    warm = samples[1][1] if len(samples) > 2 else samples[0][1]
    growth_mb = (samples[-1][1] - warm) / 1024
    return {
        "connections": connections,
        "seconds": round(seconds, 1),
        "rss_kb": samples,
        "growth_after_warmup_mb": round(growth_mb, 2),
        "bytes_per_connection_after_warmup": round(
            (samples[-1][1] - warm) * 1024 / max(1, connections - samples[1][0]) if len(samples) > 2 else 0.0, 1
        ),
        "flat": growth_mb <= BOUND_MB,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=20_000)
    ap.add_argument("--sample-every", type=int, default=2_000)
    ap.add_argument("--json", type=Path, default=None, help="Also write the result here.")
    args = ap.parse_args()
    res = measure(args.connections, args.sample_every)
    for n, kb in res["rss_kb"]:
        print(f"{n:>8} connections  RSS {kb / 1024:8.1f} MB")
    print(
        f"growth after warm-up: {res['growth_after_warmup_mb']:.2f} MB "
        f"({res['bytes_per_connection_after_warmup']:.0f} B per connection) in {res['seconds']:.0f} s: "
        f"{'flat' if res['flat'] else 'NOT flat'} (bound {BOUND_MB:g} MB)"
    )
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
