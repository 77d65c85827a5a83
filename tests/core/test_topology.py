"""Topology builders, naming, validation and spec/file parsing."""

from __future__ import annotations

import networkx as nx
import pytest

from panama.core.topology import (
    KINDS,
    Topology,
    TopologyError,
    fat_tree,
    kind_from_name,
    leaf_spine,
    parse_spec,
    parse_topology,
    topology_from_edge_list,
    topology_from_toml,
)
from panama.topology_file import load_topology


@pytest.mark.parametrize("k, hosts", [(4, 16), (8, 128), (16, 1024)])
def test_fat_tree_counts(k, hosts):
    t = fat_tree(k)
    half = k // 2
    c = t.counts()
    assert c == {
        "hosts": hosts,
        "tor": k * half,
        "agg": k * half,
        "core": half * half,
        "spine": 0,
        "links": hosts + 2 * k * half * half,
    }
    assert t.hosts[:3] == ["h0", "h1", "h2"] and t.hosts[-1] == f"h{hosts - 1}"
    assert t.switches[0] == "tor0" and t.switches[-1] == f"core{half * half - 1}"


def test_fat_tree_structure_k4():
    t = fat_tree(4)
    # Host i is the (i % 2)-th host of tor(i // 2); ToR/agg 2p, 2p+1 form pod p.
    for i, h in enumerate(t.hosts):
        assert h == f"h{i}"
        assert t.tor_of(h) == f"tor{i // 2}"
        assert t.pod(h) == i // 4
    assert t.hosts_of("tor3") == ["h6", "h7"]
    assert set(t.up("tor2")) == {"agg2", "agg3"}
    assert t.pod("agg5") == 2 and t.pod("core1") is None
    for c in t.cores:
        aggs = t.down(c)
        # each core reaches exactly one aggregation switch per pod, at position c // (k/2)
        assert sorted(t.pod(a) for a in aggs) == [0, 1, 2, 3]
        j = int(c[4:]) // 2
        assert all(int(a[3:]) % 2 == j for a in aggs)
    assert [t.tier(n) for n in ("h0", "tor0", "agg0", "core0")] == ["host", "tor", "agg", "core"]
    assert [t.level(n) for n in ("h0", "tor0", "agg0", "core0")] == [0, 1, 2, 3]


def test_fat_tree_rates_and_delays():
    t = fat_tree(4, rate_bps=40e9, delay_ps=2_000_000, host_rate_bps=10e9)
    assert t.rate_bps("h0", "tor0") == 10e9
    assert t.rate_bps("tor0", "agg0") == 40e9
    assert t.delay_ps("agg0", "core0") == 2_000_000
    for a, b, rate, delay in t.links():
        assert t.level(a) < t.level(b)
        assert rate == t.graph.edges[a, b]["rate_bps"] and delay == 2_000_000


def test_leaf_spine_structure_and_oversubscription():
    t = leaf_spine(4, 2, 8, host_rate_bps=10e9, fabric_rate_bps=20e9)
    assert t.counts() == {"hosts": 32, "tor": 4, "agg": 0, "core": 0, "spine": 2, "links": 32 + 8}
    assert t.tors == ["leaf0", "leaf1", "leaf2", "leaf3"] and t.spines == ["spine0", "spine1"]
    assert t.tor_of("h9") == "leaf1" and t.tier("leaf1") == "tor" and t.tier("spine1") == "spine"
    assert t.level("spine0") == 2
    assert t.oversubscription() == pytest.approx(8 * 10 / (2 * 20))
    # Bisection: 16 hosts each side at 10G vs 2 leaves x 2 spines x 20G fabric.
    assert t.bisection_bandwidth_bps() == pytest.approx(min(16 * 10e9, 2 * 2 * 20e9))
    assert leaf_spine(2, 1, 2).rate_bps("leaf0", "spine0") == 10e9  # fabric defaults to host rate


@pytest.mark.parametrize("k", [4, 8])
def test_fat_tree_full_bisection(k):
    t = fat_tree(k)
    assert t.bisection_bandwidth_bps() == pytest.approx(len(t.hosts) / 2 * 10e9)
    assert t.oversubscription() == 1.0


