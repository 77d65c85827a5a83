"""Accelerator unit tests with hand-built packets (no time, no network)."""

import numpy as np
import pytest

from panama.core import accelerator as A
from panama.core.accelerator import Accelerator, AcceleratorError
from panama.core.packet import CE, ECT0, FLAG_ECE, FLAG_RESULT, FLAG_RETRANSMIT, Packet


def flat(acc, packet, from_node):
    """What ``acc`` sends for ``packet``, one ``(neighbour, packet)`` pair per copy."""
    return tuple(A.per_destination(acc.receive(packet, from_node)))


def contrib(seq, values, *, job=1, tree=0, gen=1, ack=0, ecn=ECT0, cap=0xFFFF, flags=0):
    values = np.asarray(values, dtype=np.float32)
    return Packet(job, tree, seq, gen, len(values), flags, cap, ack, ecn, values)


def test_single_tier_sum_ecn_or_and_cap_min():
    acc = Accelerator(16, 4)
    acc.install_tree(1, 0, ["a", "b", "c"], None)
    assert flat(acc, contrib(0, [1, 2], cap=100), "a") == ()
    assert flat(acc, contrib(0, [10, 20], ecn=CE), "b") == ()
    out = flat(acc, contrib(0, [100, 200], cap=3), "c")
    assert [to for to, _ in out] == ["a", "b", "c"]
    for _, pkt in out:
        assert pkt.flags & FLAG_RESULT and pkt.flags & FLAG_ECE
        assert pkt.cwnd_cap == 3
        assert pkt.payload.tolist() == [111, 222]
    # memory share: 16 slots, one job one tree -> target 16, one slot kept for the
    # oldest packet, advertised cap (16 - 1) // 2 = 7
    assert acc.tree_status(1, 0)["cwnd_cap"] == 7


def test_duplicate_never_added_twice_and_retransmit_answered_unicast():
    acc = Accelerator(16, 4)
    acc.install_tree(1, 0, ["a", "b"], None)
    flat(acc, contrib(0, [1]), "a")
    assert flat(acc, contrib(0, [1]), "a") == ()
    assert flat(acc, contrib(0, [1], flags=FLAG_RETRANSMIT), "a") == ()  # still aggregating: dropped
    assert acc.drops[A.DUPLICATE] == 2
    out = flat(acc, contrib(0, [2]), "b")
    assert [p.payload[0] for _, p in out] == [3, 3]
    again = flat(acc, contrib(0, [2], flags=FLAG_RETRANSMIT), "b")
    assert [(to, p.payload[0], p.flags & FLAG_RESULT) for to, p in again] == [("b", 3, FLAG_RESULT)]
    assert acc.retransmits_answered == 1


def test_ecn_or_never_turns_ect_mix_into_ce():
    acc = Accelerator(4, 2)
    acc.install_tree(1, 0, ["a", "b"], "up")
    flat(acc, contrib(0, [1], ecn=1), "a")  # ECT(1)
    [(to, partial)] = flat(acc, contrib(0, [1], ecn=ECT0), "b")
    assert to == "up" and partial.ecn == ECT0


def two_tier():
    leaf = Accelerator(32, 4, name="leaf")
    root = Accelerator(32, 4, name="root")
    leaf.install_tree(1, 0, ["w0", "w1"], "root")
    root.install_tree(1, 0, ["leaf", "other"], None)
    return leaf, root


