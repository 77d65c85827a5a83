"""``panama hw`` commands: JSON keys, exit codes, one-line errors."""

import json

import pytest

pytest.importorskip("amaranth")

from click.testing import CliRunner  # noqa: E402

from panama.cli import cli  # noqa: E402


def test_verify_json_keys():
    res = CliRunner().invoke(cli, ["hw", "verify", "--packets", "30", "--seed", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["packets"] == 30 and out["mismatches"] == 0 and "verdicts" in out


def test_bad_arguments_exit_2(capsys):
    from panama.cli import main

    for argv in (["hw", "verify", "--packets", "0"], ["hw", "report", "--clock-mhz", "0"],
                 ["hw", "verify", "--width", "100"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error" in err[0]
