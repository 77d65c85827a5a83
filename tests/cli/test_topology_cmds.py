"""``panama topology show`` and ``panama controller plan``: output, schemas, errors."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys

import pytest
from schema_check import SchemaViolation, load_schema, validate

from panama.cli import main
from panama.cli.topology_cmds import parse_hosts, parse_job

PLAN_SCHEMA = load_schema("plan-schema.json")
TOPOLOGY_SCHEMA = load_schema("topology-schema.json")


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_topology_show_table(capsys):
    code, out, _ = run(capsys, "topology", "show", "fat-tree:k=4")
    assert code == 0
    for row in ("hosts                16", "tor switches         8", "agg switches         8",
                "core switches        4", "links                48", "bisection bandwidth  80 Gbps"):  # fmt: skip
        assert row in out


@pytest.mark.parametrize(
    "spec, hosts, tiers",
    [
        ("fat-tree:k=4", 16, {"tor": 8, "agg": 8, "core": 4}),
        ("fat-tree:k=8,gbps=40,host_gbps=10", 128, {"tor": 32, "agg": 32, "core": 16}),
        ("leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,host_gbps=10,fabric_gbps=40", 16, {"tor": 4, "spine": 2}),
    ],
)
def test_topology_show_json_matches_schema(capsys, spec, hosts, tiers):
    code, out, _ = run(capsys, "topology", "show", spec, "--json")
    assert code == 0
    doc = json.loads(out)
    validate(doc, TOPOLOGY_SCHEMA)
    assert len(doc["hosts"]) == hosts
    counted: dict[str, int] = {}
    for s in doc["switches"]:
        counted[s["tier"]] = counted.get(s["tier"], 0) + 1
    assert counted == tiers
    names = set(doc["hosts"]) | {s["name"] for s in doc["switches"]}
    for a, b, rate, delay in doc["links"]:
        assert a in names and b in names and rate > 0 and delay == 1e-6
    if "fabric_gbps=40" in spec:
        assert ["leaf0", "spine0", 40e9, 1e-6] in doc["links"] and ["h0", "leaf0", 10e9, 1e-6] in doc["links"]


def test_topology_show_file_and_png(capsys, tmp_path):
    f = tmp_path / "net.toml"
    f.write_text('kind = "leaf-spine"\nleaves = 2\nspines = 2\nhosts_per_leaf = 3\n')
    png = tmp_path / "topo.png"
    code, out, _ = run(capsys, "topology", "show", str(f), "--png", str(png))
    assert code == 0 and "hosts                6" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def plan_json(capsys, *args: str) -> dict:
    code, out, err = run(capsys, "controller", "plan", "--json", *args)
    assert code == 0, err
    doc = json.loads(out)
    validate(doc, PLAN_SCHEMA)
    return doc


def path_to_root(edges: list[list[str]], start: str, root: str) -> list[str]:
    parent = dict((c, p) for c, p in edges)
    assert len(parent) == len(edges), "a node with two parents"
    path = [start]
    while path[-1] != root:
        path.append(parent[path[-1]])
        assert len(path) <= len(edges) + 1, "cycle"
    return path


def test_controller_plan_json(capsys):
    doc = plan_json(
        capsys,
        "--topology", "fat-tree:k=4",
        "--job", "a:h0,h5,h9:100",
        "--job", "b:h0..h3:200",
        "--job", "c:h1,h2:10",
        "--trees", "2",
    )  # fmt: skip
    jobs = {j["job"]: j for j in doc["jobs"]}
    assert [j["job"] for j in doc["jobs"]] == ["a", "b", "c"]
    a, b, c = jobs["a"], jobs["b"], jobs["c"]
    assert a["admitted"] and a["scope"] == "fabric" and len(a["trees"]) == 2
    assert b["admitted"] and b["scope"] == "pod" and b["hosts"] == ["h0", "h1", "h2", "h3"]
    assert not c["admitted"] and c["trees"] == [] and "threshold_bytes" in c["reason"]
    assert c["size_bytes"] == 10_000_000
    groups = [t["group"] for j in doc["jobs"] for t in j["trees"]]
    assert len(groups) == len(set(groups)) and all(g.startswith("239.1.") for g in groups)
    for j in (a, b):
        for t in j["trees"]:
            for h in j["hosts"]:
                path = path_to_root(t["edges"], h, t["root"])
                assert path[-1] == t["root"]
            assert t["switches"][-1] == t["root"]
    # Switch entries agree with the trees, and the shared ToR splits its memory.
    entries = {(s["name"], e["job"], e["tree_id"]): e for s in doc["switches"] for e in s["entries"]}
    tor0 = next(s for s in doc["switches"] if s["name"] == "tor0")
    assert tor0["jobs"] == [1, 2] and tor0["share_slots"] == 4096 // 2
    for j in (a, b):
        for t in j["trees"]:
            root = entries[(t["root"], j["job"], t["tree_id"])]
            assert root["parent"] is None and root["group"] == t["group"]
            for child, parent in t["edges"]:
                if not child.startswith("h"):
                    assert entries[(child, j["job"], t["tree_id"])]["parent"] == parent
                assert child in entries[(parent, j["job"], t["tree_id"])]["children"]
    assert sum(doc["root_load"].values()) == 4
    assert doc["controller"] == {
        "threshold_bytes": 40_000_000,
        "max_jobs_per_switch": 8,
        "packet_memory": 4096,
        "group_pool": "239.1.0.0/16",
    }


def test_schema_check_rejects_broken_documents(capsys):
    doc = plan_json(capsys, "--topology", "leaf-spine:leaves=2,spines=2,hosts_per_leaf=2", "--job", "a:h0,h2")
    for breakage in (
        lambda d: d["jobs"][0].pop("reason"),
        lambda d: d["jobs"][0]["trees"][0].update(group="300.1.2.3"),
        lambda d: d["jobs"][0]["trees"][0]["edges"].append(["h0"]),
        lambda d: d["jobs"][0].update(admitted="yes"),
        lambda d: d.update(extra=1),
        lambda d: d["switches"][0].update(tier="router"),
    ):
        broken = copy.deepcopy(doc)
        breakage(broken)
        with pytest.raises(SchemaViolation):
            validate(broken, PLAN_SCHEMA)


def test_controller_plan_text_out_and_png(capsys, tmp_path):
    out_file, png = tmp_path / "plan.json", tmp_path / "plan.png"
    code, out, _ = run(
        capsys, "controller", "plan", "--topology", "leaf-spine:leaves=4,spines=2,hosts_per_leaf=4",
        "--job", "x:h0,h4,h8", "--job", "y:h1,h2", "--trees", "4", "--out", str(out_file), "--png", str(png),
    )  # fmt: skip
    assert code == 0
    assert "job x (id 1): in-network" in out and "rooted at spine0, spine1" in out
    assert "warning: num_trees clamped from 4 to 2" in out
    assert "warning: num_trees clamped from 4 to 1: all workers are under leaf0" in out
    assert "forwarding entries" in out and "239.1.0.0" in out
    doc = json.loads(out_file.read_text())
    validate(doc, PLAN_SCHEMA)
    assert [j["job"] for j in doc["jobs"]] == ["x", "y"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_controller_plan_options(capsys):
    doc = plan_json(
        capsys, "--topology", "fat-tree:k=4", "--job", "a:h0,h4:5", "--threshold-mb", "1",
        "--max-jobs-per-switch", "3", "--packet-memory", "64", "--group-pool", "239.7.0.0/24",
    )  # fmt: skip
    assert doc["jobs"][0]["admitted"] and doc["jobs"][0]["trees"][0]["group"] == "239.7.0.0"
    assert doc["controller"]["packet_memory"] == 64 and doc["controller"]["threshold_bytes"] == 1_000_000


@pytest.mark.parametrize(
    "args, field",
    [
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h99"], "--job a"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1", "--trees", "0"], "--trees"),
        (["controller", "plan", "--topology", "fat-tree:k=5", "--job", "a:h0,h1"], "--topology: k"),
        (["controller", "plan", "--topology", "leaf-spine:leaves=2,spines=2", "--job", "a:h0,h1"], "hosts_per_leaf"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a"], "--job"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1:lots"], "--job a"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1:-5"], "--job a"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h3..h1"], "--job a"),
        (["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1", "--job", "a:h2,h3"], "--job a"),
        (
            ["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1", "--group-pool", "10.0.0.0/8"],
            "--group-pool",
        ),
        (
            ["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1", "--packet-memory", "1"],
            "--packet-memory",
        ),
        (
            ["controller", "plan", "--topology", "fat-tree:k=4", "--job", "a:h0,h1", "--png", "/nonexistent/x.png"],
            "--png",
        ),
        (["controller", "plan", "--topology", "fat-tree:k=4"], "--job"),
        (["topology", "show", "leaf-spine:leaves=0,spines=1,hosts_per_leaf=1"], "leaves"),
        (["topology", "show", "fat-tree:k=4", "--png", "out.jpg"], "--png"),
    ],
)
def test_bad_arguments_exit_2_naming_the_field(capsys, args, field):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "error:" in err
    assert field in err, err


def test_console_script_bad_argument():
    script = pathlib.Path(sys.executable).parent / "panama"
    cmd = [str(script)] if script.exists() else [sys.executable, "-c", "import panama.cli; panama.cli.main()"]
    proc = subprocess.run([*cmd, "topology", "show", "fat-tree:k=3"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "panama topology show: error: SPEC: k: must be even, got 3"


@pytest.mark.parametrize("args", [["topology", "show", "--help"], ["controller", "plan", "--help"]])
def test_help(capsys, args):
    code, out, _ = run(capsys, *args)
    assert code == 0 and "Usage:" in out


def test_job_and_host_parsing():
    assert parse_hosts("h0,h2..h4, h9", "--job") == ["h0", "h2", "h3", "h4", "h9"]
    assert parse_job("j:h0,h1") == ("j", ["h0", "h1"], 100_000_000)
    assert parse_job("j:h0,h1:0.5") == ("j", ["h0", "h1"], 500_000)
