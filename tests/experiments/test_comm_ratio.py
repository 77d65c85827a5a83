"""comm-ratio: the analytic table, its internal consistency, the data file and the CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest

from panama.experiments.comm_ratio import (
    ModelTableError,
    compute_ratios,
    default_models_path,
    load_models,
    ring_factor,
    run_comm_ratio,
)

PANAMA = [sys.executable, "-c", "from panama.cli import main; main()"]


def test_packaged_table_has_15_cited_rows():
    rows, legend = load_models()
    assert len(rows) == 15
    assert {r.gpu for r in rows} == {"P100", "V100", "A100"}
    assert {r.model for r in rows} == {"AlexNet", "Inception-v3", "ResNet-50", "ResNet-152", "VGG-16"}
    for r in rows:
        assert r.source in legend and r.param_source in legend, r
    # each GPU is paired with one link speed, as in the motivation study
    assert {(r.gpu, r.link_gbps) for r in rows} == {("P100", 10), ("V100", 40), ("A100", 100)}


def test_ratio_columns_follow_from_raw_columns():
    rows, _ = load_models()
    for r in compute_ratios(rows):
        assert r.gradient_bytes == r.params * 4
        assert r.compute_s == pytest.approx(r.batch_size / r.images_per_s)
        assert r.ina_comm_s == pytest.approx(r.gradient_bytes * 8 / (r.link_gbps * 1e9))
        assert r.ring_comm_s == pytest.approx(2 * r.ina_comm_s)
        assert r.comm_ratio == pytest.approx(r.ring_comm_s / (r.ring_comm_s + r.compute_s))
        speedup = (r.compute_s + r.ring_comm_s) / (r.compute_s + r.ina_comm_s)
        assert r.speedup_ina_no_overlap == pytest.approx(speedup)
        # analytic bound from the ratio alone
        assert r.speedup_ina_no_overlap == pytest.approx(1 / (1 - r.comm_ratio * (1 - 1 / r.ring_factor)))
        assert 1.0 < r.speedup_ina_no_overlap < r.speedup_zero_comm_bound


def test_faster_links_lower_the_ratio():
    rows, _ = load_models()
    table = compute_ratios(rows[:1], link_gbps=[10, 40, 100])
    ratios = [r.comm_ratio for r in table]
    assert ratios == sorted(ratios, reverse=True) and len(ratios) == 3


def test_ring_factor():
    assert ring_factor(None) == 2.0
    assert ring_factor(2) == 1.0
    assert ring_factor(8) == pytest.approx(1.75)
    with pytest.raises(ValueError):
        ring_factor(1)


def test_outputs_are_consistent(tmp_path):
    summary = run_comm_ratio(tmp_path, make_plot=True)
    assert (tmp_path / "comm_ratio.png").stat().st_size > 1000
    with open(tmp_path / "comm_ratio.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 15
    for r in rows:
        ring, comp = float(r["ring_comm_s"]), float(r["compute_s"])
        assert float(r["comm_ratio"]) == pytest.approx(ring / (ring + comp))
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["ranges"] == json.loads(json.dumps(summary["ranges"]))
    o = data["ranges"]["overall"]
    assert o["comm_ratio_min"] == pytest.approx(min(float(r["comm_ratio"]) for r in rows))
    assert o["speedup_max"] == pytest.approx(max(float(r["speedup_ina_no_overlap"]) for r in rows))


def test_user_table_and_bad_table(tmp_path):
    good = tmp_path / "m.csv"
    good.write_text("# mine\nmodel,gpu,link_gbps,params,batch_size,images_per_s\nTiny,X1,25,1000000,32,1000\n")
    rows, _ = load_models(good)
    (r,) = compute_ratios(rows)
    assert r.gradient_bytes == 4_000_000 and r.compute_s == pytest.approx(0.032)
    bad = tmp_path / "bad.csv"
    bad.write_text("model,gpu,link_gbps,params,batch_size,images_per_s\nTiny,X1,25,-5,32,1000\n")
    with pytest.raises(ModelTableError) as info:
        load_models(bad)
    assert info.value.field == "row 1: params"
    missing = tmp_path / "missing.csv"
    missing.write_text("model,gpu,params,batch_size,images_per_s\nTiny,X1,5,32,1000\n")
    with pytest.raises(ModelTableError, match="link_gbps"):
        load_models(missing)


def test_cli_comm_ratio(tmp_path):
    proc = subprocess.run(
        [*PANAMA, "experiment", "comm-ratio", "--out", str(tmp_path), "--no-plot", "--link-gbps", "10,100"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "VGG-16" in proc.stdout and "ratio" in proc.stdout
    assert len(json.loads((tmp_path / "summary.json").read_text())["rows"]) == 30


def test_cli_comm_ratio_bad_models_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,gpu,link_gbps,params,batch_size,images_per_s\nTiny,X1,abc,5,32,1000\n")
    proc = subprocess.run(
        [*PANAMA, "experiment", "comm-ratio", "--models", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "link_gbps" in proc.stderr and proc.stderr.count("\n") == 1


def test_default_models_path_exists():
    assert default_models_path().is_file()
    assert math.isfinite(sum(r.images_per_s for r in load_models()[0]))
