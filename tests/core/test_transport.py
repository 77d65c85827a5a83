"""Worker transport driven by hand with explicit ``now`` (picoseconds)."""

import numpy as np
import pytest

from panama.core.packet import CE, ECT0, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet
from panama.core.transport import DUPTHRESH, TransportError, WorkerTransport
from panama.core.units import ms, us


def result_for(pkt, payload=None, flags=FLAG_RESULT, cap=0xFFFF, ecn=ECT0):
    return Packet(pkt.job_id, pkt.tree_id, pkt.seq, pkt.generation, pkt.count, flags, cap, 0, ecn, payload)


def test_round_robin_over_trees_and_sequence_numbers():
    w = WorkerTransport(3, 0, [10, 11, 12], payload_elems=4, cc="fixed", cc_options={"initial_window": 100})
    data = np.arange(30, dtype=np.float32)
    w.start(0, data)
    pkts = w.poll(0)
    assert [p.tree_id for p in pkts] == [10, 11, 12, 10, 11, 12, 10, 11]  # 8 packets of 4 floats
    assert [p.seq for p in pkts] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert pkts[-1].count == 2 and pkts[-1].payload.tolist() == [28, 29]
    assert all(p.ecn == ECT0 and p.generation == 1 and p.ack == 0 for p in pkts)
    for p in reversed(pkts):
        w.receive(result_for(p, p.payload * 2), us(5))
    assert w.done and np.array_equal(w.result(), data * 2)
    # next generation continues each tree's sequence numbers; ack says what we hold
    w.start(us(10), data)
    again = w.poll(us(10))
    assert [p.seq for p in again[:3]] == [3, 3, 2] and again[0].ack == 3 and again[2].ack == 2


def test_window_limits_sequence_range_and_results_open_it():
    # dupthresh=3: the out-of-order result below is reordering here, not a loss to repair
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc="fixed", cc_options={"initial_window": 3}, dupthresh=3)
    w.start(0, np.ones(10, np.float32))
    first = w.poll(0)
    assert [p.seq for p in first] == [0, 1, 2]
    assert w.poll(1) == []
    w.receive(result_for(first[1], np.ones(1, np.float32)), 2)  # out of order: seq 1
    assert w.poll(3) == []  # ack still 0: seq 3 is outside [0, 3)
    w.receive(result_for(first[0], np.ones(1, np.float32)), 4)
    assert [p.seq for p in w.poll(5)] == [3, 4]


def test_cap_from_results_clamps_window():
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc="dctcp", cc_options={"initial_window": 10})
    w.start(0, np.ones(100, np.float32))
    pkts = w.poll(0)
    assert len(pkts) == 10
    w.receive(result_for(pkts[0], np.ones(1, np.float32), cap=4), 1)
    assert w.windows() == [4]
    assert len(w.poll(2)) == 0  # seqs 1..9 outstanding, ack 1 + window 4 -> nothing new


def test_timeout_retransmits_with_flag_backs_off_and_gives_up():
    w = WorkerTransport(1, 0, 1, payload_elems=1, initial_rto_ps=ms(1), min_rto_ps=ms(1), max_retries=2)
    w.start(0, np.ones(2, np.float32))
    w.poll(0)
    assert w.timer() == ms(1)
    w.handle_timer(ms(1))
    retx = w.poll(ms(1))
    assert len(retx) == 2 and all(p.flags & FLAG_RETRANSMIT for p in retx)
    assert w.timer() == ms(1) + ms(2)  # backed off
    assert w.windows() == [1]
    w.handle_timer(ms(3))
    w.poll(ms(3))
    with pytest.raises(TransportError, match="after 2 retransmissions"):
        w.handle_timer(ms(100))


def test_downstream_ce_is_echoed_and_only_ece_drives_the_window():
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc_options={"initial_window": 4})
    w.start(0, np.ones(50, np.float32))
    pkts = w.poll(0)
    w.receive(result_for(pkts[0], np.ones(1, np.float32), ecn=CE), 1)
    nxt = w.poll(2)
    assert nxt[0].ecn == CE and all(p.ecn == ECT0 for p in nxt[1:])
    assert w.stats["ce_results"] == 1 and w.stats["ece_results"] == 0
    w.receive(result_for(pkts[1], np.ones(1, np.float32), flags=FLAG_RESULT | FLAG_ECE), 3)
    assert w.stats["ece_results"] == 1