def test_to_dict_lists_everything():
    t = fat_tree(4)
    d = t.to_dict()
    assert d["hosts"] == t.hosts
    assert [s["name"] for s in d["switches"]] == t.switches
    assert {s["tier"] for s in d["switches"]} == {"tor", "agg", "core"}
    assert len(d["links"]) == 48
    assert d["links"][0] == ["h0", "tor0", 10e9, 1e-6]


@pytest.mark.parametrize(
    "spec, field",
    [
        ("fat-tree:k=3", "k"),
        ("fat-tree:k=0", "k"),
        ("fat-tree:k=four", "k"),
        ("fat-tree:k=66", "k"),
        ("fat-tree", "k"),
        ("fat-tree:k=4,gbps=0", "gbps"),
        ("fat-tree:k=4,delay_us=-1", "delay_us"),
        ("fat-tree:k=4,radix=4", "radix"),
        ("fat-tree:k=4,k=8", "k"),
        ("leaf-spine:leaves=0,spines=2,hosts_per_leaf=4", "leaves"),
        ("leaf-spine:leaves=4,spines=0,hosts_per_leaf=4", "spines"),
        ("leaf-spine:leaves=4,spines=2,hosts_per_leaf=-1", "hosts_per_leaf"),
        ("leaf-spine:leaves=4,spines=2", "hosts_per_leaf"),
        ("leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,fabric_gbps=nan", "fabric_gbps"),
        ("leaf-spine:leaves=4,spines=2,hosts_per_leaf=4,host_gbps=x", "host_gbps"),
        ("torus:n=4", "topology"),
        ("fat-tree:k", "topology"),
        ("does/not/exist.toml", "topology"),
    ],
)
def test_invalid_specs_name_the_parameter(spec, field):
    with pytest.raises(TopologyError) as info:
        parse_topology(spec)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: fat_tree(5), "k"),
        (lambda: fat_tree(4.0), "k"),
        (lambda: fat_tree(4, rate_bps=-1), "rate_bps"),
        (lambda: fat_tree(4, delay_ps=1.5), "delay_ps"),
        (lambda: fat_tree(4, host_rate_bps=float("inf")), "host_rate_bps"),
        (lambda: leaf_spine(0, 1, 1), "leaves"),
        (lambda: leaf_spine(1, 1, 1, fabric_rate_bps=0), "fabric_rate_bps"),
        (lambda: leaf_spine(1, True, 1), "spines"),
    ],
)
def test_invalid_builder_arguments(call, field):
    with pytest.raises(TopologyError) as info:
        call()
    assert info.value.field == field


def test_spec_names_round_trip():
    for t in (
        fat_tree(4),
        fat_tree(8, rate_bps=40e9, host_rate_bps=10e9, delay_ps=500_000),
        leaf_spine(3, 2, 5, 25e9, 100e9, 0),
    ):
        again = parse_spec(t.name)
        assert again.name == t.name
        assert again.links() == t.links()
    assert parse_spec("FatTree:k=4").name == fat_tree(4).name
    assert (
        parse_spec("leaf_spine: leaves=2, spines=1, hosts_per_leaf=2, fabric_gbps=40").rate_bps("leaf0", "spine0")
        == 40e9
    )


def test_toml_builtin_and_explicit(tmp_path):
    f = tmp_path / "ft.toml"
    f.write_text('kind = "fat-tree"\nk = 4\ngbps = 40\n')
    t = load_topology(str(f))
    assert t.counts()["hosts"] == 16 and t.rate_bps("tor0", "agg0") == 40e9

    g = tmp_path / "tiny.toml"
    g.write_text(
        """
name = "tiny"
gbps = 25
delay_us = 0.5
links = [["a", "r1"], ["b", "r1"], ["c", "r2", 10], ["r1", "s", 100, 2], ["r2", "s", 100, 2]]
[nodes]
host = ["a", "b", "c"]
tor = ["r1", "r2"]
spine = ["s"]
"""
    )
    t = load_topology(g)
    assert t.name == "tiny"
    assert t.hosts == ["a", "b", "c"] and t.tors == ["r1", "r2"] and t.spines == ["s"]
    assert t.rate_bps("a", "r1") == 25e9 and t.delay_ps("a", "r1") == 500_000
    assert t.rate_bps("c", "r2") == 10e9
    assert t.rate_bps("r1", "s") == 100e9 and t.delay_ps("r2", "s") == 2_000_000


