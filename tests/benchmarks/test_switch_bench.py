"""`panama bench switch`: the daemon-only throughput benchmark (numbers are not asserted, only that it measures)."""

import json

import pytest
from click.testing import CliRunner

from panama.benchmarks.switch import SwitchBenchConfig, run_bench_switch
from panama.cli import cli
from panama.runtime.net import mmsg


def test_bench_switch_measures_the_daemon_and_the_floor():
    cfg = SwitchBenchConfig(jobs=2, trees=2, workers=3, payload_elems=2000, window=4, seconds=0.5, warmup_s=0.2)
    report = run_bench_switch(cfg)
    assert report["datagram_bytes"] == 28 + 4 * 2000 + 8
    assert report["payload_gbps"] > 0 and report["floor_payload_gbps"] > 0
    assert report["accelerator_drops"] == 0  # closed loop: every contribution is summed exactly once
    assert report["ratio_to_floor"] == pytest.approx(report["payload_gbps"] / report["floor_payload_gbps"])
    assert 0 < report["daemon_cpu_share"] <= 1.5
    assert report["baseline_payload_gbps"] > 0
    assert report["ratio_to_baseline"] == pytest.approx(report["payload_gbps"] / report["baseline_payload_gbps"])
    assert report["datagrams_per_batch"] >= 1 and 0 <= report["gso_share"] <= 1
    if report["offload"]["gso"] and report["offload"]["gro"]:  # 8 KB datagrams: 8 fit one GSO send
        assert report["batched_loop"] and report["datagrams_per_batch"] > 1 and report["gso_share"] > 0


def test_bench_switch_without_offload_is_the_baseline_twice(monkeypatch):
    monkeypatch.setenv("PANAMA_UDP_OFFLOAD", "0")
    cfg = SwitchBenchConfig(workers=2, payload_elems=300, window=4, seconds=0.3, warmup_s=0.1)
    report = run_bench_switch(cfg)
    assert not report["batched_loop"] and report["gso_share"] == 0
    if mmsg.BATCHED:  # the plain loop's recvmmsg/sendmmsg: one system call for several datagrams
        assert report["datagrams_per_batch"] >= 1
    else:
        assert report["datagrams_per_batch"] == pytest.approx(1.0)
    assert report["payload_gbps"] > 0 and report["baseline_payload_gbps"] > 0


def test_bench_switch_cli_json():
    res = CliRunner().invoke(cli, ["bench", "switch", "--seconds", "0.3", "--payload-elems", "500", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in (
        "payload_gbps",
        "payload_gbps_wall",
        "datagrams_per_s",
        "floor_payload_gbps",
        "ratio_to_floor",
        "baseline_payload_gbps",
        "ratio_to_baseline",
        "datagrams_per_batch",
    ):
        assert out[key] > 0, key


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--window", "0"], "window"),
        (["--payload-elems", "0"], "payload-elems"),
        (["--jobs", "8", "--trees", "8", "--window", "8"], "window"),  # 512 slots over 64 trees: 8 each
        (["--seconds", "0"], "seconds"),
    ],
)
def test_bench_switch_rejects_bad_options(argv, field):
    res = CliRunner().invoke(cli, ["bench", "switch", *argv])
    assert res.exit_code == 2
    assert field in res.output
