"""Batch API (panama.core.batch): identical to feeding the accelerator one by one."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from panama.core import codec
from panama.core.accelerator import Accelerator
from panama.core.batch import BatchReceiver, receive_batch, receive_results
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet
from panama.core.transport import WorkerTransport

PE = 6
CHILDREN = ("a", "b", "c", "d")
KEYS = {1: 11, 2: 22, 3: 33}  # job 3 is never installed: unknown job


def _install(acc, fanouts):
    # job 1: two trees (tree 0 a root, tree 1 below parent "up"); job 2: one tree.
    acc.install_tree(1, 0, CHILDREN[: fanouts[0]], None)
    acc.install_tree(1, 1, CHILDREN[: fanouts[1]], "up")
    acc.install_tree(2, 0, CHILDREN[: fanouts[2]], None)


def _stream(seed: int, n: int, fanouts) -> list[tuple[bytes, int, object]]:
    """Random datagrams: contributions (many duplicates, retransmits, stale and future
    seqs, partial counts), acks, results from the parent, wrong sources, unknown jobs and
    trees, wrong keys. Returns (datagram, ecn, source)."""
    rng = random.Random(seed)
    out = []
    acks = {}
    for _ in range(n):
        job = rng.choice((1, 1, 1, 2, 2, 3))
        tree = 0 if job != 1 else rng.choice((0, 1))
        if rng.random() < 0.03:
            tree = 7  # unknown tree
        fan = fanouts[0 if job != 1 or tree != 1 else 1] if job == 1 else fanouts[2]
        seq = rng.randrange(0, 12)
        count = PE if rng.random() < 0.8 else 1 + (seq % PE)  # a seq keeps its count (mostly)
        src = rng.choice(CHILDREN[:fan]) if rng.random() < 0.95 else rng.choice(("x", "up", "d"))
        base = acks.get((job, tree, src), 0)
        kind = rng.random()
        flags = 0
        if kind < 0.06 and job == 1 and tree == 1:
            src, flags = "up", FLAG_RESULT | (FLAG_ECE if rng.random() < 0.3 else 0)
            ack = 0
        elif kind < 0.12:
            flags, count, seq = FLAG_ACK, 0, min(base + rng.randrange(0, 3), 11)
            ack = seq
            acks[(job, tree, src)] = max(base, ack)
        else:
            if rng.random() < 0.15:
                flags |= FLAG_RETRANSMIT
            ack = min(seq, base + rng.randrange(0, 3)) if rng.random() < 0.9 else seq + 1  # bad ack
            if ack <= seq:
                acks[(job, tree, src)] = max(base, ack)
        gen = 1 if rng.random() < 0.97 else 2
        cap = rng.choice((0xFFFF, 0xFFFF, 3, 1))
        payload = np.array([rng.uniform(-1e3, 1e3) for _ in range(count)], dtype=np.float32)
        if count and rng.random() < 0.1:
            payload[rng.randrange(count)] = np.float32(rng.choice((1e30, -1e30, 1e-30)))
        key = KEYS[job] if rng.random() < 0.97 else 99  # bad key
        pkt = Packet(job, tree, seq, gen, count, flags, cap, ack, ECT0, payload if count else None)
        ecn = CE if rng.random() < 0.1 else ECT0
        out.append((codec.encode(pkt, key), ecn, src))
        if rng.random() < 0.1:  # an immediate duplicate of the same datagram
            out.append(out[-1])
    return out


def _serialise(out) -> list:
    return [(dests, codec.encode(p)) for dests, p in out]


def _decode(stream, buf_sink):
    """Decode like the daemon: payloads are views into one buffer per datagram."""
    pkts, srcs, bad = [], [], 0
    for data, ecn, src in stream:
        buf = bytearray(data)
        buf_sink.append(buf)
        try:
            pkts.append(codec.decode(memoryview(buf), ecn, None, {k: v for k, v in KEYS.items()}))
        except codec.CodecError:
            bad += 1
            continue
        srcs.append(src)
    return pkts, srcs, bad


def _live_rows(acc):
    rows = {}
    for key, tree in acc._trees.items():
        for seq, slot in tree.slots.items():
            rows[(key, seq)] = (slot.state, slot.nseen, slot.row[: slot.count].tobytes())
    return rows


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 400),
    fanouts=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(2, 4)),
    memory=st.sampled_from((6, 9, 16, 64)),
    chunks=st.lists(st.integers(1, 64), min_size=1, max_size=20),
    copy=st.booleans(),
    vector_min=st.sampled_from((None, 0, 1, 4)),
)
def test_batch_equals_sequential(seed, n, fanouts, memory, chunks, copy, vector_min):
    stream = _stream(seed, n, fanouts)
    keep: list = []
    pkts, srcs, _ = _decode(stream, keep)
    seq_acc = Accelerator(memory, PE, copy_payloads=copy)
    bat_acc = Accelerator(memory, PE, copy_payloads=copy)
    _install(seq_acc, fanouts)
    _install(bat_acc, fanouts)
    expected, got = [], []
    batch = BatchReceiver(bat_acc, vector_min=vector_min)
    i, c = 0, 0
    while i < len(pkts):
        size = chunks[c % len(chunks)]
        c += 1
        for p, s in zip(pkts[i : i + size], srcs[i : i + size]):
            expected.append(_serialise(seq_acc.receive(p, s)))
            got.append(_serialise(batch.receive(p, s)))  # serialised at once, like a driver
        batch.flush()
        assert _live_rows(bat_acc) == _live_rows(seq_acc)
        i += size
    assert got == expected
    assert bat_acc.stats() == seq_acc.stats()
    bat_acc.check_invariants()


def test_vectorised_flush_is_bit_identical_and_ordered():
    """Many pending contributions per slot, summed by phases: bit for bit the
    sequential left-to-right float32 sums (values chosen so re-association differs)."""
    acc, ref = Accelerator(64, 4), Accelerator(64, 4)
    kids = tuple(f"w{i}" for i in range(8))
    for a in (acc, ref):
        a.install_tree(1, 0, kids, "up")
    vals = [np.float32(v) for v in (1e8, 1.0, -1e8, 1.0, 3e-3, 7.0, -2.5, 1e7)]
    batch = BatchReceiver(acc, vector_min=1)
    for seq in range(20):
        for w in range(7):  # 7 of 8 children: every slot stays pending
            p = Packet(1, 0, seq, 1, 4, 0, 0xFFFF, 0, ECT0, np.full(4, vals[(w + seq) % 8], np.float32))
            assert batch.receive(p, kids[w]) == ref.receive(p, kids[w])
    assert batch.deferred == 140
    batch.flush()
    assert batch.vector_flushes == 6  # phases 1..6 add; phase 0 is the fresh copy
    assert _live_rows(acc) == _live_rows(ref)
    # re-association would give another answer for at least one slot
    assert any(
        np.float32(sum(np.float64(vals[(w + s) % 8]) for w in range(7))) != ref._trees[(1, 0)].slots[s].row[0]
        for s in range(20)
    )


def test_receive_batch_one_call_and_emit_order():
    acc, ref = Accelerator(16, 3), Accelerator(16, 3)
    for a in (acc, ref):
        a.install_tree(5, 0, ("a", "b"), None)
    pkts = [Packet(5, 0, s, 1, 3, 0, 0xFFFF, 0, ECT0, np.arange(3, dtype=np.float32) * (s + 1)) for s in range(4)]
    stream = [(p, src) for p in pkts for src in ("a", "b")]
    seen = []
    outs = receive_batch(acc, [p for p, _ in stream], [s for _, s in stream], emit=lambda i, o: seen.append(i))
    assert seen == [1, 3, 5, 7]
    want = [ref.receive(p, s) for p, s in stream]
    assert [_serialise(o) for o in outs] == [_serialise(o) for o in want]
    with pytest.raises(ValueError):
        receive_batch(acc, pkts, ["a"])


def test_receive_results_feeds_the_transport_in_order():
    tr = WorkerTransport(1, 0, [0], payload_elems=2)
    x = np.arange(5, dtype=np.float32)
    tr.start(0, x)
    sent = tr.poll(0)
    results = [
        Packet(1, 0, p.seq, p.generation, p.count, FLAG_RESULT, 8, 0, ECT0, p.payload * 2) for p in sent if p.count
    ]
    assert receive_results(tr, list(reversed(results)) + results, 1) == len(results)
    assert tr.done and tr.result().tolist() == (x * 2).tolist()