def test_two_tier_partial_up_result_down_and_retransmissions():
    leaf, root = two_tier()
    flat(leaf, contrib(5, [1, 1], ack=5), "w0")
    [(to, partial)] = flat(leaf, contrib(5, [2, 2], ack=5, ecn=CE), "w1")
    assert to == "root" and partial.payload.tolist() == [3, 3] and partial.ecn == CE and partial.ack == 5
    assert flat(root, partial, "leaf") == ()
    out = flat(root, contrib(5, [10, 10], ack=5), "other")
    to_leaf = [p for to, p in out if to == "leaf"][0]
    assert to_leaf.flags & FLAG_ECE
    # worker w1 times out before the result arrives: the leaf re-sends its partial upward
    [(to, resent)] = flat(leaf, contrib(5, [2, 2], ack=5, flags=FLAG_RETRANSMIT), "w1")
    assert to == "root" and resent.flags & FLAG_RETRANSMIT
    # the root already has the result: it answers the leaf alone
    [(to, answer)] = flat(root, resent, "leaf")
    assert to == "leaf" and answer.payload.tolist() == [13, 13]
    down = flat(leaf, to_leaf, "root")
    assert sorted(to for to, _ in down) == ["w0", "w1"]
    assert all(p.payload.tolist() == [13, 13] and p.flags & FLAG_ECE for _, p in down)
    assert flat(leaf, answer, "root") == ()  # duplicate result
    assert leaf.drops[A.DUPLICATE_RESULT] == 1
    # results only come from the parent
    assert flat(leaf, to_leaf, "w0") == ()
    assert leaf.drops[A.NOT_PARENT] == 1


def test_a_round_with_a_retransmitted_contribution_is_marked_up_and_down_the_tree():
    """Karn across the tree: FLAG_RETRANSMIT on any contribution reaches every worker's result."""
    leaf, root = two_tier()
    flat(leaf, contrib(5, [1, 1], ack=5), "w0")
    # w1's first copy was lost; its retransmission completes the leaf's slot
    [(to, partial)] = flat(leaf, contrib(5, [2, 2], ack=5, flags=FLAG_RETRANSMIT), "w1")
    assert to == "root" and partial.flags & FLAG_RETRANSMIT and partial.payload.tolist() == [3, 3]
    assert flat(root, partial, "leaf") == ()  # a first partial with the flag is a contribution, not a request
    out = flat(root, contrib(5, [10, 10], ack=5), "other")
    assert all(p.flags & FLAG_RETRANSMIT and p.payload.tolist() == [13, 13] for _, p in out)
    to_leaf = [p for to, p in out if to == "leaf"][0]
    down = flat(leaf, to_leaf, "root")  # the relaying switch keeps the mark
    assert sorted(to for to, _ in down) == ["w0", "w1"] and all(p.flags & FLAG_RETRANSMIT for _, p in down)
    # a clean round carries no mark
    flat(leaf, contrib(6, [1, 1], ack=6), "w0")
    [(_, clean)] = flat(leaf, contrib(6, [1, 1], ack=6), "w1")
    flat(root, clean, "leaf")
    out = flat(root, contrib(6, [1, 1], ack=6), "other")
    assert not clean.flags & FLAG_RETRANSMIT and all(not p.flags & FLAG_RETRANSMIT for _, p in out)


def test_slots_freed_when_every_child_acknowledged_then_stale():
    acc = Accelerator(8, 2)
    acc.install_tree(1, 0, ["a", "b"], None)
    for seq in range(3):
        flat(acc, contrib(seq, [1]), "a")
        flat(acc, contrib(seq, [1]), "b")
    assert acc.used_slots == 3
    flat(acc, contrib(3, [1], ack=2), "a")
    assert acc.used_slots == 4  # b has not acknowledged yet
    flat(acc, contrib(3, [1], ack=3), "b")
    assert acc.used_slots == 2  # seqs 0 and 1 freed (min ack is 2)
    assert flat(acc, contrib(0, [1], flags=FLAG_RETRANSMIT), "a") == ()
    assert acc.drops[A.STALE] == 1
    acc.check_invariants()


@pytest.mark.parametrize(
    "packet,src,reason",
    [
        (contrib(0, [1], job=9), "a", A.UNKNOWN_JOB),
        (contrib(0, [1], tree=3), "a", A.UNKNOWN_TREE),
        (contrib(0, [1]), "mallory", A.NOT_CHILD),
        (contrib(0, [1, 2, 3, 4, 5]), "a", A.TOO_LARGE),
        (contrib(0, [1], ack=1), "a", A.BAD_ACK),
        (Packet(1, 0, 0, 1, 1, FLAG_RESULT, 5, 0, ECT0, np.ones(1, np.float32)), "a", A.NOT_PARENT),
    ],
)
def test_foreign_packets_are_counted_drops_without_state_change(packet, src, reason):
    acc = Accelerator(8, 4)
    acc.install_tree(1, 0, ["a", "b"], None)
    flat(acc, contrib(0, [5]), "a")
    before = acc.stats()
    assert flat(acc, packet, src) == ()
    assert acc.drops[reason] == 1
    after = acc.stats()
    assert after["used_slots"] == before["used_slots"] and after["contributions"] == before["contributions"]
    [_, (_, pkt)] = flat(acc, contrib(0, [7]), "b")
    assert pkt.payload.tolist() == [12]


