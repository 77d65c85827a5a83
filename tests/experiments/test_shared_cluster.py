"""shared-cluster in a tiny configuration: schema, internal consistency, resume, CLI, report, demo."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from panama.experiments.comm_ratio import run_comm_ratio
from panama.experiments.report import ORIGINAL, write_report
from panama.experiments.shared_cluster import (
    FLOOR,
    NORMALISED,
    SCHEME_ORDER,
    experiment_scenario,
    run_shared_cluster,
)

PANAMA = [sys.executable, "-c", "from panama.cli import main; main()"]
REQUIRED = (
    "short_fct_mean_us",
    "short_fct_p99_us",
    "large_flow_fct_mean_us",
    "large_job_training_time_s",
    "bytes_total",
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    res = run_shared_cluster(out, preset="tiny", jobs=1, progress=False)
    return out, res


def test_presets_scale_threshold_with_gradients():
    for preset in ("tiny", "quick", "full", "paper"):
        sc = experiment_scenario(preset)
        big = [j for j in sc.jobs if j.gradient_bytes >= sc.panama.threshold_bytes]
        small = [j for j in sc.jobs if j.gradient_bytes < sc.panama.threshold_bytes]
        assert big and small, preset
        assert sc.panama.threshold_bytes < 40_000_000


def test_paper_preset_gives_every_worker_its_own_host():
    from panama.core.topology import parse_topology

    sc = experiment_scenario("paper")
    hosts = parse_topology(sc.topology.spec).hosts
    assert len(hosts) == 128 and sc.placement == "disjoint"
    assert sum(j.workers for j in sc.jobs) <= len(hosts)
    assert sum(j.gradient_bytes >= sc.panama.threshold_bytes for j in sc.jobs) == 4


def test_summary_schema_and_ratios(tiny):
    out, _res = tiny
    data = json.loads((out / "summary.json").read_text())
    assert list(data["schemes"]) == [*SCHEME_ORDER, FLOOR]
    ring = data["schemes"]["ring"]
    floor = data["schemes"][FLOOR]
    assert floor["jobs_total"] == 0 and floor["bytes_total_gain"] > 1.0  # same flows, no training traffic
    # one direction: every ratio is a gain (ring / scheme); no scheme/ring ratio is left anywhere
    assert not [k for st in data["schemes"].values() for k in st if "_norm" in k]
    group = data["groups"][0]
    assert group["aggregation_share"] == pytest.approx(1 - floor["bytes_total"] / ring["bytes_total"])
    assert floor["aggregation_share"] is None and 0 < data["schemes"]["panama"]["aggregation_share"] < 1
    assert floor.get("large_job_training_time_s") is None
    for scheme, st in data["schemes"].items():
        for key in ("lt2k", "2k_10k", "10k_50k", "50k_100k"):
            assert f"short_fct_p99_us_{key}_gain" in st and f"short_flows_{key}" in st, (scheme, key)
        if scheme == FLOOR:
            continue
        assert st["n_seeds"] == 1
        for key in REQUIRED:
            assert key in st and key + "_gain" in st, (scheme, key)
        for key in NORMALISED:
            raw, ref = st.get(key), ring.get(key)
            if raw and ref:
                assert st[key + "_gain"] == pytest.approx(ref / raw)
        tiers = [
            k for k in st if k.startswith("bytes_") and not k.endswith(("_norm", "_gain", "_ci")) and k != "bytes_total"
        ]
        assert tiers and sum(st[t] for t in tiers) == pytest.approx(st["bytes_total"])
        assert st["jobs_finished"] == st["jobs_total"]
    assert all(ring[k + "_gain"] == pytest.approx(1.0) for k in REQUIRED if ring.get(k))
    # in-network schemes carry less traffic than ring allreduce on the same workload
    assert data["schemes"]["panama"]["bytes_total_gain"] > 1.0
    assert data["consistency"]["same_flows_and_placement"] is True


def test_every_scheme_ran_the_same_flows(tiny):
    out, _ = tiny
    points = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
    assert sorted(p["params"]["scheme"] for p in points) == sorted([*SCHEME_ORDER, FLOOR])
    assert len({p["result"]["flows_digest"] for p in points}) == 1  # the floor too
    assert len({p["result"]["placement_digest"] for p in points if p["params"]["scheme"] != FLOOR}) == 1
    assert len({p["result"]["background_flows"] for p in points}) == 1
    assert points[0]["result"]["short_flows"] > 10


def test_csv_and_plots(tiny):
    out, _ = tiny
    with open(out / "runs.csv") as fh:
        runs = list(csv.DictReader(fh))
    assert sorted(r["scheme"] for r in runs) == sorted([*SCHEME_ORDER, FLOOR])
    ring = next(r for r in runs if r["scheme"] == "ring")
    for r in runs:
        assert float(r["short_fct_p99_us_gain"]) == pytest.approx(
            float(ring["short_fct_p99_us"]) / float(r["short_fct_p99_us"])
        )
        assert not [k for k in r if "_norm" in k]
    with open(out / "summary.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(SCHEME_ORDER) + 1  # and the floor
    for name in ("fct_cdf.png", "normalized.png"):
        assert (out / name).stat().st_size > 1000
    assert (out / "scenario.toml").is_file() and (out / "config.json").is_file()


def test_rerun_resumes_everything(tiny):
    out, res = tiny
    again = run_shared_cluster(out, preset="tiny", jobs=1, progress=False, make_plots=False)
    assert again.summary["computed_runs"] == 0 and again.summary["resumed_runs"] == len(SCHEME_ORDER) + 1
    assert (
        again.summary["schemes"]["panama"]["short_fct_p99_us"] == res.summary["schemes"]["panama"]["short_fct_p99_us"]
    )


def test_seed_sweep_gives_intervals(tmp_path):
    res = run_shared_cluster(
        tmp_path,
        preset="tiny",
        schemes=["ring", "panama"],
        axes={"seed": [1, 2]},
        jobs=2,
        progress=False,
        make_plots=False,
    )
    (group,) = res.summary["groups"]
    assert group["seeds"] == [1, 2]
    st = group["schemes"]["panama"]
    assert st["n_seeds"] == 2
    lo, hi = st["short_fct_p99_us_gain_ci"]
    assert lo <= st["short_fct_p99_us_gain"] <= hi
    # pooled over both seeds' short flows: bootstrap intervals of the gains, never negative
    for name in ("short_fct_p99_pooled_us", "short_fct_mean_pooled_us"):
        low, high, gain = st[name + "_gain_ci_low"], st[name + "_gain_ci_high"], st[name + "_gain"]
        assert 0 < low <= gain <= high, name
    ring = group["schemes"]["ring"]
    assert ring["short_fct_mean_pooled_us_gain"] == pytest.approx(1.0)
    runs = [json.loads(p.read_text()) for p in (tmp_path / "points").glob("*.json")]
    digests = {}
    for r in runs:
        digests.setdefault(r["params"]["seed"], set()).add(r["result"]["flows_digest"])
    assert all(len(d) == 1 for d in digests.values()) and digests[1] != digests[2]


def test_report_reads_outputs(tiny, tmp_path):
    out, res = tiny
    run_comm_ratio(tmp_path / "cr", make_plot=False)
    page = write_report(tmp_path / "results.md", comm_ratio_dir=tmp_path / "cr", shared_dirs=[out], command="test")
    text = page.read_text()
    assert f"up to {ORIGINAL['short_p99_gain']}x" in text and "## Where and why" in text
    gain = res.summary["schemes"]["panama"]["short_fct_p99_us_gain"]
    assert f"{gain:.2f}" in text
    cr = json.loads((tmp_path / "cr" / "summary.json").read_text())
    assert f"{cr['ranges']['overall']['comm_ratio_max']:.2f}" in text
    # the floor bounds every scheme, and the page says so with its numbers; the cluster is described
    floor = res.summary["schemes"][FLOOR]
    assert "The floor bounds every scheme" in text and f"{floor['short_fct_mean_us_gain']:.2f}x at the mean" in text
    assert "Our cluster: 8 hosts (leaf-spine:leaves=2,spines=2,hosts_per_leaf=4), 5 jobs" in text


def test_cli_shared_cluster_and_errors(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            *PANAMA,
            "experiment",
            "shared-cluster",
            "--preset",
            "tiny",
            "--schemes",
            "ring,panama",
            "--jobs",
            "1",
            "--no-plot",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "panama" in proc.stdout and "p99 gain" in proc.stdout and "higher is better" in proc.stdout
    assert "floor (no jobs)" in proc.stdout and "lower is better" not in proc.stdout
    assert (out / "summary.json").is_file()
    assert list(json.loads((out / "summary.json").read_text())["schemes"]) == ["ring", "panama", FLOOR]
    nofloor = tmp_path / "nofloor"
    args = ["--preset", "tiny", "--schemes", "ring,panama", "--jobs", "1", "--no-plots", "--no-floor"]
    proc = subprocess.run(
        [*PANAMA, "experiment", "shared-cluster", *args, "--out", str(nofloor)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert list(json.loads((nofloor / "summary.json").read_text())["schemes"]) == ["ring", "panama"]
    for args, field in (
        (["--schemes", "ring,bogus"], "--schemes"),
        (["--sweep", "load=abc"], "background.load"),
        (["--sweep", "load"], "--sweep"),
        (["--sweep", "load=0.3", "trees=1,2", "bogus"], "--sweep"),  # unquoted axes after --sweep
        (["--sweep", "load=0.3", "trees=0"], "panama.num_trees"),
        (["--set", "panama.num_trees=0"], "panama.num_trees"),
    ):
        proc = subprocess.run(
            [*PANAMA, "experiment", "shared-cluster", "--preset", "tiny", "--out", str(tmp_path / "x"), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert field in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_demo_without_training(tmp_path):
    from panama.experiments.demo import run_demo

    demo = run_demo(tmp_path, train=False, preset="tiny", jobs=1, echo=lambda m: None, progress=False)
    data = json.loads((tmp_path / "demo.json").read_text())
    sim = data["simulation"]
    assert sim["short_fct_p99_gain"] == pytest.approx(
        sim["ring"]["short_fct_p99_us"] / sim["panama"]["short_fct_p99_us"]
    )
    assert sim["floor"]["short_fct_p99_gain"] == pytest.approx(
        sim["ring"]["short_fct_p99_us"] / sim["floor"]["short_fct_p99_us"]
    )
    assert f"{sim['short_fct_p99_gain']:.2f}" in demo["table_text"] and "higher is better" in demo["table_text"]
    assert "short-flow FCT p99" in demo["table_text"] and "Plots:" in demo["table_text"]
    # the floor (the same flows without jobs) stands beside, with the number of short flows
    assert sim["floor"]["short_flows"] == sim["ring"]["short_flows"] > 0
    assert (
        "floor (no jobs)" in demo["table_text"]
        and f"{sim['ring']['short_flows']:.0f} short flows" in demo["table_text"]
    )


def test_cli_report(tiny, tmp_path):
    out, _ = tiny
    cr = tmp_path / "cr"
    assert (
        subprocess.run(
            [*PANAMA, "experiment", "comm-ratio", "--out", str(cr), "-q", "--no-plot"], check=False
        ).returncode
        == 0
    )
    page = tmp_path / "results.md"
    proc = subprocess.run(
        [*PANAMA, "experiment", "report", "--comm-ratio", str(cr), "--shared-cluster", str(out), "--output", str(page)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Claim 1" in page.read_text()
    proc = subprocess.run(
        [
            *PANAMA,
            "experiment",
            "report",
            "--comm-ratio",
            str(tmp_path / "nothing"),
            "--shared-cluster",
            str(out),
            "--output",
            str(page),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "--comm-ratio" in proc.stderr
    # Without --output the page goes to the output folder, never over the committed one.
    committed = tmp_path / "docs" / "results.md"
    committed.parent.mkdir()
    committed.write_text("committed page\n")
    proc = subprocess.run(
        [*PANAMA, "experiment", "report", "--comm-ratio", str(cr), "--shared-cluster", str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert committed.read_text() == "committed page\n"
    assert "Claim 1" in (tmp_path / "panama-out" / "results.md").read_text()


def test_cli_demo_bad_argument():
    proc = subprocess.run([*PANAMA, "demo", "--epochs", "0"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--epochs" in proc.stderr


def test_cli_shared_cluster_on_dask_scheduler(tmp_path):
    distributed = pytest.importorskip("distributed")
    local = tmp_path / "local"
    assert (
        subprocess.run(
            [
                *PANAMA,
                "experiment",
                "shared-cluster",
                "--preset",
                "tiny",
                "--schemes",
                "ring,panama",
                "--jobs",
                "1",
                "--no-plot",
                "-q",
                "--out",
                str(local),
            ],
            check=False,
        ).returncode
        == 0
    )
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        proc = subprocess.run(
            [
                *PANAMA,
                "experiment",
                "shared-cluster",
                "--preset",
                "tiny",
                "--schemes",
                "ring,panama",
                "--scheduler",
                cluster.scheduler_address,
                "--no-plot",
                "-q",
                "--out",
                str(tmp_path / "dask"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    a = json.loads((local / "summary.json").read_text())["schemes"]
    b = json.loads((tmp_path / "dask" / "summary.json").read_text())["schemes"]
    for scheme in ("ring", "panama"):
        for key in ("short_fct_p99_us", "large_job_training_time_s", "bytes_total"):
            assert a[scheme][key] == b[scheme][key]


def test_gains_over_seeds_are_geometric_and_their_intervals_never_negative():
    """Per-seed gains that spread widely (0.33 to 10) would give a t interval below zero on the
    raw scale; on the log scale it stays positive."""
    import math

    from panama.experiments.cluster_analysis import _scheme_stats

    gains = [10.0, 1 / 3, 5.0, 0.4]
    st = _scheme_stats([{"seed": i, "short_fct_p99_us_gain": g} for i, g in enumerate(gains)])
    geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
    assert st["short_fct_p99_us_gain"] == pytest.approx(geo)
    low, high = st["short_fct_p99_us_gain_ci"]
    assert 0 < low < geo < high


def test_the_default_experiment_is_the_paper_preset_over_its_five_seeds(tmp_path):
    import click

    from panama.cli.experiment_cmds import _resolve_shared_cluster

    def resolve(quick=False, preset=None, scenario=None, seed=None, seeds=None):
        return _resolve_shared_cluster(quick, preset, scenario, (), "ring,panama", None, None, seed, seeds, (), None)

    kw = resolve()
    assert kw["preset"] == "paper" and kw["axes"]["seed"] == [1, 2, 3, 4, 5]
    assert kw["base"].placement == "disjoint" and kw["base"].topology.spec == "fat-tree:k=8"
    assert resolve(seed=7)["axes"]["seed"] == [7]
    quick = resolve(quick=True)  # a preset without seeds: the scenario's own seed
    assert quick["axes"] == {"seed": [quick["base"].seed]}
    path = tmp_path / "s.toml"
    path.write_text(experiment_scenario("tiny").to_toml())
    with pytest.raises(click.UsageError, match="either a scenario file or a preset"):
        resolve(preset="full", scenario=path)
    assert resolve(scenario=path)["preset"] == "file"
    assert resolve(scenario=path)["axes"] == {"seed": [experiment_scenario("tiny").seed]}  # a file: its seed


def test_report_job_bound_names_the_runs_own_models(tmp_path):
    """The single-job bound sentence reads the run's scenario.toml, not the preset's mix."""
    from panama.experiments.report import _job_bound, _run_jobs

    sc = experiment_scenario("paper")
    sc = sc.model_copy(update={"jobs": [sc.jobs[0].model_copy(update={"workers": 4}), sc.jobs[-1]]})
    (tmp_path / "scenario.toml").write_text(sc.to_toml())
    assert _run_jobs(tmp_path, "paper") == [("VGG-16", 4)]  # the 8-worker lstm job has no model row
    assert [m for m, _ in _run_jobs(tmp_path / "absent", "paper")] == ["VGG-16", "AlexNet", "ResNet-152", "ResNet-50"]
    run_comm_ratio(tmp_path / "cr", make_plot=False)
    cr = json.loads((tmp_path / "cr" / "summary.json").read_text())
    text = _job_bound(cr, _run_jobs(tmp_path, "paper"))
    assert "models (VGG-16) on P100" in text and "with 4 workers" in text


def test_report_names_how_an_output_differs_from_the_main_configuration(tmp_path):
    """A seeds-only output that is the main scenario with a few settings changed gets them in
    its section title and a sentence with panama's gains; another preset gets neither."""
    from panama.experiments.report import _differences, _scenario_of, _settings_text, _variant

    base = experiment_scenario("paper")
    main, fast, other = tmp_path / "main", tmp_path / "fast", tmp_path / "other"
    for d in (main, fast, other):
        d.mkdir()
    (main / "scenario.toml").write_text(base.to_toml())
    topo = base.topology.model_copy(update={"host_rate_gbps": 100.0, "fabric_rate_gbps": 100.0})
    (fast / "scenario.toml").write_text(base.model_copy(update={"topology": topo, "seed": 7}).to_toml())
    (other / "scenario.toml").write_text(experiment_scenario("tiny").to_toml())
    a, b = _scenario_of(main), _scenario_of(fast)
    assert _differences(a, b) == ["topology.fabric_rate_gbps=100.0", "topology.host_rate_gbps=100.0"]
    assert _differences(a, a) == [] and _differences(a, {}) is None
    assert _differences(a, _scenario_of(other)) is None  # another preset: jobs and much else differ
    assert _scenario_of(tmp_path / "absent") == {}
    panama = {
        "short_fct_p99_us_gain": 1.01,
        "short_fct_p99_us_gain_ci": [0.98, 1.04],
        "short_fct_p99_pooled_us_gain": 1.0,
        "short_fct_mean_us_gain": 1.02,
        "short_fct_mean_us_gain_ci": [1.01, 1.02],
        "large_job_training_time_s_gain": 0.76,
        "large_job_training_time_s_gain_ci": [0.72, 0.81],
        "n_seeds": 5,
    }
    group = {"params": {"load": 0.1}, "seeds": [1, 2], "aggregation_share": 0.03, "schemes": {"panama": panama}}
    summary = {"axes": {"load": [0.1], "seed": [1, 2]}, "groups": [group]}
    assert _variant(a, fast, summary) == [
        "load=0.1",
        "topology.fabric_rate_gbps=100.0",
        "topology.host_rate_gbps=100.0",
    ]
    (text,) = _settings_text([(main, {"axes": {"seed": [1]}, "groups": []}), (fast, summary), (other, summary)])
    assert text.startswith("With `load=0.1, topology.fabric_rate_gbps=100.0, topology.host_rate_gbps=100.0`")
    assert "training 0.76 [0.72, 0.81]x" in text and "aggregation share 0.03" in text
    assert "slower than ring here" in text
