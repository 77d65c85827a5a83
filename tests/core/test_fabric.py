"""End-to-end protocol tests through the in-memory fabric (loss, duplication, reordering)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panama import fabric
from panama.fabric import FabricError


def make_inputs(rng, workers, length, integer):
    if integer:
        return [rng.integers(-1000, 1000, length).astype(np.float32) for _ in range(workers)]
    return [rng.standard_normal(length).astype(np.float32) for _ in range(workers)]


def check_outputs(inputs, outputs, integer):
    ref = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    first = outputs[0]
    for out in outputs:
        assert out.dtype == np.float32 and out.shape == first.shape
        assert out.tobytes() == first.tobytes(), "workers disagree bitwise"
    if integer:
        assert np.array_equal(first.astype(np.float64), ref)
    else:
        # float32 summation of n terms: error bounded by n * eps * sum(|x|)
        bound = len(inputs) * np.finfo(np.float32).eps * np.sum(np.abs(np.stack(inputs)), axis=0) + 1e-30
        assert np.all(np.abs(first.astype(np.float64) - ref) <= bound)


def check_report(report):
    assert all(v == 0 for v in report.occupancy_after_release.values())
    for name, trees in report.peak_tree_use.items():
        for tree in trees:
            assert tree["peak_used"] <= tree["target"], (name, tree)


@pytest.mark.parametrize(
    "workers,trees,leaves,jobs",
    [(1, 1, 1, 1), (2, 1, 1, 1), (16, 4, 2, 1), (5, 3, 2, 3), (16, 2, 1, 2), (7, 4, 2, 2)],
)
def test_lossy_duplicating_reordering_fabric_is_exact(workers, trees, leaves, jobs):
    rng = np.random.default_rng(workers * 100 + trees * 10 + leaves)
    inputs = {f"job{j}": make_inputs(rng, workers, 3000 + 17 * j, integer=j % 2 == 0) for j in range(jobs)}
    outputs, report = fabric.allreduce(
        inputs,
        trees=trees,
        leaves=leaves,
        loss=0.1,
        duplicate=0.1,
        reorder=True,
        seed=3,
        return_report=True,
    )
    for j, key in enumerate(inputs):
        check_outputs(inputs[key], outputs[key], integer=j % 2 == 0)
    check_report(report)
    assert report.lost > 0 and report.duplicated > 0
    assert report.total_retransmissions() > 0


@pytest.mark.parametrize("trees,leaves", [(1, 1), (3, 2)])
def test_in_place_is_exact_under_loss_duplication_and_reordering(trees, leaves):
    """Results overwrite each worker's own buffer while duplicates and retransmissions of
    its contributions (views of that buffer) are still in flight: still exactly once."""
    rng = np.random.default_rng(trees)
    inputs = make_inputs(rng, 6, 2000, integer=True)
    kept = [a.copy() for a in inputs]
    common = dict(trees=trees, leaves=leaves, loss=0.1, duplicate=0.2, reorder=True, seed=5, payload_elems=64, calls=2)
    outputs, report = fabric.allreduce(inputs, in_place=True, return_report=True, **common)
    check_outputs(inputs, outputs, integer=True)
    check_report(report)
    assert report.duplicated > 0 and report.total_retransmissions() > 0
    assert all(a.tobytes() == b.tobytes() for a, b in zip(inputs, kept))  # the caller's inputs untouched
    assert all(o.tobytes() == r.tobytes() for o, r in zip(outputs, fabric.allreduce(inputs, **common)))


@given(
    workers=st.integers(1, 16),
    trees=st.integers(1, 4),
    leaves=st.integers(1, 2),
    jobs=st.integers(1, 3),
    length=st.integers(0, 2500),
    loss=st.sampled_from([0.0, 0.02, 0.1]),
    duplicate=st.sampled_from([0.0, 0.05, 0.1]),
    reorder=st.booleans(),
    integer=st.booleans(),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_exactly_once(workers, trees, leaves, jobs, length, loss, duplicate, reorder, integer, seed):
    rng = np.random.default_rng(seed)
    inputs = {j: make_inputs(rng, workers, length, integer) for j in range(jobs)}
    outputs, report = fabric.allreduce(
        inputs,
        trees=trees,
        leaves=leaves,
        loss=loss,
        duplicate=duplicate,
        reorder=reorder,
        seed=seed,
        payload_elems=97,
        return_report=True,
    )
    for j in inputs:
        check_outputs(inputs[j], outputs[j], integer)
    check_report(report)


def test_single_list_input_returns_list_and_is_deterministic():
    rng = np.random.default_rng(1)
    xs = make_inputs(rng, 4, 5000, integer=False)
    a, ra = fabric.allreduce(xs, trees=2, leaves=2, loss=0.05, reorder=True, seed=9, return_report=True)
    b, rb = fabric.allreduce(xs, trees=2, leaves=2, loss=0.05, reorder=True, seed=9, return_report=True)
    assert isinstance(a, list) and len(a) == 4
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
    assert (ra.events, ra.lost, ra.simulated_ps) == (rb.events, rb.lost, rb.simulated_ps)


def test_windows_never_exceed_cwnd_cap_and_memory_share():
    rng = np.random.default_rng(2)
    xs = make_inputs(rng, 3, 600 * 8, integer=True)
    # 64 slots, one job with 2 trees -> 32 slots per tree at the leaf -> cwnd_cap
    # (32 - 1) // 2 = 15, which the workers know from the plan before the first result
    out, report = fabric.allreduce(
        xs, trees=2, leaves=1, payload_elems=8, packet_memory=64, trace_windows=True, return_report=True
    )
    check_outputs(xs, out, True)
    for w in report.workers[0]:
        assert max(win for _, _, win in w["window_trace"]) == 15
        assert w["windows"] == [15, 15]
    check_report(report)
    assert report.accelerators["leaf0"]["drops"].get("share_exceeded", 0) == 0


@pytest.mark.parametrize("cc", ["fixed", "none"])
def test_other_congestion_controls_are_exact(cc):
    rng = np.random.default_rng(4)
    xs = make_inputs(rng, 4, 4000, integer=True)
    out = fabric.allreduce(xs, trees=2, leaves=2, loss=0.05, cc=cc, seed=1)
    check_outputs(xs, out, True)


def test_constant_marking_alpha_converges_and_workers_stay_in_lockstep():
    # Every link marks with probability F. A contribution is CE if its uplink marked it
    # or it echoes a mark its worker saw on a result's downlink; a result carries ECE if
    # any of the W contributions was CE: p = 1 - (1 - F) ** (2 W) per result.
    F, W, T = 0.02, 4, 2
    rng = np.random.default_rng(5)
    xs = make_inputs(rng, W, 4 * 3000 * T, integer=True)
    out, report = fabric.allreduce(xs, trees=T, leaves=1, ecn=F, payload_elems=4, seed=11, return_report=True)
    check_outputs(xs, out, True)
    expected = 1 - (1 - F) ** (2 * W)
    workers = report.workers[0]
    for t in range(T):
        alphas = {w["alphas"][t] for w in workers}
        windows = {w["windows"][t] for w in workers}
        assert len(alphas) == 1 and len(windows) == 1, "workers of a tree diverged"
        (alpha,) = alphas
        assert abs(alpha - expected) < 0.06, (alpha, expected)
    ece_fraction = np.mean([w["ece_results"] / w["results"] for w in workers])
    assert abs(ece_fraction - expected) < 0.03


@given(
    workers=st.integers(2, 6),
    trees=st.integers(1, 3),
    leaves=st.integers(1, 2),
    ecn=st.sampled_from([0.0, 0.02, 0.2]),
    ecn_down=st.sampled_from([0.0, 0.05]),
    duplicate=st.sampled_from([0.0, 0.05]),
    path_window=st.integers(1, 24),
    floor_share=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_dctcp_path_windows_identical_on_every_worker(
    workers, trees, leaves, ecn, ecn_down, duplicate, path_window, floor_share, seed
):
    """dctcp-path: whatever marks (up, down) and duplicates, every worker of a tree goes
    through the same windows in the same order, never below its floor (nor the cap), and
    above the path window only where the links mark.
    (Reordering is left out: with DUPTHRESH 1 it makes timeouts, and a timeout is one
    worker's own, as under dctcp-or; liveness under reordering and loss is
    test_liveness.py's property.)"""
    rng = np.random.default_rng(seed)
    xs = make_inputs(rng, workers, 4 * 200 * trees, integer=True)
    out, report = fabric.allreduce(
        xs,
        trees=trees,
        leaves=leaves,
        ecn=ecn,
        ecn_down=ecn_down,
        duplicate=duplicate,
        payload_elems=4,
        seed=seed,
        cc="dctcp-path",
        cc_options={"floor_share": floor_share},
        path_window=path_window,
        trace_windows=True,
        return_report=True,
        calls=2,
    )
    check_outputs(xs, out, True)
    floor = max(1, int(path_window * floor_share))
    for t in range(trees):
        sequences = {tuple(w for _, tree, w in r["window_trace"] if tree == t) for r in report.workers[0]}
        assert len(sequences) == 1, "workers of a tree diverged"
        (sequence,) = sequences
        finals = [r["windows"][t] for r in report.workers[0]]
        assert all(w >= floor for w in (*sequence, *finals))
        if ecn == ecn_down == 0.0:  # a quiet echo: the path window throughout
            assert sequence == () and set(finals) == {path_window}


def test_unfinishable_run_raises_clear_error():
    xs = [np.ones(1000, np.float32)] * 2
    with pytest.raises(FabricError, match="no result for tree"):
        fabric.allreduce(xs, loss=0.95, seed=0)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(trees=0), ValueError, "trees"),
        (dict(loss=1.0), ValueError, "loss"),
        (dict(ecn=-0.1), ValueError, "ecn"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fabric.allreduce([np.ones(4, np.float32)], **kwargs)


def test_bad_inputs():
    with pytest.raises(TypeError, match="float32"):
        fabric.allreduce([np.ones(4, np.float64)])
    with pytest.raises(ValueError, match="differs"):
        fabric.allreduce([np.ones(4, np.float32), np.ones(5, np.float32)])


def test_allreduce_keywords_are_the_options_fields_with_their_defaults():
    """allreduce's keywords come from Links and FabricOptions (one place for the defaults):
    introspection shows each with its field's default, and a misspelt one is refused by name."""
    import dataclasses
    import inspect

    from panama.fabric import FabricOptions, Links

    params = inspect.signature(fabric.allreduce).parameters
    for f in dataclasses.fields(FabricOptions):
        assert params[f.name].default == f.default, f.name
    assert params["link_delay_ps"].default == Links().delay_ps
    assert params["loss"].default == Links().loss
    with pytest.raises(TypeError, match="tres"):
        fabric.allreduce([np.ones(4, np.float32)] * 2, tres=2)
