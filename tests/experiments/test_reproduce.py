"""``panama experiment reproduce`` runs exactly the results page's outputs (page_outputs.PAGE),
with the settings the published page used, and ``panama experiment publish`` accepts what it
leaves. No paper-scale run: the expensive runners are replaced by copies of the stored outputs,
and one smoke run uses the tiny preset."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from panama.experiments import page_outputs, publish
from panama.experiments.page_outputs import PAGE, PAGE_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / publish.STORE
PANAMA = [sys.executable, "-c", "from panama.cli import main; main()"]
needs_store = pytest.mark.skipif(not all((STORE / n).is_dir() for n in PAGE_OUTPUTS), reason="no stored outputs")
#: Options of a recorded command that do not change its numbers (where it ran, how fast, how loud).
_EXECUTION = {"--out": 1, "-j": 1, "--jobs": 1, "--scheduler": 1, "-q": 0, "--quiet": 0, "--fresh": 0}


def _settings_of(command: str) -> list[str]:
    """A recorded command's options that decide its numbers (page_outputs.PageOutput.settings's form)."""
    words = shlex.split(command)
    words = words[3:] if words[1] == "experiment" else words[2:]
    out, i = [], 0
    while i < len(words):
        if words[i] in _EXECUTION:
            i += 1 + _EXECUTION[words[i]]
        else:
            out.append(words[i])
            i += 1
    return out


def _resolved(o: page_outputs.PageOutput, **kw):
    from panama.cli.cluster_args import resolve_args

    return resolve_args(o.settings(**kw), None)


def test_the_table_is_the_page():
    assert tuple(o.name for o in PAGE) == PAGE_OUTPUTS and publish.PAGE_OUTPUTS is PAGE_OUTPUTS
    assert [o.kind for o in PAGE] == ["comm-ratio", "shared-cluster", "shared-cluster", "shared-cluster", "demo"]
    assert "shared-cluster-sweep" not in PAGE_OUTPUTS
    paper = page_outputs.page_output("paper-100g")
    assert paper.command("OUT/paper-100g") == (
        "panama experiment shared-cluster --preset paper --seeds 1,2,3 --schemes ring,panama-or,panama "
        "--set topology.host_rate_gbps=100 --set topology.fabric_rate_gbps=100 --out OUT/paper-100g"
    )
    assert page_outputs.page_output("demo").command("d") == "panama demo --out d"
    assert page_outputs.page_output("jobs-dominated").command("o", seeds=[1], preset="tiny") == (
        "panama experiment shared-cluster --preset tiny --seeds 1 --out o"
    )


@needs_store
@pytest.mark.parametrize("o", [o for o in PAGE if o.kind != "comm-ratio"], ids=lambda o: o.name)
def test_the_table_has_the_published_pages_settings(o):
    """Each output's settings are those its stored copy (docs/results/<name>/) was made with."""
    record = STORE / o.name / ("demo.json" if o.kind == "demo" else "config.json")
    stored = json.loads(record.read_text())
    assert _settings_of(stored["command"]) == o.settings()
    if o.kind == "shared-cluster":
        kw = _resolved(o)
        assert kw["preset"] == stored["preset"] and kw["axes"] == stored["axes"]
        assert [*kw["schemes"], "floor"] == stored["schemes"]
        base = kw["base"].model_dump(mode="json")
        for key in (s.split("=", 1)[0] for s in o.sets):
            section, field = key.split(".")
            assert base[section][field] == stored["scenario"][section][field] is not None


def _stand_in(calls: list):
    """Runners that record their arguments and copy the stored output of the same name."""

    def copy(out, command=None):
        out = Path(out)
        shutil.copytree(STORE / out.name, out, dirs_exist_ok=True)
        for record in ("config.json", "demo.json", "summary.json"):  # as the runners record it
            if command and (out / record).is_file():
                data = json.loads((out / record).read_text())
                (data["config"] if record == "summary.json" else data)["command"] = command
                (out / record).write_text(json.dumps(data))

    def comm_ratio(out_dir, **kw):
        calls.append(("comm-ratio", Path(out_dir), kw))
        copy(out_dir)
        return {}

    def shared_cluster(out_dir, **kw):
        calls.append(("shared-cluster", Path(out_dir), kw))
        copy(out_dir, kw.get("command"))
        return SimpleNamespace(summary=json.loads((Path(out_dir) / "summary.json").read_text()))

    def demo(out_dir, **kw):
        calls.append(("demo", Path(out_dir), kw))
        copy(out_dir, kw.get("command"))
        return {}

    return comm_ratio, shared_cluster, demo


