"""Inputs that used to end in a traceback are one-line errors with exit code 2 (issue 27)."""

from __future__ import annotations

import pytest

from panama.cli import main


def _error(args, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--no-plots"],
        ["experiment", "shared-cluster", "--quick"],
        ["experiment", "comm-ratio"],
    ],
)
def test_out_under_a_regular_file(command, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    line = _error([*command, "--out", str(blocker / "run")], capsys)
    assert "--out" in line and "is a file, not a directory" in line
    assert not (blocker / "run").exists()


def test_cluster_up_on_an_address_of_another_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PANAMA_CLUSTER_STATE", str(tmp_path / "state" / "cluster.json"))
    line = _error(["cluster", "up", "--host", "10.255.255.1"], capsys)  # was OSError 99
    assert line.startswith("panama cluster up: error: host: cannot bind 10.255.255.1")
    assert not (tmp_path / "state").exists()


def test_hw_verify_negative_seed(capsys):
    line = _error(["hw", "verify", "--seed", "-1"], capsys)  # was numpy's ValueError
    assert "--seed" in line
