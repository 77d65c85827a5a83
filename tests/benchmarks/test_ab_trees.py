"""bench/ab_trees.py: the paired interval, the refusal of trees whose results differ, and
one real alternation of this tree against itself."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import ab_trees
finally:
    sys.path.remove(str(ROOT / "bench"))


def test_the_paired_interval_is_students_t_over_the_relative_differences():
    mean, lo, hi = ab_trees.paired_interval([100.0, 200.0, 50.0], [90.0, 190.0, 42.5])
    # differences -10 %, -5 %, -15 %: mean -10, standard deviation 5, t(0.975, 2) = 4.3027
    half = 4.302652729911275 * 5.0 / math.sqrt(3)
    assert mean == pytest.approx(-10.0)
    assert (lo, hi) == (pytest.approx(-10.0 - half), pytest.approx(-10.0 + half))


def _fake_runs(monkeypatch, results_b: dict, ns_a: float, ns_b: float):
    def run_once(tree, scenario, ms, pure, timeout_s):
        same = {"hops": 1000, "events": 1001, "digest": "d1", "compiled": not pure}
        if tree.name == "b":
            return dict(same, cpu_s=ns_b * 1e-6, **results_b)
        return dict(same, cpu_s=ns_a * 1e-6)

    monkeypatch.setattr(ab_trees, "run_once", run_once)


def _trees(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name / "src" / "panama").mkdir(parents=True)
    return str(tmp_path / "a"), str(tmp_path / "b")


def test_trees_whose_results_differ_are_refused(tmp_path, monkeypatch, capsys):
    _fake_runs(monkeypatch, {"digest": "d2"}, 100.0, 50.0)
    assert ab_trees.main([*_trees(tmp_path), "--pairs", "3"]) == 1
    assert "the trees' results differ" in capsys.readouterr().out


def test_a_faster_tree_is_reported_with_its_interval(tmp_path, monkeypatch, capsys):
    _fake_runs(monkeypatch, {}, 100.0, 90.0)
    out = tmp_path / "ab.json"
    assert ab_trees.main([*_trees(tmp_path), "--pairs", "4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "B - A: -10.00 %" in text and "B faster in 4 of 4 pairs" in text
    summary = json.loads(out.read_text())["summary"]
    assert summary["b_minus_a_pct"] == pytest.approx(-10.0)
    assert summary["a_median_ns_per_hop"] == pytest.approx(100.0)


@pytest.mark.parametrize("extra", [[], ["--ms", "0"], ["--pairs", "1"], ["--timeout", "-1"]])
def test_bad_arguments_are_usage_errors(tmp_path, extra, capsys):
    trees = [str(tmp_path), str(tmp_path)] if not extra else list(_trees(tmp_path))
    with pytest.raises(SystemExit) as exc:
        ab_trees.main([*trees, *extra])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_this_tree_against_itself_gives_identical_results():
    # Interpreted (--pure): no build needed; the reference dumbbell's first millisecond.
    assert ab_trees.main([str(ROOT), str(ROOT), "--scenario", "reference", "--ms", "1", "--pairs", "2", "--pure"]) == 0