def test_generation_and_count_mismatch_dropped():
    acc = Accelerator(8, 4)
    acc.install_tree(1, 0, ["a", "b"], None)
    flat(acc, contrib(0, [1, 1], gen=4), "a")
    assert flat(acc, contrib(0, [1, 1], gen=3), "b") == ()
    assert flat(acc, contrib(0, [1], gen=4), "b") == ()
    assert acc.drops[A.GENERATION_MISMATCH] == 1 and acc.drops[A.COUNT_MISMATCH] == 1


def test_share_exceeded_is_dropped_and_memory_never_overflows():
    acc = Accelerator(4, 2)
    acc.install_tree(1, 0, ["a", "b"], None)
    # a's packets 1..3 (its oldest, 0, was lost) take every slot but the last one
    for seq in range(1, 4):
        flat(acc, contrib(seq, [1]), "a")
    assert flat(acc, contrib(4, [1]), "a") == ()
    assert acc.drops[A.SHARE_EXCEEDED] == 1
    assert acc.used_slots == 3
    # the liveness rule: a's oldest packet (seq == ack) still gets the last slot
    assert flat(acc, contrib(0, [1]), "a") == ()
    assert acc.used_slots == 4 and acc.drops[A.SHARE_EXCEEDED] == 1
    [(_, result), _] = flat(acc, contrib(0, [2]), "b")
    assert result.payload.tolist() == [3]
    assert flat(acc, contrib(4, [1], ack=1), "a") == ()  # full: nothing else gets in
    assert acc.drops[A.SHARE_EXCEEDED] == 2 and acc.used_slots == 4
    acc.check_invariants()


def test_new_job_grows_only_into_memory_the_old_job_frees():
    acc = Accelerator(8, 1)
    acc.install_tree(1, 0, ["a", "b"], None)
    for seq in range(7):  # 7 results retained (nobody acknowledged): all but the reserved slot
        flat(acc, contrib(seq, [1], job=1), "a")
        flat(acc, contrib(seq, [1], job=1), "b")
    assert acc.used_slots == 7
    acc.install_tree(2, 0, ["c", "d"], None)
    acc.check_invariants()
    st1, st2 = acc.tree_status(1, 0), acc.tree_status(2, 0)
    assert st1["target"] == 4 and st1["limit"] == 8 and st2["limit"] == 0 and st2["cwnd_cap"] == 1
    assert flat(acc, contrib(0, [1], job=2), "c") == ()
    assert acc.drops[A.SHARE_EXCEEDED] == 1
    # job 1 goes on; its limit is held until the floor passes what its workers could
    # have sent before seeing the new cap. a's seq 7 finds no slot (b has acknowledged
    # nothing yet) and is dropped; seq 8 is the first result with the new cap 1, so the
    # hold ends once the floor passes 8 + old cap 3, with the acks seq 13 carries.
    seq = 7
    while acc.tree_status(1, 0)["limit"] > 4:
        for child in ("a", "b"):
            flat(acc, contrib(seq, [1], job=1, ack=seq - 1), child)
        acc.check_invariants()
        seq += 1
    assert seq == 14 and acc.tree_status(2, 0)["limit"] == 4
    assert acc.drops[A.SHARE_EXCEEDED] == 2
    flat(acc, contrib(0, [1], job=2), "c")
    assert acc.occupancy() == {1: 2, 2: 1}
    acc.remove_job(1)
    assert acc.tree_status(2, 0)["limit"] == 8
    acc.remove_job(2)
    assert acc.used_slots == 0
    acc.check_invariants()


