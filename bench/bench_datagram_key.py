"""What the data-plane key costs per datagram, and what a per-datagram MAC would cost instead.

    python bench/bench_datagram_key.py [--repeat 5]

Times, per datagram, on this machine (median of ``--repeat`` runs of N calls each):
decoding a datagram without and with the key check (``codec.decode(..., keys=)``), the
trailer lookup a daemon does per send, and keyed MACs over the whole datagram that a
per-datagram authentication would need on every hop (HMAC-SHA256 and keyed BLAKE2b from
the standard library), for a full runtime datagram (16,367 floats) and a 1500-byte one
(361 floats).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import statistics
import time

import numpy as np

from panama.core import codec
from panama.core.packet import Packet


def per_call_us(fn, n: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    key = 0x1234_5678_9ABC_DEF1
    secret = key.to_bytes(8, "big") * 4
    keys = {7: key}
    trailers = {7: codec.key_trailer(key)}
    print(
        f"{'floats':>7} {'bytes':>6} {'decode us':>10} {'+key us':>8} {'trailer us':>11} {'HMAC-SHA256 us':>15} "
        f"{'BLAKE2b-128 us':>15}"
    )
    for count in (codec.MAX_PAYLOAD_ELEMS, codec.DEFAULT_PAYLOAD_ELEMS):
        pkt = Packet(7, 1, 100, 3, count, 0, payload=np.ones(count, np.float32))
        wire = codec.encode(pkt, key)
        buf = bytearray(codec.datagram_size(codec.MAX_PAYLOAD_ELEMS) + 1)
        buf[: len(wire)] = wire
        view = memoryview(buf)[: len(wire)]
        floats = codec.payload_view(buf)
        n = 20_000
        plain = per_call_us(lambda: codec.decode(view, 2, floats), n, args.repeat)
        keyed = per_call_us(lambda: codec.decode(view, 2, floats, keys), n, args.repeat)
        lookup = per_call_us(lambda: trailers.get(pkt.job_id, b""), n, args.repeat)
        mac = per_call_us(lambda: hmac.digest(secret, view, "sha256"), max(200, n // 20), args.repeat)
        b2 = per_call_us(
            lambda: hashlib.blake2b(view, key=secret, digest_size=16).digest(), max(200, n // 20), args.repeat
        )
        print(
            f"{count:>7} {len(wire):>6} {plain:>10.2f} {keyed - plain:>8.2f} {lookup:>11.3f} {mac:>15.1f} {b2:>15.1f}"
        )


if __name__ == "__main__":
    main()