def test_foreign_and_duplicate_results_are_ignored_and_counted():
    w = WorkerTransport(1, 0, 1, payload_elems=2)
    w.start(0, np.ones(4, np.float32))
    p0, p1 = w.poll(0)
    good = result_for(p0, np.full(2, 5, np.float32))
    w.receive(good, 1)
    w.receive(good, 2)
    w.receive(Packet(2, 0, 1, 1, 2, FLAG_RESULT, payload=np.zeros(2, np.float32)), 3)
    w.receive(Packet(1, 9, 1, 1, 2, FLAG_RESULT, payload=np.zeros(2, np.float32)), 3)
    w.receive(Packet(1, 0, 1, 7, 2, FLAG_RESULT, payload=np.zeros(2, np.float32)), 3)
    w.receive(Packet(1, 0, 1, 1, 1, FLAG_RESULT, payload=np.zeros(1, np.float32)), 3)
    w.receive(Packet(1, 0, 99, 1, 2, FLAG_RESULT, payload=np.zeros(2, np.float32)), 3)
    w.receive(p1, 3)  # a contribution, not a result
    assert w.stats["ignored"] == {
        "duplicate": 1,
        "wrong_job": 1,
        "unknown_tree": 1,
        "old_generation": 1,
        "bad_count": 1,
        "out_of_range": 1,
        "not_result": 1,
    }
    assert not w.done
    w.receive(result_for(p1, np.full(2, 6, np.float32)), 4)
    assert w.result().tolist() == [5, 5, 6, 6]


def test_bad_use():
    with pytest.raises(ValueError):
        WorkerTransport(1, 0, 0)
    w = WorkerTransport(1, 0, 1)
    with pytest.raises(TypeError, match="float32"):
        w.start(0, np.ones(3))
    w.start(0, np.ones(3, np.float32))
    with pytest.raises(TransportError, match="still running"):
        w.start(0, np.ones(3, np.float32))
    with pytest.raises(TransportError, match="not finished"):
        w.result()
    empty = WorkerTransport(1, 0, 1)
    empty.start(0, np.ones(0, np.float32))
    assert empty.done and empty.result().shape == (0,)


def test_start_writes_into_a_given_out_vector_and_checks_it():
    w = WorkerTransport(1, 0, 1, payload_elems=4)
    data = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    w.start(0, data, out=out)
    for p in w.poll(0):
        w.receive(result_for(p, p.payload + 1), 1)
    assert w.result() is out and out.tolist() == [1, 2, 3, 4, 5, 6]
    with pytest.raises(TypeError, match="writable float32 vector of 6"):
        w.start(2, data, out=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="overlap"):
        w.start(2, data[:5], out=data[1:])  # shifted: a result would overwrite an unsent contribution


def test_in_place_reads_every_contribution_before_its_result_overwrites_it():
    """out=data: a packet with a result is never sent again (not by a fast retransmit, a
    probe or a timer), so every resend carries the contribution, never the sum."""
    w = WorkerTransport(1, 0, 1, payload_elems=2, cc="fixed", cc_options={"initial_window": 8}, min_pto_ps=us(50))
    data = np.arange(8, dtype=np.float32)
    w.start(0, data, out=data)
    sent = w.poll(0)
    assert [p.seq for p in sent] == [0, 1, 2, 3]
    resent = []  # (seq, payload) as a driver serialises them, at once

    def send(packets):
        resent.extend((p.seq, p.payload.tolist()) for p in packets)

    w.receive(result_for(sent[0], sent[0].payload * 10), us(10))
    w.receive(result_for(sent[2], sent[2].payload * 10), us(11))  # above a gap: seq 1 is resent at once
    send(w.poll(us(11)))
    w.receive(result_for(sent[1], sent[1].payload * 10), us(12))  # the first copy of 1 was late, not lost
    assert data.tolist() == [0, 10, 20, 30, 40, 50, 6, 7]
    w.handle_timer(us(100))  # the probe: the lowest packet without a result, 3
    send(w.poll(us(100)))
    rto_at = w.timer()
    w.handle_timer(rto_at)  # and its RTO
    send(w.poll(rto_at))
    assert resent == [(1, [2, 3]), (3, [6, 7]), (3, [6, 7])]  # contributions, never sums
    w.receive(result_for(sent[3], np.array([60, 70], np.float32)), rto_at + 1)
    assert w.done and w.result() is data and data.tolist() == [0, 10, 20, 30, 40, 50, 60, 70]


