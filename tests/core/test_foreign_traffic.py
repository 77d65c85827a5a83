"""Garbage bytes and foreign packets around running jobs: counted drops, results stay exact."""

import numpy as np

from panama.core import codec
from panama.core.accelerator import Accelerator
from panama.core.codec import CodecError
from panama.core.packet import FLAG_RESULT, FLAG_RETRANSMIT, Packet
from panama.core.transport import WorkerTransport


def test_garbage_and_foreign_packets_do_not_disturb_two_jobs():
    rng = np.random.default_rng(7)
    acc = Accelerator(256, 16)
    jobs = {1: ["a0", "a1", "a2"], 2: ["b0", "b1"]}
    inputs, workers = {}, {}
    for job_id, names in jobs.items():
        acc.install_tree(job_id, 0, names, None)
        for rank, name in enumerate(names):
            inputs[name] = rng.standard_normal(1000).astype(np.float32)
            w = WorkerTransport(job_id, rank, 1, payload_elems=16)
            w.start(0, inputs[name])
            workers[name] = w
    decode_errors = 0
    queue = [(name, p) for name, w in workers.items() for p in w.poll(0)]
    now = 0
    while queue:
        now += 1
        name, pkt = queue.pop(0)
        # the real packet, wire-encoded and decoded like the runtime does
        for destinations, out in acc.receive(codec.decode(codec.encode(pkt)), name):
            for to in destinations:
                workers[to].receive(codec.decode(codec.encode(out)), now)
                queue.extend((to, p) for p in workers[to].poll(now))
        # garbage bytes
        try:
            codec.decode(rng.bytes(int(rng.integers(0, 80))))
        except CodecError:
            decode_errors += 1
        # foreign packets: a non-child claiming job 1, an unknown job, a forged result
        forged = Packet(1, 0, pkt.seq, pkt.generation, pkt.count, 0, payload=np.full(pkt.count, 1e6, np.float32))
        assert acc.receive(forged, "mallory") == ()
        assert acc.receive(Packet(77, 0, 0, 1, 1, payload=np.ones(1, np.float32)), "a0") == ()
        assert acc.receive(Packet(2, 0, pkt.seq, 1, pkt.count, FLAG_RESULT, payload=forged.payload), "b0") == ()
        assert acc.receive(Packet(1, 5, 0, 1, 1, FLAG_RETRANSMIT, payload=np.ones(1, np.float32)), "a0") == ()
    assert all(w.done for w in workers.values())
    for names in jobs.values():
        ref = np.sum([inputs[n].astype(np.float64) for n in names], axis=0)
        outs = [workers[n].result() for n in names]
        assert all(o.tobytes() == outs[0].tobytes() for o in outs)
        assert np.allclose(outs[0], ref, rtol=1e-5, atol=1e-5)
    assert decode_errors > 0
    assert acc.drops["not_child"] > 0 and acc.drops["unknown_job"] > 0
    assert acc.drops["not_parent"] > 0 and acc.drops["unknown_tree"] > 0
    acc.check_invariants()