def test_edge_list_infers_kinds(tmp_path):
    f = tmp_path / "net.edges"
    f.write_text("# a two-rack network\nh0 leaf0\nh1 leaf0 25\nh2 leaf1\nleaf0 spine0 100 0.5\nleaf1 spine0 100 0.5\n")
    t = load_topology(str(f))
    assert t.hosts == ["h0", "h1", "h2"] and t.spines == ["spine0"]
    assert t.rate_bps("h1", "leaf0") == 25e9 and t.delay_ps("leaf0", "spine0") == 500_000
    assert kind_from_name("core3") == "core" and kind_from_name("host7") == "host"
    with pytest.raises(TopologyError, match="x9"):
        kind_from_name("x9")


@pytest.mark.parametrize(
    "text, field",
    [
        ("h0 tor0\nh0 tor0\ntor0 spine0\n", "link h0-tor0"),
        ("h0 tor0 fast\n", "line 1 gbps"),
        ("h0 tor0 10 -1\n", "line 1 delay_us"),
        ("h0\n", "line 1"),
        ("h0 tor0\nh1 tor1\n", "graph"),  # not connected
        ("h0 tor0\nh0 tor1\ntor0 spine0\ntor1 spine0\n", "host h0"),  # two ToRs
        ("h0 spine0\n", "host h0"),
        ("", "topology"),
    ],
)
def test_edge_list_errors(text, field):
    with pytest.raises(TopologyError) as info:
        topology_from_edge_list(text)
    assert info.value.field == field


@pytest.mark.parametrize(
    "text, field",
    [
        ("links = 3", "links"),
        ('colour = "red"\nlinks = [["h0", "tor0"]]', "colour"),
        ('[nodes]\nrouter = ["x"]\n', "nodes.router"),
        ('links = [["h0"]]', "links[0]"),
        ('links = [["h0", "tor0", 0]]', "links[0] gbps"),
        ('kind = "fat-tree"\nk = 3', "k"),
        ("this is = not toml =", "topology"),
    ],
)
def test_toml_errors(text, field):
    with pytest.raises(TopologyError) as info:
        topology_from_toml(text)
    assert info.value.field == field


def test_graph_validation():
    g = nx.Graph()
    g.add_node("h0", kind="host")
    g.add_node("x", kind="router")
    g.add_edge("h0", "x", rate_bps=1e9, delay_ps=0)
    with pytest.raises(TopologyError, match="kind must be one of"):
        Topology(g)
    g.nodes["x"]["kind"] = "tor"
    g.edges["h0", "x"]["delay_ps"] = 1.0
    with pytest.raises(TopologyError, match="delay_ps"):
        Topology(g)
    g.edges["h0", "x"]["delay_ps"] = 1
    t = Topology(g)
    assert t.tor_of("h0") == "x" and set(KINDS) >= {t.tier(n) for n in t.graph}
    with pytest.raises(KeyError, match="unknown host"):
        t.tor_of("h1")


def test_layout_places_hosts_under_their_tor():
    t = fat_tree(4)
    pos = t.layout()
    assert set(pos) == set(t.graph.nodes)
    for h in t.hosts:
        assert pos[h][1] == 0.0
    for tor in t.tors:
        xs = [pos[h][0] for h in t.hosts_of(tor)]
        assert min(xs) < pos[tor][0] < max(xs)


def test_the_core_reads_no_file_and_load_topology_does(tmp_path):
    f = tmp_path / "ft.toml"
    f.write_text('kind = "fat-tree"\nk = 4\n')
    with pytest.raises(TopologyError, match="load_topology"):
        parse_topology(str(f))
    assert load_topology(str(f)).counts()["hosts"] == 16
    assert load_topology("fat-tree:k=4").counts()["hosts"] == 16
    with pytest.raises(TopologyError, match="no such file: does/not/exist.toml"):
        load_topology("does/not/exist.toml")