@pytest.mark.parametrize("dupthresh", [1, 3])
def test_fast_retransmit_on_a_gap_of_dupthresh_results(dupthresh):
    w = WorkerTransport(
        1,
        0,
        1,
        payload_elems=1,
        cc="fixed",
        cc_options={"initial_window": 8},
        initial_rto_ps=ms(100),
        dupthresh=dupthresh,
    )
    w.start(0, np.ones(8, np.float32))
    sent = w.poll(0)
    one = np.ones(1, np.float32)
    # seq 1's result (or contribution) was lost; the results of 2, 3, 4 come back
    w.receive(result_for(sent[0], one), us(10))
    for k in range(2, 1 + dupthresh):
        w.receive(result_for(sent[k], one), us(10 + k))
        assert w.poll(us(10 + k)) == []  # fewer results above a gap than the threshold: could be reordering
    k = 1 + dupthresh
    w.receive(result_for(sent[k], one), us(10 + k))
    [again] = w.poll(us(10 + k))
    assert (again.seq, again.flags & FLAG_RETRANSMIT) == (1, FLAG_RETRANSMIT) and again.ack == 1
    assert w.stats["fast_retransmits"] == 1 and w.stats["timeouts"] == 0
    w.receive(result_for(sent[k + 1], one), us(20))  # more results above the same gap: no second copy
    assert w.poll(us(20)) == []
    # recovery: the resent 1 comes back, the ack moves past every result with no gap above: nothing more
    w.receive(result_for(again, one), us(30))
    assert w.poll(us(30)) == [] and w.stats["fast_retransmits"] == 1
    for j in range(k + 2, 8):
        w.receive(result_for(sent[j], one), us(40))
    assert w.done and w.stats["retransmissions"] == 1


def test_the_default_threshold_is_one_result_above_a_gap():
    """A tree's results return in order on its fixed path: the first one above a gap resends."""
    assert DUPTHRESH == 1
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc="fixed", cc_options={"initial_window": 4})
    w.start(0, np.ones(4, np.float32))
    sent = w.poll(0)
    w.receive(result_for(sent[1], np.ones(1, np.float32)), us(10))
    [again] = w.poll(us(10))
    assert again.seq == 0 and again.flags & FLAG_RETRANSMIT
    with pytest.raises(ValueError, match="dupthresh"):
        WorkerTransport(1, 0, 1, dupthresh=0)


def test_a_result_marked_retransmit_is_no_rtt_sample():
    """Karn across the tree: a result that waited for someone's retransmission does not move the RTO."""
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc="fixed", cc_options={"initial_window": 4}, min_rto_ps=us(100))
    w.start(0, np.ones(4, np.float32))
    sent = w.poll(0)
    one = np.ones(1, np.float32)
    w.receive(result_for(sent[0], one), us(200))  # a clean sample: 200 us
    assert w.srtt_ps == us(200)
    # a peer's contribution to seq 1 was resent: the result waited for its RTO
    w.receive(result_for(sent[1], one, flags=FLAG_RESULT | FLAG_RETRANSMIT), ms(50))
    assert w.srtt_ps == us(200)
    w.receive(result_for(sent[2], one), ms(50) + us(1))
    assert w.srtt_ps != us(200)  # an unmarked result is sampled again


def test_partial_ack_in_recovery_resends_the_next_hole():
    w = WorkerTransport(1, 0, 1, payload_elems=1, cc="fixed", cc_options={"initial_window": 10})
    w.start(0, np.ones(10, np.float32))
    sent = w.poll(0)
    one = np.ones(1, np.float32)
    for k in (2, 4, 5, 6):  # 0, 1 and 3 lost
        w.receive(result_for(sent[k], one), us(10))
    [first] = w.poll(us(10))
    assert first.seq == 0
    w.receive(result_for(first, one), us(20))  # partial ack: 1 is still a hole below 2..6
    [second] = w.poll(us(20))
    assert second.seq == 1
    w.receive(result_for(second, one), us(30))  # ack moves to 3, a hole below 4..6
    [third] = w.poll(us(30))
    assert third.seq == 3 and w.stats["fast_retransmits"] == 3


