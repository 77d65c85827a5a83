"""Issue 11: no lost congestion signal, no stall, no starvation — in the core and the fabric."""

from collections import deque

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from panama import fabric
from panama.core import accelerator as A
from panama.core.accelerator import Accelerator
from panama.core.packet import CE, ECT0, FLAG_ACK, FLAG_ECE
from panama.core.transport import WorkerTransport
from panama.core.units import ms, us


def integer_inputs(rng, workers, length):
    return [rng.integers(-100, 100, length).astype(np.float32) for _ in range(workers)]


def assert_exact(inputs, outputs):
    expect = np.sum(np.stack(inputs), axis=0, dtype=np.float32)  # integer-valued: exact in float32
    for out in outputs:
        assert out.tobytes() == expect.tobytes()


class Pump:
    """Workers and accelerators joined by in-memory links; ``mark``/``drop`` decide per hop."""

    def __init__(self, accs, parents, workers, mark=None, drop=None):
        self.accs, self.parents, self.workers = accs, parents, workers  # parents: worker -> first hop
        self.mark = mark or (lambda src, dst, pkt: False)
        self.drop = drop or (lambda src, dst, pkt: False)
        self.now = 0
        self.seen = []  # (worker, result packet codepoint, flags) in arrival order

    def run(self, steps=10_000):
        queue = deque()
        for _ in range(steps):
            self.now += us(1)
            for name, w in self.workers.items():
                if w.timer() is not None and w.timer() <= self.now:
                    w.handle_timer(self.now)
                for pkt in w.poll(self.now):
                    queue.append((name, self.parents[name], pkt, pkt.ecn))
            if not queue and all(w.done for w in self.workers.values()):
                return
            while queue:
                src, dst, pkt, ecn = queue.popleft()
                if self.drop(src, dst, pkt):
                    continue
                pkt.ecn = CE if self.mark(src, dst, pkt) else ecn
                if dst in self.workers:
                    self.seen.append((dst, pkt.seq, pkt.ecn, pkt.flags))
                    self.workers[dst].receive(pkt, self.now)
                    queue.extend((dst, self.parents[dst], p, p.ecn) for p in self.workers[dst].poll(self.now))
                else:
                    for destinations, out in self.accs[dst].receive(pkt, src):
                        queue.extend((dst, to, out, out.ecn) for to in destinations)
        raise AssertionError(f"not done after {steps} steps")


# ---------------------------------------------------------------------- down-path CE
def two_tier_pump(mark):
    accs = {
        "root": Accelerator(64, 4, name="root"),
        "leaf0": Accelerator(64, 4, name="leaf0"),
        "leaf1": Accelerator(64, 4, name="leaf1"),
    }
    accs["root"].install_tree(1, 0, ["leaf0", "leaf1"], None)
    accs["leaf0"].install_tree(1, 0, ["w0", "w1"], "root")
    accs["leaf1"].install_tree(1, 0, ["w2", "w3"], "root")
    workers = {
        f"w{r}": WorkerTransport(1, r, 1, payload_elems=4, cc="fixed", cc_options={"initial_window": 1})
        for r in range(4)
    }
    parents = {"w0": "leaf0", "w1": "leaf0", "w2": "leaf1", "w3": "leaf1"}
    return Pump(accs, parents, workers, mark=mark)


def test_a_mark_on_the_way_down_reaches_every_worker_below_then_the_whole_tree():
    # Only the root -> leaf0 link marks, and only the result of seq 0.
    pump = two_tier_pump(mark=lambda src, dst, pkt: (src, dst, pkt.seq, pkt.flags & 1) == ("root", "leaf0", 0, 1))
    data = [np.full(12, r + 1, np.float32) for r in range(4)]  # 3 packets, one at a time (window 1)
    for r, w in enumerate(pump.workers.values()):
        w.start(0, data[r])
    pump.run()
    assert_exact(data, [w.result() for w in pump.workers.values()])
    first = {w: (ecn, flags) for w, seq, ecn, flags in pump.seen if seq == 0 and not flags & FLAG_ACK}
    # leaf0 relayed the mark to both its workers as CE; leaf1's workers saw none
    assert first["w0"][0] == first["w1"][0] == CE and first["w2"][0] == first["w3"][0] == ECT0
    assert not any(flags & FLAG_ECE for _, flags in first.values())  # not the tree-wide echo: only they saw it
    # w0 and w1 echoed it in their next contribution: the next result carries the echo to all four
    second = {w: flags for w, seq, _, flags in pump.seen if seq == 1}
    assert set(second) == {"w0", "w1", "w2", "w3"} and all(flags & FLAG_ECE for flags in second.values())
    for w in pump.workers.values():
        assert w.stats["ce_results"] == (1 if w.rank < 2 else 0) and w.stats["ece_results"] == 1


