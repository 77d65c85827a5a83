"""The simulator's network settings are defined once (issue 38, item 3): the scenario's
``[network]`` table is built from :class:`panama.sim.netconfig.NetworkConfig`, and the runner
builds the simulator's configurations from the scenario's tables, not field by field."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from panama.sim import scenario as scenario_module
from panama.sim.netconfig import REFERENCE_RATE_BPS, SCENARIO_SETTINGS, NetworkConfig, scenario_key
from panama.sim.runner import network_config, transport_settings
from panama.sim.scenario import NetworkSection, Scenario, ScenarioError, load_scenario
from panama.sim.training import TransportSettings

# The [network] table as users' files know it: keys, order (of dumps) and defaults.
NETWORK_DEFAULTS = {
    "pfc": True,
    "queue_limit_bytes": 450_000,
    "queue_limit_scales_with_rate": True,
    "switch_buffer_bytes": None,
    "pfc_alpha": 0.125,
    "pfc_headroom_factor": 3.0,
    "ecn": True,
    "ecn_k_packets": 65.0,
    "ecn_k_bytes": None,
    "host_ecn": True,
    "mtu_bytes": 1500,
    "dctcp_initial_window_packets": 10.0,
    "dctcp_min_rto_us": 1000.0,
    "dctcp_max_rto_us": 100_000.0,
}


def _annotated_names(path: Path) -> dict[str, set[str]]:
    """The names each class statement of ``path`` annotates (its fields)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return out


def test_no_class_of_the_scenario_restates_network_config():
    config_names = {f.name for f in dataclasses.fields(NetworkConfig)} | {s.key for s in SCENARIO_SETTINGS}
    classes = _annotated_names(Path(scenario_module.__file__))
    assert "NetworkConfig" not in classes
    restated = {name: sorted(fields & config_names) for name, fields in classes.items() if fields & config_names}
    assert restated == {}


def test_the_network_table_keeps_its_keys_order_and_defaults():
    assert Scenario().network.model_dump() == NETWORK_DEFAULTS
    assert list(NetworkSection.model_fields) == list(NETWORK_DEFAULTS)
    # every key of NetworkConfig's comes from it: the same description
    for s in SCENARIO_SETTINGS:
        assert NetworkSection.model_fields[s.key].description == s.description


def test_the_scenario_builds_the_simulators_network_config():
    defaults = {f.name: f.default for f in dataclasses.fields(NetworkConfig)}
    assert network_config(Scenario()) == NetworkConfig(
        **{**defaults, "lossless": True, "queue_limit_ref_bps": REFERENCE_RATE_BPS}
    )
    sc = load_scenario(
        None,
        [
            "network.pfc=false",
            "network.queue_limit_scales_with_rate=false",
            "network.ecn_k_packets=20",
            "network.mtu_bytes=9000",
        ],
    )
    cfg = network_config(sc)
    assert (cfg.lossless, cfg.queue_limit_ref_bps, cfg.ecn_k_packets_at_10g, cfg.mtu_bytes) == (False, None, 20.0, 9000)


@pytest.mark.parametrize(
    "field,key",
    [
        ("lossless", "network.pfc"),
        ("ecn_k_packets_at_10g", "network.ecn_k_packets"),
        ("mtu_bytes", "network.mtu_bytes"),
    ],
)
def test_errors_of_the_network_config_name_the_scenario_key(field, key):
    assert scenario_key(field) == key


def test_an_invariant_of_network_config_names_the_scenario_key():
    sc = load_scenario(None, ["network.mtu_bytes=9000", "network.queue_limit_bytes=4000"])
    with pytest.raises(ScenarioError) as info:
        network_config(sc)
    assert info.value.key == "network.queue_limit_bytes" and "at least one MTU" in info.value.detail


def test_transport_settings_come_from_the_panama_table():
    sets = [
        "panama.num_trees=3",
        "panama.payload_elems=100",
        "panama.initial_window_packets=7",
        "panama.fixed_window_packets=9",
        "panama.dctcp_g=0.5",
        "panama.initial_rto_us=2",
        "panama.min_rto_us=1",
        "panama.max_rto_us=3",
        "panama.min_pto_us=4",
        'panama.cc="dctcp-or"',
        "panama.path_floor_share=0.5",
        "pswitch.processing_latency_ns=7",
    ]
    got = transport_settings(load_scenario(None, sets))
    assert got == TransportSettings(
        num_trees=3,
        payload_elems=100,
        initial_window=7.0,
        fixed_window=9.0,
        dctcp_g=0.5,
        initial_rto_ps=2_000_000,
        min_rto_ps=1_000_000,
        max_rto_ps=3_000_000,
        min_pto_ps=4_000_000,
        cc="dctcp-or",
        path_floor_share=0.5,
        hop_latency_ps=7000,
    )
    assert transport_settings(Scenario()).min_pto_ps is None
