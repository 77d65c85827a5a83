"""``panama bench sim``: keys of the JSON output, the table, the baseline loop, bad arguments."""

from __future__ import annotations

import json

import pytest

from panama.cli import main
from panama.core.units import ms
from panama.sim.bench import minimal_loop, run_reference

KEYS = ("goodput_gbps", "jain", "queue_mean_pkts", "queue_p99_pkts", "drops", "sim_hops_per_s",
        "loop_hops_per_s", "ratio")


def run_cli(capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_bench_sim_json_has_the_documented_keys(capsys):
    code, out, _ = run_cli(capsys, ["bench", "sim", "--duration-ms", "2", "--json"])
    assert code == 0
    res = json.loads(out)
    for k in KEYS:
        assert k in res, k
    assert res["ratio"] == pytest.approx(res["sim_hops_per_s"] / res["loop_hops_per_s"])
    assert res["drops"] == 0 and res["goodput_gbps"] > 8.0


def test_bench_sim_table(capsys):
    code, out, _ = run_cli(capsys, ["bench", "sim", "--duration-ms", "1"])
    assert code == 0
    assert "ratio sim/loop" in out and "Jain fairness" in out


def test_bench_sim_bad_argument_names_the_option(capsys):
    code, _, err = run_cli(capsys, ["bench", "sim", "--duration-ms", "-3"])
    assert code == 2
    assert "--duration-ms" in err and len(err.strip().splitlines()) == 1


def test_minimal_loop_moves_the_requested_hops():
    hops, wall = minimal_loop(5000)
    assert hops == 5000 and wall > 0


def test_reference_scenario_is_deterministic():
    a = run_reference(ms(1), seed=4)
    b = run_reference(ms(1), seed=4)
    for k in ("goodput_gbps", "packet_hops", "queue_mean_pkts", "events", "flow_goodput_gbps"):
        assert a[k] == b[k]
