"""What one loopback hop costs with no protocol work, and what that means for an allreduce.

    python bench/bench_udp_floor.py              # 10,000 blocks of 65,504 bytes, UDP and TCP
    python bench/bench_udp_floor.py --runs 3     # median of 3

The measurement is :mod:`panama.benchmarks.loopback_floor` (``panama bench allreduce``
runs it before and after every run and reports the floor beside its ratio): CPU per
64 KB datagram sent and received by UDP, and per 64 KB streamed by TCP. Then: how many
datagrams one allreduce of ``--size-mb`` takes with ``--workers`` ranks in PANAMA's
one-rack and 2-tier local clusters (unicast everywhere: an upper count, since the leaves'
multicast results save sends), the blocks gloo's ring sends, and the CPU each costs at
this floor: a lower bound with zero Python and zero aggregation work.
"""

from __future__ import annotations

import argparse
import statistics

from panama.benchmarks import loopback_floor
from panama.benchmarks.allreduce import loopback_datagrams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    runs = [loopback_floor.measure(args.blocks) for _ in range(args.runs)]
    for r in runs:
        u, t = r["udp"], r["tcp"]
        print(
            f"  UDP {u['received']}/{u['blocks']} datagrams: send {u['send_us']:.1f} us, receive {u['recv_us']:.1f} us;"
            f" TCP: send {t['send_us']:.1f} us, receive {t['recv_us']:.1f} us per block"
        )
    udp = {k: statistics.median(r["udp"][k] for r in runs) for k in ("send_us", "recv_us")}
    tcp = {k: statistics.median(r["tcp"][k] for r in runs) for k in ("send_us", "recv_us")}
    size = int(args.size_mb * 1e6)
    print(
        f"floor per 64 KB block (median of {len(runs)}): UDP {udp['send_us'] + udp['recv_us']:.1f} us, "
        f"TCP {tcp['send_us'] + tcp['recv_us']:.1f} us of CPU"
    )
    print(f"{'allreduce':<36} {'blocks per allreduce':>20} {'floor CPU ms':>13}")
    for name, switches in (("PANAMA one rack (1 leaf)", 1), ("PANAMA 2 tiers (2 leaves, 2 spines)", 3)):
        hops = loopback_datagrams(size, args.workers, switches, trees=1 if switches == 1 else 2)
        print(f"{name:<36} {hops:>20,} {loopback_floor.floor_ms(hops, hops, udp):>13.0f}")
    ring = loopback_floor.ring_blocks(size, args.workers)
    print(f"{'gloo ring (TCP)':<36} {ring:>20,.0f} {loopback_floor.floor_ms(ring, ring, tcp):>13.0f}")
    print(f"({args.workers} workers, {args.size_mb:g} MB; `panama bench allreduce` counts PANAMA's sends as made)")


if __name__ == "__main__":
    main()
