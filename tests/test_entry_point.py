"""The ``panama`` entry point: help everywhere, one-line errors with exit code 2."""

import subprocess
import sys

import pytest

from panama.cli import cli, main


def run(*args):
    return subprocess.run([sys.executable, "-m", "panama", *args], capture_output=True, text=True, timeout=120)


def test_top_level_help_lists_every_contract_command():
    proc = run("--help")
    assert proc.returncode == 0
    for name in ("simulate", "experiment", "switch", "controller", "train", "bench", "topology", "cluster", "demo"):
        assert name in proc.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["bench", "core", "--workers", "0"], "--workers"),
        (["bench", "core", "--size-mb", "abc"], "--size-mb"),
        (["bench", "core", "--bogus"], "--bogus"),
        (["no-such-command"], "no-such-command"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, field, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "error" in err


def test_bench_core_small_json(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "core", "--workers", "3", "--size-mb", "0.2", "--json"])
    assert info.value.code == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert result["exact"] is True and result["ratio"] > 0 and result["contributions"] == 3 * result["packets"]


def test_every_registered_command_has_help():
    from click.testing import CliRunner

    runner = CliRunner()
    failures = []

    def walk(group, path):
        import click

        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            try:
                command = group.resolve(name) if name in getattr(group, "lazy_subcommands", {}) else None
                command = command or group.get_command(ctx, name)
            except ImportError as exc:
                failures.append(f"{' '.join(path + [name])}: cannot import: {exc}")
                continue
            result = runner.invoke(cli, path + [name, "--help"])
            if result.exit_code != 0:
                failures.append(f"{' '.join(path + [name])} --help exited {result.exit_code}: {result.output[-300:]}")
            if isinstance(command, click.Group):
                walk(command, path + [name])

    walk(cli, [])
    assert failures == []


# First contact: listing the commands imports none of them (torch alone took 2-3 s).
_IMPORTS_AFTER = """
import sys
from panama.cli import main
sys.argv = ["panama", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = ("torch", "numpy", "networkx", "pydantic", "panama.sim", "panama.runtime")
print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"], ["controller", "--help"], ["--bogus"]])
def test_help_and_a_bad_flag_import_no_command(args):
    proc = subprocess.run([sys.executable, "-c", _IMPORTS_AFTER, *args], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_declared_short_help_matches_each_command():
    """``lazy_help`` (what --help lists without importing) says what the command says."""
    for group in (cli, cli.get_command(None, "bench"), cli.get_command(None, "controller")):
        assert set(group.lazy_help) <= set(group.lazy_subcommands)
        for name, text in group.lazy_help.items():
            assert text == group.resolve(name).get_short_help_str(limit=1000), name