def test_trees_of_one_job_split_its_share():
    acc = Accelerator(100, 1)
    acc.install_tree(1, 0, ["a"], "r0")
    acc.install_tree(1, 1, ["a"], "r1")
    acc.install_tree(2, 0, ["b"], None)
    assert acc.tree_status(1, 0)["target"] == 25 and acc.tree_status(1, 1)["target"] == 25
    assert acc.tree_status(2, 0)["target"] == 50 and acc.tree_status(2, 0)["cwnd_cap"] == 24


def test_control_plane_errors():
    acc = Accelerator(8, 1)
    acc.install_tree(1, 0, ["a"], None)
    with pytest.raises(AcceleratorError, match="already installed"):
        acc.install_tree(1, 0, ["a"], None)
    with pytest.raises(AcceleratorError, match="duplicate children"):
        acc.install_tree(1, 1, ["a", "a"], None)
    with pytest.raises(AcceleratorError, match="not installed"):
        acc.remove_job(5)
    for job_id, tree_id in (("1", 0), (1, 0.0), (True, 2)):  # refused alike compiled and interpreted
        with pytest.raises(AcceleratorError, match="must be integers"):
            acc.install_tree(job_id, tree_id, ["b"], None)
    with pytest.raises(AcceleratorError, match="packet_memory"):
        Accelerator(0)


def test_size_only_mode_keeps_no_payload():
    acc = Accelerator(4, 361, store_payloads=False)
    acc.install_tree(1, 0, ["a", "b"], None)
    flat(acc, Packet(1, 0, 0, 1, 361), "a")
    out = flat(acc, Packet(1, 0, 0, 1, 361), "b")
    assert len(out) == 2 and out[0][1].payload is None and out[0][1].count == 361


def test_a_result_is_one_packet_for_every_child_and_answers_stay_unicast():
    acc = Accelerator(8, 2)
    acc.install_tree(1, 0, ["a", "b", "c"], None)
    acc.receive(contrib(0, [1]), "a")
    acc.receive(contrib(0, [1]), "b")
    [(destinations, pkt)] = acc.receive(contrib(0, [1]), "c")
    assert destinations == ("a", "b", "c") == acc.children_of(1, 0) and pkt.payload.tolist() == [3]
    [(destinations, _)] = acc.receive(contrib(0, [1], flags=FLAG_RETRANSMIT), "b")
    assert destinations == ("b",)


def test_shrinking_tree_keeps_its_limit_until_workers_know_the_new_cap():
    """A job arrives while another runs at its full window: the old job loses nothing."""
    acc = Accelerator(16, 1)
    acc.install_tree(1, 0, ["a", "b"], None)
    assert acc.tree_status(1, 0)["cwnd_cap"] == 7
    window = 7
    seq = 0

    def step(upto):
        nonlocal seq
        while seq < upto:
            ack = max(0, seq - window + 1)
            for child in ("a", "b"):
                flat(acc, contrib(seq, [1], ack=ack), child)
            seq += 1

    step(20)  # steady state: window 7, up to 14 slots live
    acc.install_tree(2, 0, ["c", "d"], None)
    assert acc.tree_status(1, 0)["cwnd_cap"] == 3
    step(20 + 2 * window)  # the old job keeps its old window for a while: nothing dropped
    assert acc.drops[A.SHARE_EXCEEDED] == 0
    window = 3  # its workers have now seen the new cap
    step(60)
    acc.check_invariants()
    assert acc.tree_status(1, 0)["limit"] == 8 and acc.tree_status(2, 0)["limit"] == 8
    assert acc.drops[A.SHARE_EXCEEDED] == 0


