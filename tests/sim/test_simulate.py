"""`panama simulate` end to end: output files, summary keys, --set, errors with exit code 2."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from panama.cli import main
from panama.sim.outputs import NONDETERMINISTIC_KEYS, differences

TINY = [
    "--set",
    "topology.spec=leaf-spine:leaves=2,spines=2,hosts_per_leaf=2",
    "--set",
    "duration_ms=0.3",
    "--set",
    "background.load=0.3",
    "--set",
    "background.workload=ali-storage",
    "--set",
    "panama.threshold_bytes=0",
    "--set",
    "jobs=[{name='a', workers=3, gradient_bytes=50000, compute_us=20.0, iterations=2}]",
]

REQUIRED_KEYS = (
    "simulated_s",
    "wall_s",
    "events",
    "packet_hops",
    "drops",
    "pfc_pauses",
    "ecn_marks",
    "short_fct_mean_us",
    "short_fct_p50_us",
    "short_fct_p99_us",
    "short_slowdown_mean",
    "short_slowdown_p99",
    "jobs",
    "link_bytes",
)


ROOT = Path(__file__).resolve().parents[2]


def _undocumented(summary: dict, simulator_doc: str) -> list[str]:
    """The top-level keys of ``summary`` that the summary.json table of docs/simulator.md does
    not name in its first column (``diagnostics.queues_by_tier`` names ``diagnostics``)."""
    table = simulator_doc.split("### summary.json", 1)[1].split("\n## ", 1)[0]
    named = {"_doc"}
    for line in table.splitlines():
        if line.startswith("| `"):
            named.update(key.split(".")[0] for key in re.findall(r"`([\w.]+)`", line.split(" | ")[0]))
    return sorted(set(summary) - named)


def test_the_documented_keys_reader_sees_a_missing_key():
    doc = "### summary.json\n\n| key | meaning |\n|---|---|\n| `a`, `b.c` | see `d` |\n\n## next\n| `e` | x |\n"
    assert _undocumented({"a": 1, "b": 2, "_doc": ""}, doc) == []
    assert _undocumented({"a": 1, "d": 2, "e": 3}, doc) == ["d", "e"]


def run_cli(args):
    with pytest.raises(SystemExit) as info:
        main(args)
    return info.value.code


def test_simulate_writes_every_output(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["simulate", "--out", str(out), "--no-plots", *TINY]) == 0
    text = capsys.readouterr().out
    assert "scheme=panama" in text and "short (<100KB)" in text
    summary = json.loads((out / "summary.json").read_text())
    for key in REQUIRED_KEYS:
        assert key in summary, key
    assert summary["_doc"].startswith("keys documented in docs/simulator.md")
    job = summary["jobs"]["a"]
    assert job["iterations_done"] == 2 and job["mean_iteration_us"] > 0 and job["training_time_us"] > 0
    assert set(summary["link_bytes"]) == {"host-tor", "tor-spine"}
    assert summary["background_flows"] > 0 and summary["short_flows"] > 0
    with (out / "flows.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {"size_bytes", "start_us", "fct_us", "ideal_fct_us", "slowdown", "src", "dst"} <= set(rows[0])
    assert sum(r["kind"] == "background" for r in rows) == summary["background_flows"]
    with (out / "jobs.csv").open() as fh:
        jrows = list(csv.DictReader(fh))
    assert [(r["job"], r["iteration"]) for r in jrows] == [("a", "0"), ("a", "1")]
    assert _undocumented(summary, (ROOT / "docs" / "simulator.md").read_text()) == []
    resolved = tomllib.loads((out / "resolved.toml").read_text())
    assert resolved["topology"]["spec"] == "leaf-spine:leaves=2,spines=2,hosts_per_leaf=2"
    assert resolved["jobs"][0]["name"] == "a"
    assert json.loads((out / "resolved.json").read_text())["duration_ms"] == 0.3


def test_resolved_scenario_reruns_identically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli(["simulate", "--out", str(a), "--no-plots", "-q", *TINY, "--scheme", "ring"]) == 0
    assert run_cli(["simulate", str(a / "resolved.toml"), "--out", str(b), "--no-plots", "-q"]) == 0
    sa = json.loads((a / "summary.json").read_text())
    sb = json.loads((b / "summary.json").read_text())
    for s in (sa, sb):
        s.pop("wall_s")
        s.pop("events_per_wall_s")
    assert sa == sb and sa["jobs"]["a"]["scheme_used"] == "ring"


def test_plots_are_written(tmp_path):
    out = tmp_path / "p"
    assert run_cli(["simulate", "--out", str(out), "-q", *TINY]) == 0
    for name in ("fct_by_size.png", "job_iterations.png", "queue_occupancy.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--set", "network.pfc=maybe"], "network.pfc"),
        (["--set", "network.nope=1"], "network.nope"),
        (["--set", "jobs.0.gradient_bytes=-5"], "jobs.0.gradient_bytes"),
        (["--set", "topology.spec=fat-tree:k=3"], "topology.spec"),
        (["--set", "background.workload=nosuch"], "background.workload"),
        (["--set", "jobs.0.hosts=['h0','h999']"], "jobs.0.hosts"),
        (["--set", "network.switch_buffer_bytes=2000"], "network.switch_buffer_bytes"),
        (["--set", "pswitch.packet_memory_slots=1"], "pswitch.packet_memory_slots"),
        (["--set", "jobs.0.workers=99"], "jobs.0.workers"),
        (["--set", "background.hosts=['h0','s1']"], "background.hosts"),
    ],
)
def test_bad_values_exit_2_naming_the_key(tmp_path, capsys, args, needle):
    assert run_cli(["simulate", "--out", str(tmp_path / "x"), "-q", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("panama simulate: error:") and needle in err and "\n" not in err


def test_bad_scenario_file_via_subprocess(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('seed = 1\n[network]\npfc = "sometimes"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "panama.cli", "simulate", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    if "No module named panama.cli.__main__" in proc.stderr:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from panama.cli import main; main()",
                "simulate",
                str(bad),
                "--out",
                str(tmp_path / "o"),
            ],
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 2
    assert "network.pfc" in proc.stderr and proc.stderr.count("\n") == 1


def test_topology_overrides_change_link_rates_and_delays():
    from panama.sim.runner import build_topology
    from panama.sim.scenario import load_scenario

    sc = load_scenario(
        None, ["topology.host_rate_gbps=25", "topology.fabric_rate_gbps=100", "topology.link_delay_us=2.5"]
    )
    topo = build_topology(sc)
    for a, b, rate, delay in topo.links():
        assert delay == 2_500_000
        assert rate == (25e9 if topo.is_host(a) or topo.is_host(b) else 100e9)
    plain = build_topology(load_scenario(None))
    assert {r for *_, r, _ in plain.links()} == {10e9}


def _outputs(tmp_path, name, summary, flows="a,b\n1,2\n"):
    d = tmp_path / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "flows.csv").write_text(flows)
    (d / "jobs.csv").write_text("job\n1\n")
    return d


def test_differences_names_summary_keys_and_files_and_ignores_wall_time(tmp_path):
    nondeterministic = sorted(NONDETERMINISTIC_KEYS)[0]
    a = _outputs(tmp_path, "a", {"packet_hops": 10, "drops": 1, nondeterministic: 1.0})
    b = _outputs(tmp_path, "b", {"packet_hops": 10, "drops": 1, nondeterministic: 2.0})
    assert differences(a, b) == []
    c = _outputs(tmp_path, "c", {"packet_hops": 11, "drops": 1}, flows="a,b\n1,3\n")
    assert differences(a, c) == ["packet_hops", "flows.csv"]
    (c / "jobs.csv").unlink()
    assert differences(a, c)[-1] == "jobs.csv"
    # A key on one side only differs, even where the other side's value would read as None.
    d = _outputs(tmp_path, "d", {"packet_hops": 10, "drops": 1, "p99_us": None})
    assert differences(a, d) == ["p99_us"]
