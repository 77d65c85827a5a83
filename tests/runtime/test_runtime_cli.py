"""``panama switch``, ``controller serve``, ``cluster up|status|down``, ``bench allreduce`` from the shell."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

PANAMA = [sys.executable, "-m", "panama.cli.runtime_cmds"]


def _run(args, **kw):
    return subprocess.run(PANAMA + args, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize(
    "args,field",
    [
        (["switch", "--id", "s", "--packet-memory", "0"], "packet-memory"),
        (["switch", "--id", "s", "--udp", "localhost"], "udp"),
        (["switch", "--id", "s", "--drop-prob", "1.5"], "drop-prob"),
        (["controller", "serve", "--cluster", "/nonexistent/cluster.toml"], "cluster"),
        (["bench", "allreduce", "--workers", "1"], "workers"),
        (["bench", "allreduce", "--size-mb", "1,x"], "size-mb"),
        (["bench", "allreduce", "--rounds", "0"], "rounds"),
        (["bench", "allreduce", "--drop-prob", "1.5"], "drop-prob"),
        (["cluster", "up", "--leaves", "0"], "leaves"),
        (["cluster", "up", "--host", "localhost"], "host"),
        (["cluster", "up", "--port", "70000"], "port"),
    ],
)
def test_bad_arguments_exit_2_naming_the_field(args, field, capsys):
    from panama.cli import main

    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and field in lines[0], lines


def test_bad_argument_through_the_console_script():
    proc = _run(["switch", "--id", "s", "--batch", "0"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "batch" in proc.stderr


def test_help_of_every_command(capsys):
    from panama.cli import main

    for args in (["switch"], ["controller", "serve"], ["cluster", "up"], ["cluster", "status"], ["bench", "allreduce"]):
        with pytest.raises(SystemExit) as info:
            main(args + ["--help"])
        assert info.value.code == 0 and "Usage" in capsys.readouterr().out


def test_cluster_up_status_down(tmp_path):
    from panama.runtime.net.udp import free_port

    state = tmp_path / "cluster.json"
    fixed = free_port("127.0.0.1")
    up = _run(
        [
            "cluster",
            "up",
            "--leaves",
            "2",
            "--spines",
            "1",
            "--hosts-per-leaf",
            "1",
            "--port",
            str(fixed),
            "--state",
            str(state),
            "--json",
            "--log-level",
            "WARNING",
        ]
    )
    assert up.returncode == 0, up.stderr
    try:
        status = _run(["cluster", "status", "--json", "--state", str(state)])
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["controller"] == f"127.0.0.1:{fixed}" and info["controller_up"]  # --port kept
        assert sorted((s["id"], s["role"]) for s in info["switches"]) == [
            ("leaf0", "leaf"),
            ("leaf1", "leaf"),
            ("spine0", "spine"),
        ]
        assert all(s["up"] and s["udp"].startswith("127.0.0.1:") for s in info["switches"])
        # A second 'up' refuses while this one runs.
        again = _run(["cluster", "up", "--state", str(state)])
        assert again.returncode == 2 and "state" in again.stderr
        # The recorded cluster works for a 2-rank job.
        from rt_helpers import run_ranks

        results, errors = run_ranks(
            info["controller"], "cli", 2, lambda c, r: c.allreduce(np.full(10, r + 1, np.float32))
        )
        assert errors == [None, None] and np.all(results[0] == 3.0)
        text = _run(["cluster", "status", "--state", str(state)])
        assert "spine0" in text.stdout and "controller" in text.stdout
    finally:
        down = _run(["cluster", "down", "--state", str(state)])
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    from panama.runtime.lifeline import pid_alive

    for pid in json.loads(up.stdout)["pids"].values():
        assert not pid_alive(pid)  # gone (or a zombie waiting for init to reap it)
    missing = _run(["cluster", "status", "--state", str(state)])
    assert missing.returncode == 1 and "no cluster state" in missing.stderr


def test_bench_allreduce_runs_both_implementations(tmp_path):
    pytest.importorskip("torch")  # the baseline is gloo (CI's other Pythons run without torch)
    from panama.benchmarks.allreduce import BenchConfig, format_table, loopback_datagrams, run_bench, write_results

    cfg = BenchConfig(
        workers=2, sizes_mb=[0.05], iters=2, rounds=3, leaves=2, spines=1, payload_elems=1000, timeout_s=60
    )
    rows = run_bench(cfg, progress=False)
    (row,) = rows
    assert row["size_bytes"] == 50_000 and row["panama_ms"] > 0 and row["gloo_ms"] > 0
    assert len(row["panama_ms_by_round"]) == len(row["gloo_ms_by_round"]) == 3
    ratios = sorted(g / p for g, p in zip(row["gloo_ms_by_round"], row["panama_ms_by_round"]))
    assert row["ratio"] == pytest.approx(ratios[1]) and row["ratio_min"] == pytest.approx(ratios[0])
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert row["panama_ms"] == pytest.approx(sorted(row["panama_ms_by_round"])[1])
    # 50 kB = 13 packets of 1000 floats per rank, over the tree of leaf0 + leaf1 + spine0:
    # 2 x 13 x (2 + 2) datagrams, and one closing ack up each of its 4 edges
    expected = loopback_datagrams(50_000, 2, switches_per_tree=3, payload_elems=1000)
    assert expected == 108
    # more only if something was retransmitted; up to the 4 closing acks fewer when they are
    # still in flight as the counters are read right after a phase
    assert row["datagrams_per_call"] >= expected - 4
    # unicast everywhere here (one worker per leaf): every datagram sent is received once
    assert row["sends_per_call"] == pytest.approx(row["datagrams_per_call"], abs=4)
    floor = row["floor"]
    assert floor["block_bytes"] == 4_036  # one datagram of 1000 floats with its header and key
    assert floor["panama_cpu_ms"] == pytest.approx(
        (row["sends_per_call"] * floor["udp_send_us"] + row["datagrams_per_call"] * floor["udp_recv_us"]) / 1e3
    )
    ring = 2 * (2 - 1) * 50_000 / 4_036  # 2 ranks: each sends and receives half the vector
    assert floor["gloo_cpu_ms"] == pytest.approx(ring * (floor["tcp_send_us"] + floor["tcp_recv_us"]) / 1e3)
    assert floor["ratio"] == pytest.approx(floor["gloo_cpu_ms"] / floor["panama_cpu_ms"])
    assert floor["panama_over_floor"] == pytest.approx(row["panama_cpu_ms"] / floor["panama_cpu_ms"])
    assert floor["gloo_over_floor"] == pytest.approx(row["gloo_cpu_ms"] / floor["gloo_cpu_ms"])
    assert row["panama_max_rel_err"] < 1e-6 and row["switch_gbps"] > 0
    assert set(row["panama_cpu_ms_by_process"]) == {"leaf0", "leaf1", "spine0", "controller", "workers"}
    by = row["switch_payload_gbps_by_daemon"]
    assert set(by) == {"leaf0", "leaf1", "spine0"} and min(by.values()) > 0
    # every contribution is summed once per tier: the spine sums both leaves' partials
    assert by["spine0"] == pytest.approx(2 * by["leaf0"]) == pytest.approx(2 * by["leaf1"])
    assert set(row["switch_payload_gbps_per_cpu_by_daemon"]) <= set(by)
    write_results(rows, cfg, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["size_mb"] == 0.05
    assert "panama_cpu_ms_leaf0" in (tmp_path / "results.csv").read_text()
    assert "floor_ratio" in (tmp_path / "results.csv").read_text()
    assert "ratio" in format_table(rows) and "payload Gb/s summed per daemon" in format_table(rows)
    assert "ratio at the floors" in format_table(rows)


def test_bench_allreduce_with_loss_at_every_switch_stays_exact():
    from panama.benchmarks.allreduce import BenchConfig, run_bench

    cfg = BenchConfig(
        workers=2,
        sizes_mb=[0.2],
        iters=3,
        rounds=1,
        leaves=2,
        spines=1,
        payload_elems=1000,
        drop_prob=0.05,
        min_rto_s=0.01,
        gloo=False,
        floor=False,
        timeout_s=60,
        seed=3,
    )
    (row,) = run_bench(cfg, progress=False)
    assert row["panama_max_rel_err"] < 1e-6  # against a float64 reference: every contribution summed once
    # 50 packets per rank per call cross 3 daemons twice: some of them were lost and resent
    assert row["panama_retransmissions_rank0"] > 0


def test_a_taken_controller_port_is_named():
    import socket

    from panama.runtime.cluster import ClusterError, LocalCluster

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ClusterError, match=f"controller_port: 127.0.0.1:{port} is taken"):
            LocalCluster(leaves=1, spines=1, hosts_per_leaf=2, controller_port=port, log_level="WARNING").start()