def test_reserved_share_lets_a_newcomer_start_at_once():
    acc = Accelerator(12, 1, reserve_shares=1)
    acc.install_tree(1, 0, ["a", "b"], None)
    assert acc.tree_status(1, 0)["target"] == 6
    for seq in range(5):
        flat(acc, contrib(seq, [1], job=1), "a")
        flat(acc, contrib(seq, [1], job=1), "b")
    acc.install_tree(2, 0, ["c", "d"], None)
    assert acc.tree_status(2, 0)["limit"] == 4  # 12 // (2 + 1), all of it free now
    flat(acc, contrib(0, [1], job=2), "c")
    assert acc.drops[A.SHARE_EXCEEDED] == 0 and acc.occupancy() == {1: 5, 2: 1}
    acc.check_invariants()
    with pytest.raises(AcceleratorError, match="reserve_shares"):
        Accelerator(4, reserve_shares=-1)


def test_seqs_sharing_a_ring_entry_stay_apart():
    # 8 slots: a ring of 16 entries, so seqs 0, 16 and 32 share one (two go to the spill table)
    acc = Accelerator(8, 2)
    acc.install_tree(1, 0, ["a", "b"], None)
    for seq in (0, 16, 32):
        flat(acc, contrib(seq, [seq + 1]), "a")
    assert [p.payload[0] for _, p in flat(acc, contrib(16, [1]), "b")] == [18, 18]
    assert flat(acc, contrib(16, [1]), "b") == ()  # a duplicate, found in the spill table
    assert acc.drops[A.DUPLICATE] == 1
    acc.check_invariants()
    flat(acc, contrib(33, [1], ack=17), "a")
    flat(acc, contrib(33, [1], ack=17), "b")  # the floor jumps from 0 to 17 past 2 of 4 slots
    assert acc.used_slots == 2 and acc.tree_status(1, 0)["floor"] == 17
    assert flat(acc, contrib(16, [1], flags=FLAG_RETRANSMIT), "b") == ()
    assert acc.drops[A.STALE] == 1
    assert [p.payload[0] for _, p in flat(acc, contrib(32, [1], ack=17), "b")] == [34, 34]
    acc.check_invariants()
    acc.remove_job(1)
    assert acc.used_slots == 0
    acc.check_invariants()


def test_trees_sharing_a_recent_entry_and_removed_trees_are_told_apart():
    # jobs 1 and 33, tree 0 and tree 8 share receive's first-try table entry (the low bits of the ids)
    acc = Accelerator(64, 2)
    acc.install_tree(1, 0, ["a"], None)
    acc.install_tree(33, 0, ["b"], None)
    acc.install_tree(33, 8, ["c"], None)
    for seq, (job, tree, src) in enumerate(((1, 0, "a"), (33, 0, "b"), (33, 8, "c"), (1, 0, "a"))):
        out = flat(acc, contrib(seq, [job + tree], job=job, tree=tree), src)
        assert [(to, p.job_id, p.tree_id, p.payload[0]) for to, p in out] == [(src, job, tree, job + tree)]
        assert flat(acc, contrib(seq, [1], job=job, tree=tree), "x") == ()
    assert acc.drops[A.NOT_CHILD] == 4
    acc.remove_tree(33, 8)
    assert flat(acc, contrib(6, [1], job=33, tree=8), "c") == ()
    acc.remove_job(1)
    assert flat(acc, contrib(6, [1], job=1, tree=0), "a") == ()
    assert acc.drops[A.UNKNOWN_TREE] == 1 and acc.drops[A.UNKNOWN_JOB] == 1
    acc.install_tree(1, 0, ["d"], None)
    assert [to for to, _ in flat(acc, contrib(0, [1], job=1, tree=0), "d")] == ["d"]
    acc.check_invariants()


def test_results_only_from_the_parent_before_and_after_one_came():
    acc = Accelerator(16, 2)
    acc.install_tree(1, 0, ["a"], "p")
    acc.install_tree(1, 1, ["a"], None)
    for seq in range(2):
        flat(acc, contrib(seq, [1]), "a")
    result = dict(flags=FLAG_RESULT)
    assert flat(acc, contrib(0, [1], **result), "q") == ()
    assert [to for to, _ in flat(acc, contrib(0, [1], **result), "".join(["p"]))] == ["a"]
    assert flat(acc, contrib(1, [1], **result), "q") == ()
    assert flat(acc, contrib(0, [1], tree=1, **result), None) == ()
    assert acc.drops[A.NOT_PARENT] == 3
