"""Sweep runner: grid parsing, resume after failures and kills, process/Dask equivalence, CI aggregation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from panama.experiments import stats
from panama.experiments.sweep import (
    SweepError,
    aggregate,
    grid,
    load_points,
    parse_sweep,
    point_id,
    run_sweep,
)


def noisy_square(point):
    """Deterministic per point: x**2 plus seeded noise."""
    rng = np.random.default_rng(point.get("seed", 0))
    return {"y": point["x"] ** 2 + float(rng.normal()), "nested": {"twice": 2 * point["x"]}}


def fails_on_two(point):
    if point["x"] == 2:
        raise RuntimeError("boom at x=2")
    return noisy_square(point)


def test_parse_sweep_and_grid():
    axes = parse_sweep(["load=0.3,0.5 trees=1,2", "seed=1,2,3", "workload=web-search"])
    assert axes == {"load": [0.3, 0.5], "trees": [1, 2], "seed": [1, 2, 3], "workload": ["web-search"]}
    pts = grid(axes, base={"fixed": 7})
    assert len(pts) == 12
    assert pts[0] == {"fixed": 7, "load": 0.3, "trees": 1, "seed": 1, "workload": "web-search"}
    assert pts[1]["seed"] == 2 and pts[-1]["load"] == 0.5
    assert len({point_id(p) for p in pts}) == 12


def test_parse_sweep_semicolon_values():
    axes = parse_sweep(["topology=leaf-spine:leaves=2,spines=2;fat-tree:k=4"])
    assert axes == {"topology": ["leaf-spine:leaves=2,spines=2", "fat-tree:k=4"]}


@pytest.mark.parametrize("bad", ["load", "=1,2", "load=", "load=1,1", "1x=2"])
def test_parse_sweep_rejects(bad):
    with pytest.raises(ValueError):
        parse_sweep([bad])


def test_parse_sweep_rejects_repeated_key():
    with pytest.raises(ValueError, match="twice"):
        parse_sweep(["a=1", "a=2"])


def test_processes_equal_serial_and_rerun_resumes(tmp_path):
    points = grid({"x": [1, 2, 3], "seed": [1, 2]})
    serial = run_sweep(noisy_square, points, tmp_path / "a", jobs=1, progress=False)
    parallel = run_sweep(noisy_square, points, tmp_path / "b", jobs=2, progress=False)
    assert [r.result for r in serial.records] == [r.result for r in parallel.records]
    assert len(serial.computed) == 6 and not serial.resumed
    again = run_sweep(noisy_square, points, tmp_path / "b", jobs=2, progress=False)
    assert again.computed == [] and len(again.resumed) == 6
    assert [r.result for r in again.records] == [r.result for r in parallel.records]
    # one file per point, no temporary files left behind
    files = sorted(p.name for p in (tmp_path / "b" / "points").iterdir())
    assert len(files) == 6 and all(f.endswith(".json") and not f.startswith(".") for f in files)


def test_failed_point_keeps_others_and_rerun_computes_only_missing(tmp_path):
    points = grid({"x": [1, 2, 3]})
    with pytest.raises(SweepError) as info:
        run_sweep(fails_on_two, points, tmp_path, jobs=1, progress=False)
    assert list(info.value.failures) == [point_id({"x": 2})]
    assert len(load_points(tmp_path)) == 2
    res = run_sweep(noisy_square, points, tmp_path, jobs=1, progress=False)
    assert res.computed == [point_id({"x": 2})]
    assert [r.params["x"] for r in res.records] == [1, 2, 3]


def test_killed_sweep_resumes(tmp_path):
    """A sweep whose process dies hard after two points: the rerun computes only the rest."""
    script = textwrap.dedent(
        f"""
        import os
        from panama.experiments.sweep import grid, run_sweep
        done = []
        def fn(point):
            if len(done) == 2:
                os._exit(3)  # simulated kill: no cleanup, no exception handling
            done.append(point["x"])
            return {{"y": point["x"] * 10}}
        run_sweep(fn, grid({{"x": [1, 2, 3, 4, 5]}}), {str(tmp_path)!r}, jobs=1, progress=False)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 3, proc.stderr
    assert sorted(r.params["x"] for r in load_points(tmp_path)) == [1, 2]

    calls = []

    def fn(point):
        calls.append(point["x"])
        return {"y": point["x"] * 10}

    res = run_sweep(fn, grid({"x": [1, 2, 3, 4, 5]}), tmp_path, jobs=1, progress=False)
    assert calls == [3, 4, 5]
    assert [r.result["y"] for r in res.records] == [10, 20, 30, 40, 50]


