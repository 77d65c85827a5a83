"""Place and route on ECP5 (`panama hw pnr`), the measured clock in `panama hw report`, stored cycles."""

import json
import os
import time

import pytest

pytest.importorskip("amaranth")

from click.testing import CliRunner  # noqa: E402

from panama.cli import cli  # noqa: E402

# A nextpnr --report of the form nextpnr-ecp5 0.11 writes (trimmed to one path of three steps).
NEXTPNR_REPORT = {
    "fmax": {"$glbnet$clk": {"achieved": 71.234, "constraint": 100.0}},
    "utilization": {
        "TRELLIS_COMB": {"available": 83640, "used": 20000},
        "DP16KD": {"available": 208, "used": 31},
        "ALU54B": {"available": 78, "used": 0},
    },
    "critical_paths": [
        {
            "from": "posedge $glbnet$clk",
            "to": "posedge $glbnet$clk",
            "path": [
                {"type": "clk-to-q", "net": "a", "delay": 0.5, "from": {"cell": "dut.x"}, "to": {"cell": "l1"}},
                {"type": "routing", "net": "dut.s_seq3", "delay": 2.0, "from": {"cell": "dut.x"}, "to": {"cell": "l1"}},
                {"type": "logic", "net": "b", "delay": 0.25, "from": {"cell": "l1"}, "to": {"cell": "l1"}},
                {"type": "routing", "net": "dut.hit", "delay": 1.0, "from": {"cell": "l1"}, "to": {"cell": "dut.y"}},
                {"type": "setup", "net": "c", "delay": 0.1, "from": {"cell": "dut.y"}, "to": {"cell": "dut.y"}},
            ],
        }
    ],
}


def test_nextpnr_report_summary():
    from panama.hw.pnr import summarise_report

    s = summarise_report(NEXTPNR_REPORT)
    assert s["fmax"] == {"clk": {"achieved_mhz": 71.23, "target_mhz": 100.0}}
    assert s["utilisation"] == {"TRELLIS_COMB": [20000, 83640], "DP16KD": [31, 208]}  # unused bels left out
    cp = s["critical_path"]
    assert cp["from"] == "dut.x" and cp["to"] == "dut.y" and cp["logic_levels"] == 1
    assert cp["routing_ns"] == 3.0 and cp["logic_ns"] == 0.85 and cp["delay_ns"] == 3.85
    assert cp["nets"] == ["dut.s_seq3", "dut.hit"]


def test_stored_pnr_is_that_of_this_design_and_the_report_gives_fmax_and_line_rate_at_it():
    """The shipped place and route (panama/data/hw/pnr.json) is of the RTL as it is now: any change
    to the code generating it needs `panama hw pnr --run --save src/panama/data/hw/pnr.json`. The
    report reads it and the stored cycles (no simulation, no place and route): seconds, not a minute."""
    from panama.hw.pnr import PNR_CONFIG, stored_pnr

    res = stored_pnr(PNR_CONFIG)
    assert res is not None and "status" not in res, "no stored place and route of PNR_CONFIG"
    fmax = res["fmax"]["clk"]["achieved_mhz"]
    assert fmax > 0 and res["device"] == "LFE5UM-85F" and res["critical_path"]["delay_ns"] > 0
    t0 = time.monotonic()
    out = CliRunner().invoke(cli, ["hw", "report", "--json"])
    assert out.exit_code == 0, out.output
    assert time.monotonic() - t0 < 20  # was 49 s: simulation of the default configuration every time
    rep = json.loads(out.output)
    assert rep["cycles_source"] == "stored" and rep["resources"]["source"] == "cached"
    assert rep["fmax_mhz"] == fmax and rep["timing"]["part"].startswith("LFE5UM-85F")
    t = rep["timing"]
    expect = t["cycles_per_packet"] and 1480 * 8 * fmax * 1e6 / t["cycles_per_packet"] / 1e9
    assert abs(rep["line_rate_gbps_at_fmax"] - expect) < 0.01
    assert rep["line_rate_gbps"] > 0 and "assumed" in rep["clock_note"]


def test_stored_cycles_are_those_of_this_design(tmp_path):
    from panama.hw.layout import HwConfig
    from panama.hw.report import CYCLES_CACHE, cycles, cycles_digest, load_synthesis_cache

    assert cycles_digest(HwConfig(), 32) in load_synthesis_cache(CYCLES_CACHE)
    assert cycles(HwConfig(), 32)["source"] == "stored"
    assert cycles_digest(HwConfig(), 32) != cycles_digest(HwConfig(), 16)
    small = HwConfig(width=256, slots=4, payload_elems=9, max_trees=2, max_children=2, ports=4)
    store = tmp_path / "c.json"
    first = cycles(small, 4, cache=store, save=store)
    assert first["source"] == "this run" and first["cycles_per_packet"] > first["beats_per_packet"]
    again = cycles(small, 4, cache=store)
    assert again["source"] == "stored" and again["cycles_per_packet"] == first["cycles_per_packet"]


def test_pnr_reads_the_stored_result_and_rejects_bad_options(capsys):
    from panama.cli import main

    res = CliRunner().invoke(cli, ["hw", "pnr", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["source"] == "stored"
    res = CliRunner().invoke(cli, ["hw", "pnr", "--slots", "3"])  # no stored run of this one
    assert res.exit_code == 1 and "--run" in res.output
    for argv in (
        ["hw", "pnr", "--freq", "0"],
        ["hw", "pnr", "--children", "3"],
        ["hw", "pnr", "--width", "100"],
        ["hw", "pnr", "--save", "x.json"],
        ["hw", "pnr", "--timeout-s", "-1"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error" in err[0]


@pytest.mark.skipif(not os.environ.get("PANAMA_HW_PNR"), reason="place and route: set PANAMA_HW_PNR=1 (minutes)")
def test_place_and_route_runs(tmp_path):
    from panama.hw.layout import HwConfig
    from panama.hw.pnr import place_and_route, stored_pnr

    cfg = HwConfig(width=256, slots=2, payload_elems=9, max_trees=1, max_children=2, ports=2)
    res = place_and_route(cfg, freq_mhz=50, timeout_s=1800, save=tmp_path / "p.json")
    assert "status" not in res, res.get("status")
    assert res["fmax"]["clk"]["achieved_mhz"] > 0 and res["critical_path"]["logic_levels"] > 0
    assert stored_pnr(cfg, cache=tmp_path / "p.json")["fmax"] == res["fmax"]