def test_reordering_within_the_threshold_resends_nothing():
    w = WorkerTransport(1, 0, 2, payload_elems=1, cc="fixed", cc_options={"initial_window": 8}, dupthresh=3)
    w.start(0, np.ones(16, np.float32))
    sent = w.poll(0)
    one = np.ones(1, np.float32)
    rng = np.random.default_rng(4)
    # every result arrives at most 2 places later than in order, per tree
    order = sorted(range(len(sent)), key=lambda k: k // 2 + rng.uniform(0, 2.5))
    for n, k in enumerate(order):
        w.receive(result_for(sent[k], one), us(10 + n))
        assert all(p.flags & FLAG_RETRANSMIT == 0 for p in w.poll(us(10 + n)))
    assert w.done and w.stats["fast_retransmits"] == 0


def test_backoff_is_per_packet_and_fresh_packets_keep_the_measured_rto():
    w = WorkerTransport(
        1,
        0,
        1,
        payload_elems=1,
        cc="fixed",
        cc_options={"initial_window": 2},
        initial_rto_ps=us(100),
        min_rto_ps=us(100),
        max_rto_ps=ms(100),
    )
    w.start(0, np.ones(4, np.float32))
    first = w.poll(0)  # seqs 0 and 1
    one = np.ones(1, np.float32)
    w.receive(result_for(first[0], one), us(10))  # 0 answered, 1 lost: the window opens to seq 2
    [fresh] = w.poll(us(10))
    assert fresh.seq == 2 and w.timer() == us(100)  # seq 1 is due first, at its RTO
    w.handle_timer(us(100))
    [again] = w.poll(us(100))
    assert again.seq == 1 and again.flags & FLAG_RETRANSMIT
    assert w.timer() == us(110)  # the fresh packet: sent at 10 us + the unchanged RTO
    w.handle_timer(us(110))
    [again2] = w.poll(us(110))
    assert again2.seq == 2
    assert w.timer() == us(300)  # seq 1, resent once at 100 us, waits 2 x RTO
    w.handle_timer(us(300))
    [third] = w.poll(us(300))
    assert third.seq == 1 and w.timer() == us(310)  # seq 2, resent once at 110 us
    w.handle_timer(us(310))
    w.poll(us(310))
    assert w.timer() == us(300 + 400)  # seq 1, resent twice: 4 x RTO
    assert w.rto_ps == us(100)  # no connection-wide back-off
    w.receive(result_for(first[1], one), us(320))
    assert w.timer() == us(310 + 400)  # seq 1 answered: only seq 2 is left


def _probing(trees=1, window=4, **options):
    return WorkerTransport(
        1,
        0,
        trees,
        payload_elems=1,
        cc="fixed",
        cc_options={"initial_window": window},
        initial_rto_ps=ms(100),
        min_rto_ps=ms(100),
        max_rto_ps=ms(1000),
        **options,
    )


def test_no_tail_loss_probes_by_default():
    w = _probing()
    w.start(0, np.ones(3, np.float32))
    w.poll(0)
    assert w.timer() == ms(100)  # only the RTO


def test_a_lost_tail_packet_is_probed_after_the_pto_not_the_rto():
    w = _probing(min_pto_ps=ms(5))
    w.start(0, np.ones(3, np.float32))
    sent = w.poll(0)
    assert w.timer() == ms(100)  # no RTT sample yet: the first PTO is the RTO
    one = np.ones(1, np.float32)
    w.receive(result_for(sent[0], one), us(1000))  # SRTT 1 ms: PTO = max(2 ms, 5 ms)
    w.receive(result_for(sent[1], one), us(1500))  # the last packet's result is lost
    assert w.timer() == us(1500) + ms(5)
    w.handle_timer(us(1500) + ms(5))
    [probe] = w.poll(us(1500) + ms(5))
    assert probe.seq == 2 and probe.flags & FLAG_RETRANSMIT
    assert w.stats["probes"] == 1 and w.stats["timeouts"] == 0 and w.windows() == [4]
    # one probe per quiet spell; the probed packet is due again one RTO later, no back-off
    assert w.timer() == us(6500) + ms(100)
    w.receive(result_for(probe, one, flags=FLAG_RESULT | FLAG_RETRANSMIT), ms(8))
    assert w.done and w.timer() is None


def test_results_that_keep_coming_re_arm_the_probe_and_a_probe_resends_each_trees_lowest():
    w = _probing(trees=2, window=3, min_pto_ps=ms(5))
    w.start(0, np.ones(12, np.float32))
    sent = w.poll(0)  # 3 per tree
    one = np.ones(1, np.float32)
    by = {(p.tree_id, p.seq): p for p in sent}
    w.receive(result_for(by[(0, 0)], one), ms(1))
    w.poll(ms(1))
    for k, now in ((1, ms(4)), (2, ms(8))):  # never 5 ms without a result
        assert w.timer() < now + ms(5)
        w.receive(result_for(by[(0, k)], one), now)
        assert w.timer() > now
        w.poll(now)
    assert w.stats["probes"] == 0
    due = w.timer()
    w.handle_timer(due)
    probes = w.poll(due)
    assert sorted((p.tree_id, p.seq) for p in probes) == [(0, 3), (1, 0)]  # each tree's lowest outstanding
    assert all(p.flags & FLAG_RETRANSMIT for p in probes) and w.stats["probes"] == 2
    with pytest.raises(ValueError, match="min_pto_ps"):
        WorkerTransport(1, 0, 1, min_pto_ps=0)


def test_rto_bounds_must_be_integers():
    """The RTO bounds are integer picoseconds on both paths (the compiled clamp reads them as C integers)."""
    t = WorkerTransport(1, 0, min_rto_ps=np.int64(1_000), max_rto_ps=10_000)
    assert type(t.min_rto_ps) is int and t.min_rto_ps == 1_000
    with pytest.raises(ValueError, match="min_rto_ps must be an integer number of ps"):
        WorkerTransport(1, 0, min_rto_ps=1e6, max_rto_ps=10**9)