def test_the_leaf_relays_ce_and_answers_retransmissions_unmarked():
    leaf = Accelerator(16, 1, name="leaf")
    leaf.install_tree(1, 0, ["a", "b"], "root")
    one = np.ones(1, np.float32)
    from panama.core.packet import FLAG_RESULT, FLAG_RETRANSMIT, Packet

    leaf.receive(Packet(1, 0, 0, 1, 1, 0, 0xFFFF, 0, ECT0, one), "a")
    leaf.receive(Packet(1, 0, 0, 1, 1, 0, 0xFFFF, 0, ECT0, one), "b")
    [(dests, result)] = leaf.receive(Packet(1, 0, 0, 1, 1, FLAG_RESULT, 7, 0, CE, one * 2), "root")
    assert dests == ("a", "b") and result.ecn == CE and not result.flags & FLAG_ECE
    [(dests, again)] = leaf.receive(Packet(1, 0, 0, 1, 1, FLAG_RETRANSMIT, 0xFFFF, 0, ECT0, one), "a")
    assert dests == ("a",) and again.ecn == ECT0


# ---------------------------------------------------------------------- liveness
def test_the_oldest_packet_gets_a_slot_when_a_burst_took_the_share():
    """The stall of the issue: 8 slots, a first burst of 10 per worker, the lowest seq lost once."""
    acc = Accelerator(8, 4, name="tor")
    acc.install_tree(1, 0, ["w0", "w1"], None)
    # No cap from a plan: the workers send their initial window of 10 before any result.
    workers = {
        f"w{r}": WorkerTransport(1, r, 1, payload_elems=4, min_rto_ps=us(50), initial_rto_ps=us(50)) for r in range(2)
    }
    lost = set()

    def drop(src, dst, pkt):
        if (src, pkt.seq) == ("w0", 0) and src not in lost:
            lost.add(src)
            return True
        return False

    pump = Pump({"tor": acc}, {"w0": "tor", "w1": "tor"}, workers, drop=drop)
    data = [np.arange(80, dtype=np.float32) * (r + 1) for r in range(2)]
    for r, w in enumerate(workers.values()):
        w.start(0, data[r])
    pump.run()
    assert_exact(data, [w.result() for w in workers.values()])
    assert acc.drops[A.SHARE_EXCEEDED] > 0  # the burst did overrun the share
    assert workers["w0"].stats["retransmissions"] >= 1
    acc.check_invariants()