def test_fingerprint_mismatch_refuses_to_mix(tmp_path):
    points = grid({"x": [1]})
    run_sweep(noisy_square, points, tmp_path, jobs=1, fingerprint="aaa", progress=False)
    with pytest.raises(SweepError, match="another configuration"):
        run_sweep(noisy_square, points, tmp_path, jobs=1, fingerprint="bbb", progress=False)


def test_point_file_is_complete_json(tmp_path):
    run_sweep(noisy_square, [{"x": 3, "seed": 1}], tmp_path, jobs=1, progress=False, fingerprint="f")
    (path,) = (tmp_path / "points").glob("*.json")
    data = json.loads(path.read_text())
    assert data["params"] == {"x": 3, "seed": 1} and data["fingerprint"] == "f"
    assert data["result"]["nested"]["twice"] == 6


def test_aggregate_means_and_t_intervals(tmp_path):
    points = grid({"x": [1, 2], "seed": [1, 2, 3, 4]})
    res = run_sweep(noisy_square, points, tmp_path, jobs=1, progress=False)
    rows = aggregate(res.records)
    assert [r["x"] for r in rows] == [1, 2]
    for row in rows:
        ys = [noisy_square({"x": row["x"], "seed": s})["y"] for s in (1, 2, 3, 4)]
        mean = sum(ys) / 4
        sd = math.sqrt(sum((y - mean) ** 2 for y in ys) / 3)
        half = 3.182446305284263 * sd / 2  # t(0.975, 3) * sd / sqrt(4)
        assert row["n_seeds"] == 4 and row["seeds"] == [1, 2, 3, 4]
        assert row["y_mean"] == pytest.approx(mean)
        assert row["y_ci_low"] == pytest.approx(mean - half)
        assert row["y_ci_high"] == pytest.approx(mean + half)
        assert row["nested.twice_mean"] == 2 * row["x"]


@pytest.mark.parametrize(
    "df,expected",
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (29, 2.0452), (200, 1.9719)],
)
def test_t_quantile_table(df, expected):
    assert stats.t_quantile_two_sided(0.95, df) == pytest.approx(expected, abs=1e-4)


def test_mean_ci_edge_cases():
    one = stats.mean_ci([5.0])
    assert one.mean == one.low == one.high == 5.0 and one.n == 1
    assert stats.mean_ci([]).n == 0 and math.isnan(stats.mean_ci([]).mean)
    assert stats.mean_ci([1.0, float("nan"), 3.0]).n == 2


def test_dask_local_cluster_matches_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    points = grid({"x": [2, 5], "seed": [7]})
    local = run_sweep(noisy_square, points, tmp_path / "local", jobs=2, progress=False)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        remote = run_sweep(noisy_square, points, tmp_path / "dask", scheduler=cluster.scheduler_address, progress=False)
    assert [r.params for r in remote.records] == [r.params for r in local.records]
    assert [r.result for r in remote.records] == [r.result for r in local.records]
    assert len(remote.computed) == 2


def test_result_json_is_as_readable_as_the_csvs(tmp_path):
    import os
    import stat

    from panama.experiments.sweep import write_json_atomic

    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "r.json", {"a": 1})
        (tmp_path / "r.csv").write_text("a\n1\n")
    finally:
        os.umask(old)
    json_mode = stat.S_IMODE((tmp_path / "r.json").stat().st_mode)
    assert json_mode == stat.S_IMODE((tmp_path / "r.csv").stat().st_mode) == 0o644
