"""The terminal says which scheme each job ran and why (issue 27: a job below the
in-network threshold ran ring under scheme panama without a word)."""

from __future__ import annotations

import pytest

from panama.cli import main
from panama.cli.experiment_cmds import _schemes_used


def test_simulate_names_a_job_that_ran_ring_and_why(tmp_path, capsys):
    args = ["simulate", "--out", str(tmp_path / "run"), "--no-plots"]
    sets = [
        "topology.spec=leaf-spine:leaves=2,spines=1,hosts_per_leaf=2",
        "duration_ms=0.1",
        "background.load=0",
        "panama.threshold_bytes=100000",
        "jobs=[{name='small', workers=2, gradient_bytes=20000, compute_us=10.0, iterations=1}]",
    ]
    for s in sets:
        args += ["--set", s]
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "small ran ring instead of panama:" in out, out


def test_shared_cluster_lists_the_scheme_each_job_ran():
    runs = [
        {"params": {"scheme": "ring"}, "result": {"job_scheme_used": {"a": "ring", "b": "ring"}}},
        {"params": {"scheme": "panama"}, "result": {"job_scheme_used": {"a": "panama", "b": "ring"}}},
        {"params": {"scheme": "floor"}, "result": {"job_scheme_used": {}}},
    ]
    lines = _schemes_used(runs, 40_000_000)
    assert lines == [
        "jobs under ring ran ring: a, b",
        "jobs under panama ran panama: a; ring: b (ring: gradient below threshold_bytes 40,000,000 B, or no "
        "accelerator room)",
    ]