@given(
    memory=st.integers(4, 64),
    trees=st.integers(1, 4),
    jobs=st.integers(2, 3),
    leaves=st.integers(1, 2),
    workers=st.integers(2, 4),
    length=st.integers(1, 400),
    loss=st.sampled_from([0.0, 0.05, 0.15, 0.3]),
    duplicate=st.sampled_from([0.0, 0.1]),
    reorder=st.booleans(),
    seed=st.integers(0, 2**16),
    path_window=st.sampled_from([None, 1, 3, 40]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_no_stall_on_small_memories(
    memory, trees, jobs, leaves, workers, length, loss, duplicate, reorder, seed, path_window
):
    """Whatever the share, loss, duplication or reordering, under the source's reaction
    (``dctcp-or``) or ``dctcp-path`` with any path window: every run completes, exactly."""
    assume(memory // jobs >= trees)  # every tree gets at least one slot at every switch
    rng = np.random.default_rng(seed)
    inputs = {j: integer_inputs(rng, workers, length) for j in range(jobs)}
    outputs, report = fabric.allreduce(
        inputs,
        trees=trees,
        leaves=leaves,
        loss=loss,
        duplicate=duplicate,
        reorder=reorder,
        seed=seed,
        payload_elems=8,
        packet_memory=memory,
        max_retries=400,
        return_report=True,
        cc="dctcp-or" if path_window is None else "dctcp-path",
        path_window=path_window,
    )
    for j in inputs:
        assert_exact(inputs[j], outputs[j])
    for stats in report.accelerators.values():
        assert stats["used_slots"] == 0


# ---------------------------------------------------------------------- starvation
def test_an_idle_job_holds_no_slot_and_a_newcomer_gets_its_share_at_once():
    acc = Accelerator(32, 4, name="tor")
    acc.install_tree(1, 0, ["a0", "a1"], None)
    job_a = {f"a{r}": WorkerTransport(1, r, 1, payload_elems=4, cwnd_caps=[15]) for r in range(2)}
    data = [np.ones(200, np.float32)] * 2
    for r, w in enumerate(job_a.values()):
        w.start(0, data[r])
    Pump({"tor": acc}, {"a0": "tor", "a1": "tor"}, job_a).run()
    assert all(w.stats["acks_sent"] == 1 for w in job_a.values())
    assert acc.occupancy() == {1: 0} and acc.tree_status(1, 0)["limit"] == 32  # idle, nothing retained
    acc.install_tree(2, 0, ["b0", "b1"], None)  # B arrives while A is idle
    assert acc.tree_status(1, 0)["limit"] == 16 and acc.tree_status(2, 0)["limit"] == 16
    job_b = {f"b{r}": WorkerTransport(2, r, 1, payload_elems=4, cwnd_caps=[7]) for r in range(2)}
    for r, w in enumerate(job_b.values()):
        w.start(0, data[r])
    Pump({"tor": acc}, {"b0": "tor", "b1": "tor"}, job_b).run()
    assert acc.drops[A.SHARE_EXCEEDED] == 0 and all(w.stats["retransmissions"] == 0 for w in job_b.values())
    acc.check_invariants()


def test_fabric_newcomer_finishes_while_the_other_job_sleeps():
    """Job B arrives 1 ms into job A's 50 ms pause between two allreduces (same switches)."""
    rng = np.random.default_rng(3)
    inputs = {"a": integer_inputs(rng, 4, 2000), "b": integer_inputs(rng, 4, 2000)}
    outputs, report = fabric.allreduce(
        inputs,
        trees=2,
        leaves=2,
        payload_elems=8,
        packet_memory=24,
        calls=2,
        gap_ps=ms(50),
        start_ps={"b": ms(1)},
        return_report=True,
    )
    for j in inputs:
        assert_exact(inputs[j], outputs[j])
    a_first_done = max(w["finished_ps"][0] for w in report.workers["a"])
    assert a_first_done < ms(1)  # A is asleep when B arrives
    b_first_done = max(w["finished_ps"][0] for w in report.workers["b"])
    a_resumes = min(w["finished_ps"][0] for w in report.workers["a"]) + ms(50)
    assert b_first_done < a_resumes  # B did not wait for A to come back
    assert all(w["retransmissions"] == 0 for w in report.workers["b"])
    # (A comes back with the window of its old cap: what exceeds its new share is dropped
    # and resent, and its first result brings the new cap; its second sum is exact too.)


def test_fabric_marks_on_the_way_down_reach_every_worker_and_keep_them_in_lockstep():
    """Only results are marked (congestion below the roots): workers see CE, echo it, and
    every worker of a tree then sees the same FLAG_ECE, so their windows stay equal."""
    rng = np.random.default_rng(8)
    xs = integer_inputs(rng, 4, 4 * 3000)
    out, report = fabric.allreduce(
        xs, trees=2, leaves=2, ecn_down=0.03, payload_elems=4, seed=5, trace_windows=True, return_report=True
    )
    assert_exact(xs, out)
    ws = report.workers[0]
    assert report.marked > 0 and all(w["ece_results"] > 0 for w in ws)
    # every worker reacted to the same tree-wide echoes: identical windows and alphas
    assert all(w["windows"] == ws[0]["windows"] and w["alphas"] == ws[0]["alphas"] for w in ws)
    assert all([win for _, _, win in w["window_trace"]] == [win for _, _, win in ws[0]["window_trace"]] for w in ws)
