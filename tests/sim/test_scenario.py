"""Scenario model: defaults, TOML round trip, dotted overrides, errors naming the key."""

from __future__ import annotations

import tomllib

import pytest

from panama.sim.scenario import (
    SCHEMES,
    Scenario,
    ScenarioError,
    apply_sets,
    default_scenario,
    dumps_toml,
    load_scenario,
    parse_value,
    scenario_from_dict,
)


def test_every_field_has_a_default_and_a_description():
    Scenario()  # an empty file is a valid scenario

    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} lacks a description"
            assert not field.is_required(), f"{model.__name__}.{name} has no default"
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann)

    walk(Scenario)


def test_toml_round_trip(tmp_path):
    sc = default_scenario().with_overrides(["topology.link_delay_us=2", "background.hosts=['h0','h1']"])
    text = sc.to_toml()
    assert scenario_from_dict(tomllib.loads(text)) == sc
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert load_scenario(path) == sc
    jpath = tmp_path / "s.json"
    jpath.write_text(sc.model_dump_json())
    assert load_scenario(jpath) == sc


def test_set_overrides_parse_toml_values():
    assert parse_value("true") is True and parse_value("3") == 3 and parse_value("2.5") == 2.5
    assert parse_value("web-search") == "web-search" and parse_value('"x"') == "x"
    assert parse_value("[1, 2]") == [1, 2]
    sc = load_scenario(None, ["network.pfc=false", "seed=3", "jobs.1.iterations=7", "background.workload=data-mining"])
    assert sc.network.pfc is False and sc.seed == 3 and sc.jobs[1].iterations == 7
    assert sc.background.workload == "data-mining"
    d = apply_sets({}, ["a.b.c=1"])
    assert d == {"a": {"b": {"c": 1}}}


@pytest.mark.parametrize(
    "sets,key",
    [
        (["network.pfc=maybe"], "network.pfc"),
        (["network.bogus=1"], "network.bogus"),
        (["bogus=1"], "bogus"),
        (["jobs.0.workers=1"], "jobs.0.workers"),
        (["jobs.0.hosts=['h1','h1']"], "jobs.0.hosts"),
        (["jobs.9.workers=3"], "jobs.9"),
        (["jobs.x.workers=3"], "jobs.x"),
        (["scheme=magic"], "scheme"),
        (["background.load=-1"], "background.load"),
        (["panama.min_rto_us=1e9"], "panama.min_rto_us"),
        (["panama.min_pto_us=0"], "panama.min_pto_us"),
        (["seed"], "seed"),
    ],
)
def test_errors_name_the_key(sets, key):
    with pytest.raises(ScenarioError) as info:
        load_scenario(None, sets)
    assert info.value.key == key
    assert "\n" not in str(info.value)


def test_with_scheme_keeps_everything_else():
    sc = default_scenario().with_overrides(["jobs.0.scheme=ring"])
    for s in SCHEMES:
        other = sc.with_scheme(s)
        assert other.scheme == s and all(j.scheme is None for j in other.jobs)
        assert other.model_copy(update={"scheme": sc.scheme, "jobs": sc.jobs}) == sc
    with pytest.raises(ScenarioError):
        sc.with_scheme("bogus")
    assert sc.job_scheme(0) == "ring" and sc.job_scheme(1) == sc.scheme
    assert sc.job_name(0) == "job0"


def test_toml_writer_handles_nested_tables_and_arrays():
    data = {"a": 1, "t": {"x": [1, 2], "u": {"y": "s"}}, "arr": [{"k": 1.5, "none": None}, {"k": True}]}
    assert tomllib.loads(dumps_toml(data)) == {
        "a": 1,
        "t": {"x": [1, 2], "u": {"y": "s"}},
        "arr": [{"k": 1.5}, {"k": True}],
    }


def test_example_scenarios_validate():
    from pathlib import Path

    examples = sorted((Path(__file__).parents[2] / "examples").glob("*.toml"))
    assert {p.name for p in examples} >= {"shared_cluster.toml", "quick.toml", "lossless.toml"}
    for path in examples:
        sc = load_scenario(path)
        assert sc.jobs, path.name


def _placed(placement: str, workers: list[int], seed: int = 3) -> list[list[str]]:
    from panama.sim.runner import Simulation
    from panama.sim.scenario import JobConfig, Scenario, TopologyConfig

    sc = Scenario(
        seed=seed,
        topology=TopologyConfig(spec="fat-tree:k=4"),
        placement=placement,
        jobs=[JobConfig(workers=w, gradient_bytes=4000, compute_us=10.0, iterations=1) for w in workers],
    )
    return [list(job.hosts) for job in Simulation(sc).jobs]


def test_disjoint_and_packed_placement_give_every_worker_its_own_host():
    from panama.core.topology import fat_tree

    topo = fat_tree(4)
    for placement in ("disjoint", "packed"):
        jobs = _placed(placement, [6, 4, 4, 2])
        every = [h for job in jobs for h in job]
        assert len(every) == len(set(every)) == 16, placement
        assert _placed(placement, [6, 4, 4, 2]) == jobs  # seeded
    # packed: a 4-worker job fills consecutive racks (2 hosts each on k=4): 2 racks, not 4
    for job in _placed("packed", [4, 4, 4, 4]):
        assert len({topo.tor_of(h) for h in job}) == 2
    # random (the default, as before): jobs drawn independently may share hosts
    shared = any(len({h for job in _placed("random", [8, 8], seed=s) for h in job}) < 16 for s in range(5))
    assert shared


def test_disjoint_placement_refuses_more_workers_than_hosts():
    from panama.sim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=r"jobs\.2\.workers.*only 4 of 16 hosts"):
        _placed("disjoint", [6, 6, 6])


def test_tail_loss_probes_are_off_unless_the_scenario_sets_a_floor():
    from panama.sim.runner import transport_settings

    assert transport_settings(default_scenario()).min_pto_ps is None
    sc = load_scenario(None, ["panama.min_pto_us=200"])
    assert transport_settings(sc).min_pto_ps == 200_000_000  # picoseconds
