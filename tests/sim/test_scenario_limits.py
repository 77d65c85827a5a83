"""Every simulator setting has a finite range (issue 27): inf, NaN, overflowing values,
non-UTF-8 files and loose booleans are one-line errors naming the key, exit code 2 —
never a traceback from deep inside the simulator."""

from __future__ import annotations

import pytest

from panama.cli import main

BAD = [
    ("duration_ms=inf", "duration_ms"),  # was OverflowError
    ("duration_ms=1e300", "duration_ms"),  # was OverflowError
    ("duration_ms=nan", "duration_ms"),
    ("max_time_ms=1e30", "max_time_ms"),
    ("sample_interval_us=1e-9", "sample_interval_us"),  # was FieldError interval_ps traceback
    ("burst_bin_us=1e-9", "burst_bin_us"),
    ("network.pfc='yes'", "network.pfc"),  # was accepted
    ("network.ecn=1", "network.ecn"),
    ("network.host_ecn='false'", "network.host_ecn"),
    ("network.queue_limit_scales_with_rate=0", "network.queue_limit_scales_with_rate"),
    ("topology.host_rate_gbps=inf", "topology.host_rate_gbps"),
    ("topology.link_delay_us=-inf", "topology.link_delay_us"),
    ("network.ecn_k_packets=nan", "network.ecn_k_packets"),
    ("network.dctcp_max_rto_us=1e300", "network.dctcp_max_rto_us"),
    ("panama.min_pto_us=inf", "panama.min_pto_us"),
    ("panama.dctcp_g=nan", "panama.dctcp_g"),
    ("pswitch.processing_latency_ns=1e300", "pswitch.processing_latency_ns"),
    ("pswitch.packet_memory_slots=100000000000", "pswitch.packet_memory_slots"),
    ("background.stop_ms=inf", "background.stop_ms"),
    ("jobs.0.gradient_bytes=100000000000000000000000", "jobs.0.gradient_bytes"),  # was TransportError
    ("jobs.0.compute_us=inf", "jobs.0.compute_us"),
    ("seed=100000000000000000000000", "seed"),
]


@pytest.mark.parametrize("setting,key", BAD, ids=[s for s, _ in BAD])
def test_bad_simulator_values_are_one_line_errors(setting, key, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--out", str(tmp_path / "run"), "--no-plots", "--set", setting])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2
    assert len(err) == 1 and err[0].startswith(f"panama simulate: error: {key}: "), err
    assert not (tmp_path / "run").exists()


def test_a_non_utf8_scenario_file_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "latin1.toml"
    path.write_bytes("duration_ms = 1.0 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(SystemExit) as info:
        main(["simulate", str(path), "--out", str(tmp_path / "run"), "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and "not UTF-8" in err[0], err
