"""Packet-level equivalence of the RTL datapath and the core accelerator (``panama hw verify``).

A seeded random stream for one accelerator is generated *closed loop against the core*
(:class:`panama.core.accelerator.Accelerator`, driven through the codec exactly as a
switch daemon does): several jobs with several trees each, some rooted here and some
with a parent; workers that send contributions inside a window, duplicate them, retransmit
them (``FLAG_RETRANSMIT``), send header-only acks, and lose some of the results they
should get (so retransmissions are answered from retained slots); a parent that returns
results for the partial sums sent up (some twice, some CE-marked or ECE-flagged); jobs
that arrive and leave mid-stream (share changes); foreign or malformed datagrams
(unknown job or tree, wrong port, corrupted header fields, wrong lengths); and datagrams
with a wrong key trailer (contributions, results and acks that would otherwise be taken,
another job's key, a wrong key on a malformed header), which the core's decoder rejects
as ``bad_key`` before the accelerator, with the keys of the installed jobs as a switch
daemon holds them; to the sender a bad-key datagram is a lost one. Payloads mix
normal floats with signed zeros, subnormals, huge values (overflow), infinities and NaNs.

The same control calls and datagrams then go through the RTL in Amaranth's simulator
(:class:`panama.hw.driver.HwAccelerator`), back to back. For every ingress datagram the
verdict (ok, or the drop reason) and every emitted datagram (bytes, via the codec;
destinations; ECN codepoint) must be equal. Payload floats compare bit for bit except
NaNs, which compare by NaN-ness and quiet bit (counted separately as ``nan_lanes_loose``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from panama.core import codec
from panama.core.accelerator import Accelerator
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet
from panama.hw.driver import HwAccelerator
from panama.hw.fp32 import same_float_bits
from panama.hw.layout import KEY_BYTES, HwConfig

BAD_KEY_SHARE = 0.03  # share of contributions, acks and results sent with a wrong key
CI_CONFIG = HwConfig(width=256, slots=16, payload_elems=8, max_trees=4, max_children=4, ports=8)


def _encode(packet: Packet, key: int) -> bytes:
    return codec.encode(packet, key) if KEY_BYTES else codec.encode(packet)


def _decode(data: bytes, ecn: int, keys: dict[int, int]) -> Packet:
    return codec.decode(data, ecn, keys=keys) if KEY_BYTES else codec.decode(data, ecn)


def _payload(rng: np.random.Generator, count: int) -> np.ndarray:
    x = rng.standard_normal(count).astype(np.float32) * np.float32(rng.choice([1e-3, 1.0, 1e3]))
    special = rng.random(count) < 0.08
    if special.any():
        pool = np.array(
            [
                0x00000000,
                0x80000000,
                0x00000001,
                0x80000001,
                0x007FFFFF,
                0x00400000,
                0x7F7FFFFF,
                0xFF7FFFFF,
                0x7F800000,
                0xFF800000,
                0x7FC00000,
                0x7F800001,
                0x00800000,
                0x3F800000,
                0xBF800000,
            ],
            dtype=np.uint32,
        ).view(np.float32)
        x[special] = rng.choice(pool, special.sum())
    return x


class _Scenario:
    """The stream generator: workers, a parent and foreign senders around one accelerator."""

    def __init__(self, seed: int, cfg: HwConfig):
        self.rng = np.random.default_rng(seed)
        self.cfg = cfg
        self.core = Accelerator(cfg.slots, cfg.payload_elems, name="core")
        self.hw = HwAccelerator(cfg, name="rtl")
        self.keys: dict[int, int] = {}
        self.trees: dict[tuple[int, int], dict] = {}
        self.next_job = 1
        self.workers = [f"w{i}" for i in range(cfg.ports - 2)]
        self.expected: list[tuple[str, list]] = []  # per datagram: (verdict, [(dests, bytes, ecn)])
        self.installs = 0
        self.removals = 0
        self.bad_keys = 0  # datagrams sent with a wrong key trailer

    # -- control
    def add_job(self):
        rng, job = self.rng, self.next_job
        self.next_job += 1
        ntrees = int(rng.integers(1, 3))
        if (len(self.core.jobs()) + 1) and self.cfg.slots // (len(self.core.jobs()) + 1) < ntrees:
            return
        if len(self.trees) + ntrees > self.cfg.max_trees:
            return
        key = int(rng.integers(0, 2**63))
        self.keys[job] = key
        self.hw.set_job_key(job, key)
        for tree_id in range(ntrees):
            nch = int(rng.integers(1, min(self.cfg.max_children, len(self.workers)) + 1))
            children = tuple(str(c) for c in rng.choice(self.workers, nch, replace=False))
            parent = None if rng.random() < 0.5 else "up"
            for acc in (self.core, self.hw):
                acc.install_tree(job, tree_id, children, parent)
            self.trees[(job, tree_id)] = dict(
                children=children,
                parent=parent,
                count=int(rng.integers(0, self.cfg.payload_elems + 1)),
                next_seq={c: 0 for c in children},
                got={c: set() for c in children},
                ack={c: 0 for c in children},
                sent={c: {} for c in children},
                partials=[],
            )
            self.installs += 1

    def remove_job(self):
        jobs = self.core.jobs()
        if len(jobs) <= 1:
            return
        job = int(self.rng.choice(jobs))
        for acc in (self.core, self.hw):
            acc.remove_job(job)
        for key in [k for k in self.trees if k[0] == job]:
            del self.trees[key]
        self.removals += 1

    # -- data
    def wrong_key(self, data: bytes) -> bytes:
        """``data`` with its key trailer changed (some bits flipped, never none)."""
        flip = int(self.rng.integers(1, 2**63)) << int(self.rng.integers(0, 2))
        key = int.from_bytes(data[len(data) - KEY_BYTES :], "big") ^ flip
        self.bad_keys += 1
        return data[: len(data) - KEY_BYTES] + key.to_bytes(KEY_BYTES, "big")

    def maybe_wrong_key(self, data: bytes) -> bytes:
        return self.wrong_key(data) if KEY_BYTES and self.rng.random() < BAD_KEY_SHARE else data

    def deliver(self, data: bytes, frm: str, ecn: int):
        drops = Counter(self.core.drops)
        unmatched = self.core.acks_unmatched
        installed = {job: self.keys[job] for job in self.core.jobs()}  # what a daemon's decoder checks
        try:
            packet = _decode(data, ecn, installed)
        except codec.CodecError as exc:
            verdict, emitted = "codec_" + exc.reason, []
        else:
            with np.errstate(all="ignore"):  # inf - inf and NaN payloads are part of the test
                out = self.core.receive(packet, frm)
            emitted = [(tuple(d), _encode(q, self.keys.get(q.job_id, 0)), q.ecn) for d, q in out]
            diff = self.core.drops - drops
            if diff:
                verdict = next(iter(diff))
            elif self.core.acks_unmatched != unmatched:
                verdict = "ack_unmatched"
            else:
                verdict = "ok"
            self._observe(packet, emitted)
        self.expected.append((verdict, emitted))
        self.hw.send(data, frm, ecn)

    def _observe(self, packet: Packet, emitted):
        """Workers take the results they are sent (losing some); the parent notes partials."""
        for dests, data, ecn in emitted:
            q = codec.decode(data, ecn)
            tree = self.trees.get((q.job_id, q.tree_id))
            if tree is None:
                continue
            if q.flags & FLAG_RESULT:
                for d in dests:
                    if d in tree["got"] and self.rng.random() > 0.1:
                        got = tree["got"][d]
                        got.add(q.seq)
                        while tree["ack"][d] in got:
                            tree["ack"][d] += 1
            elif not q.flags & FLAG_ACK:
                tree["partials"].append((q.seq, q.generation, q.count))

    def contribution(self, key, tree, child, kind):
        rng = self.rng
        ack = tree["ack"][child]
        window = 3
        nxt = tree["next_seq"][child]
        sent = tree["sent"][child]
        flags = 0
        if kind == "new" and nxt < ack + window:
            seq = nxt
            tree["next_seq"][child] += 1
            payload = _payload(rng, tree["count"])
            sent[seq] = payload
        else:
            pending = [s for s in sent if s >= ack]
            if not pending:
                return self.ack_packet(key, tree, child)
            seq = int(rng.choice(pending))
            payload = sent[seq]
            flags = FLAG_RETRANSMIT if kind != "dup" else 0
        cap = int(rng.choice([0xFFFF, 1 + int(rng.integers(0, 8))]))
        p = Packet(
            key[0],
            key[1],
            seq,
            seq // 3,
            tree["count"],
            flags,
            cap,
            min(ack, seq),
            CE if rng.random() < 0.1 else ECT0,
            payload if tree["count"] else None,
        )
        self.deliver(self.maybe_wrong_key(_encode(p, self.keys[key[0]])), child, p.ecn)

    def ack_packet(self, key, tree, child):
        ack = tree["ack"][child]
        p = Packet(key[0], key[1], ack, ack // 3, 0, FLAG_ACK, 0xFFFF, ack, ECT0)
        self.deliver(self.maybe_wrong_key(_encode(p, self.keys[key[0]])), child, ECT0)

    def parent_result(self, key, tree):
        if not tree["partials"]:
            return
        rng = self.rng
        seq, gen, count = tree["partials"][int(rng.integers(0, len(tree["partials"])))]
        flags = FLAG_RESULT | (FLAG_ECE if rng.random() < 0.2 else 0)
        p = Packet(
            key[0],
            key[1],
            seq,
            gen,
            count,
            flags,
            int(rng.integers(1, 0x10000)),
            0,
            CE if rng.random() < 0.2 else ECT0,
            _payload(rng, count) if count else None,
        )
        self.deliver(self.maybe_wrong_key(_encode(p, self.keys[key[0]])), "up", p.ecn)

    def foreign(self):
        rng = self.rng
        keys = list(self.trees)
        key = keys[int(rng.integers(0, len(keys)))]
        tree = self.trees[key]
        p = Packet(
            key[0],
            key[1],
            tree["ack"][tree["children"][0]],
            0,
            tree["count"],
            0,
            0xFFFF,
            0,
            ECT0,
            _payload(rng, tree["count"]) if tree["count"] else None,
        )
        data = bytearray(_encode(p, self.keys[key[0]]))
        frm = tree["children"][0]
        what = int(rng.integers(0, 10))
        if what == 0:
            data[0] ^= 0xFF  # bad magic
        elif what == 1:
            data[2] ^= 0x7  # bad version
        elif what == 2:
            data[3] |= 0x80  # unknown flag
        elif what == 3:
            data[27] = 1  # reserved
        elif what == 4:
            data = data[: len(data) - 4] if len(data) > 40 else data + b"\0\0\0\0"  # length != count
        elif what == 5:
            data[4:8] = (9999).to_bytes(4, "big")  # unknown job
        elif what == 6:
            data[8:10] = (77).to_bytes(2, "big")  # unknown tree
        elif what == 7:
            frm = "up" if tree["parent"] is None else "w%d" % (len(self.workers) - 1)  # not a child (maybe)
        elif what == 8 and KEY_BYTES:
            others = [k for j, k in self.keys.items() if j != key[0]]
            if others:  # another job's key
                data[len(data) - KEY_BYTES :] = int(rng.choice(others)).to_bytes(KEY_BYTES, "big")
                self.bad_keys += 1
            else:
                data = bytearray(self.wrong_key(bytes(data)))
        elif KEY_BYTES:
            data = bytearray(self.wrong_key(bytes(data)))
            data[0] ^= 0xFF  # bad magic and a wrong key: the codec reports the header first
        self.deliver(bytes(data), frm, ECT0)

    def step(self):
        rng = self.rng
        r = rng.random()
        if not self.trees or r < 0.004:
            self.add_job()
            return
        if r < 0.007:
            self.remove_job()
            if not self.trees:
                self.add_job()
            return
        keys = list(self.trees)
        key = keys[int(rng.integers(0, len(keys)))]
        tree = self.trees[key]
        r = rng.random()
        if r < 0.03:
            self.foreign()
        elif r < 0.12 and tree["parent"] is not None:
            self.parent_result(key, tree)
        else:
            child = tree["children"][int(rng.integers(0, len(tree["children"])))]
            r = rng.random()
            kind = "new" if r < 0.7 else "retx" if r < 0.85 else "dup" if r < 0.93 else "ack"
            if kind == "ack":
                self.ack_packet(key, tree, child)
            else:
                self.contribution(key, tree, child, kind)


def _same_datagram(a: bytes, b: bytes) -> tuple[bool, int]:
    """Equal bytes, or equal but for NaN payload lanes with the same quiet bit (count of those)."""
    if a == b:
        return True, 0
    if len(a) != len(b) or a[:28] != b[:28] or a[len(a) - KEY_BYTES :] != b[len(b) - KEY_BYTES :]:
        return False, 0
    end = len(a) - KEY_BYTES
    x = np.frombuffer(a[28:end], dtype="<f4")
    y = np.frombuffer(b[28:end], dtype="<f4")
    same = same_float_bits(x, y)
    if not same.all():
        return False, 0
    return True, int((x.view(np.uint32) != y.view(np.uint32)).sum())


def run_verify(packets: int, seed: int, cfg: HwConfig = CI_CONFIG, examples: int = 5) -> dict:
    """Generate ``packets`` datagrams from ``seed``, run both models, compare; a JSON-able dict."""
    sc = _Scenario(seed, cfg)
    sc.add_job()
    sc.add_job()
    while len(sc.expected) < packets:
        sc.step()
    outcomes = sc.hw.run()
    mismatches = 0
    loose = 0
    shown = []
    verdicts: Counter[str] = Counter()
    emitted = 0
    for i, ((want_verdict, want), got) in enumerate(zip(sc.expected, outcomes, strict=True)):
        verdicts[want_verdict] += 1
        emitted += len(want)
        ok = want_verdict == got.event and len(want) == len(got.emitted)
        if ok:
            for (wd, wb, we), (gd, gb, ge) in zip(want, got.emitted):
                same, n = _same_datagram(wb, gb)
                loose += n
                ok = ok and same and set(wd) == set(gd) and we == ge
        if not ok:
            mismatches += 1
            if len(shown) < examples:
                shown.append(
                    {
                        "packet": i,
                        "core": [want_verdict, [(list(d), b.hex(), e) for d, b, e in want]],
                        "rtl": [got.event, [(list(d), b.hex(), e) for d, b, e in got.emitted]],
                    }
                )
    stats = sc.hw.stats
    if stats.bad_key_drops != verdicts.get("codec_bad_key", 0):  # the datapath's counter (32 bits)
        mismatches += 1
        shown.append(
            {"packet": "bad_key_drops counter", "core": verdicts.get("codec_bad_key", 0), "rtl": stats.bad_key_drops}
        )
    return {
        "packets": len(sc.expected),
        "mismatches": mismatches,
        "emitted": emitted,
        "verdicts": dict(sorted(verdicts.items())),
        "nan_lanes_loose": loose,
        "installs": sc.installs,
        "removals": sc.removals,
        "bad_keys_sent": sc.bad_keys,
        "bad_key_drops_rtl": stats.bad_key_drops,
        "host_grow_requests": stats.host_grow_requests,
        "cycles": stats.cycles,
        "seed": seed,
        "config": {
            "width": cfg.width,
            "lanes": cfg.lanes,
            "slots": cfg.slots,
            "payload_elems": cfg.payload_elems,
            "max_trees": cfg.max_trees,
            "max_children": cfg.max_children,
            "ports": cfg.ports,
        },
        "key_trailer_bytes": KEY_BYTES,
        "examples": shown,
    }