@needs_store
def test_reproduce_runs_the_page_and_publish_takes_it(tmp_path, monkeypatch):
    import panama.experiments.comm_ratio as cr
    import panama.experiments.demo as dm
    import panama.experiments.shared_cluster as sc
    from panama.cli.experiment_cmds import experiment

    calls: list = []
    fake_cr, fake_sc, fake_demo = _stand_in(calls)
    monkeypatch.setattr(cr, "run_comm_ratio", fake_cr)
    monkeypatch.setattr(sc, "run_shared_cluster", fake_sc)
    monkeypatch.setattr(dm, "run_demo", fake_demo)
    monkeypatch.setattr(sc, "format_table", lambda summary: "table")
    out = tmp_path / "run"
    res = CliRunner().invoke(experiment, ["reproduce", "--out", str(out), "-j", "1"])
    assert res.exit_code == 0, res.output
    # exactly the page's outputs, in page order, each into OUT/<name>, nothing else
    assert [(kind, d.name) for kind, d, _ in calls] == [(o.kind, o.name) for o in PAGE]
    assert all(d == out / d.name for _, d, _ in calls)
    for o, (_, d, kw) in zip(PAGE, calls, strict=True):
        if o.kind == "shared-cluster":
            want = _resolved(o)
            assert (kw["preset"], kw["schemes"], kw["axes"]) == (want["preset"], want["schemes"], want["axes"])
            assert kw["base"] == want["base"] and kw["command"] == o.command(d)
        if o.kind == "demo":
            assert kw["command"] == o.command(d)
    assert res.output.rstrip().endswith(f"panama experiment publish --from {out}")
    page = (out / "results.md").read_text()
    for o in PAGE:
        if o.kind != "comm-ratio":  # the page's "Command:" lines are the table's commands
            assert f"Command: `{o.command(out / o.name)}`" in page
    assert "Generated by `panama experiment reproduce --out" in page
    # publish accepts the directory as reproduce left it
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text(f"# x\n\n{publish.README_BEGIN}\n{publish.README_END}\n")
    monkeypatch.chdir(root)
    res = CliRunner().invoke(experiment, ["publish", "--from", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (root / publish.STORE).iterdir()) == sorted(PAGE_OUTPUTS)
    assert len(publish.readme_rows(root / publish.STORE)) == len(publish.readme_rows(STORE))
    published = (root / publish.RESULTS_PAGE).read_text()
    assert "Generated by `panama experiment publish`" in published
    assert published.count("Command: `") == page.count("Command: `") == len(PAGE)


def test_reproduce_refuses_bad_seeds_before_running(tmp_path):
    proc = subprocess.run(
        [*PANAMA, "experiment", "reproduce", "--seeds", "1,x", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "--seeds" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_reproduce_then_publish_tiny(tmp_path):
    """The whole path at smoke scale: reproduce (tiny preset, the optional load sweep beside),
    then publish from its directory into a stand-in repository."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *PANAMA,
            "experiment",
            "reproduce",
            "--preset",
            "tiny",
            "--seeds",
            "1",
            "--loads",
            "0.2,0.4",
            "--sweep-preset",
            "tiny",
            "--skip-demo",
            "--jobs",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*(n for n in PAGE_OUTPUTS if n != "demo"), "shared-cluster-sweep", "results.md"]
    )
    assert proc.stdout.rstrip().endswith(f"panama experiment publish --from {out}")
    text = (out / "results.md").read_text()
    assert "Claim 1" in text and "Sweep: load" not in text and "shared-cluster-sweep" not in text
    recorded = json.loads((out / "paper-100g" / "config.json").read_text())["command"]
    assert recorded == page_outputs.page_output("paper-100g").command(out / "paper-100g", seeds=[1], preset="tiny")
    assert recorded.startswith("panama experiment shared-cluster --preset tiny --seeds 1 --schemes")
    # the sweep, off the page, still works
    sweep = json.loads((out / "shared-cluster-sweep" / "summary.json").read_text())
    assert [g["params"]["load"] for g in sweep["groups"]] == [0.2, 0.4]
    assert (out / "shared-cluster-sweep" / "sweep.png").is_file()
    # the floor gives every group its aggregation share; lower background load, larger share
    shares = [g["aggregation_share"] for g in sweep["groups"]]
    assert all(0 < x < 1 for x in shares) and shares[0] > shares[1]
    assert (out / "shared-cluster-sweep" / "gain_vs_share.png").is_file()
    # and `panama experiment report` still writes its section where it is asked to
    swept = tmp_path / "with-sweep.md"
    proc = subprocess.run(
        [*PANAMA, "experiment", "report", "--comm-ratio", str(out / "comm-ratio"), "--shared-cluster",
         str(out / "paper"), "--shared-cluster", str(out / "shared-cluster-sweep"), "--output", str(swept)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Sweep: load" in swept.read_text() and "Along `load`" in swept.read_text()
    # publish takes the directory as it is (the sweep is not stored)
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text(f"{publish.README_BEGIN}\n{publish.README_END}\n")
    proc = subprocess.run(
        [*PANAMA, "experiment", "publish", "--from", str(out)], capture_output=True, text=True, check=False, cwd=root
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (root / "docs" / "results").iterdir()) == sorted(
        n for n in PAGE_OUTPUTS if n != "demo"
    )
    assert "Claim 1" in (root / "docs" / "results.md").read_text()
    assert "paper" in (root / "README.md").read_text()


def test_the_docs_show_the_tables_commands():
    """docs/experiments.md lists the command behind each output of the page: the table's."""
    text = (ROOT / "docs" / "experiments.md").read_text().replace("\\\n    ", "")
    for o in PAGE:
        assert o.command(f"OUT/{o.name}") in text, o.name


@pytest.mark.parametrize("text, seeds", [("1,2,3", [1, 2, 3]), (" 4 , 5,", [4, 5]), ("0", [0])])
def test_seed_lists_parse_to_integers(text, seeds):
    from panama.cli.cluster_args import parse_seeds

    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", ",", "true", "1.5", "-1", "1,x", "0x10"])
def test_bad_seed_lists_name_the_option(text):
    import click

    from panama.cli.cluster_args import parse_seeds

    with pytest.raises(click.UsageError, match="--seeds"):
        parse_seeds(text)
