"""The ``panama`` command line.

Subcommands live in the modules of the layer they drive and are imported only when
invoked (``LazyGroup``), so a missing optional dependency (torch, dask) only affects the
commands that need it. Listing them (``panama --help``) imports none of them: each
group declares their one-line help (``lazy_help``; ``tests/test_entry_point.py`` checks
it against the commands), so the first thing a newcomer types answers at once instead of
after importing torch.

Every usage or configuration error ends as one line on stderr,
``panama <command>: error: <message naming the field>``, and exit code 2; so does a build
of the compiled modules that :mod:`panama._ext` refuses (made by a Cython release known
to miscompile them).
"""

from __future__ import annotations

import importlib
import sys

import click
from click.utils import make_default_short_help

from panama._ext import BadBuildError


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attribute"`` strings resolved on use."""

    def __init__(
        self,
        *args,
        lazy_subcommands: dict[str, str] | None = None,
        lazy_help: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})
        # The first sentence of each lazy command's help, for the listing in --help.
        self.lazy_help = dict(lazy_help or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, without importing the lazy commands."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy_help:
                rows.append((name, self.lazy_help[name]))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, make_default_short_help(text, limit)) for name, text in rows])

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_subcommands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            try:
                return self.resolve(cmd_name)
            except BadBuildError:  # not a missing extra: main() says what to rebuild
                raise
            except ImportError as exc:
                return _unavailable(cmd_name, exc)
        return super().get_command(ctx, cmd_name)

    def resolve(self, cmd_name: str) -> click.Command:
        """Import and return the command behind ``cmd_name`` (ImportError if it cannot load)."""
        module_name, attr = self.lazy_subcommands[cmd_name].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attr} is not a click command")
        return command


def _unavailable(name: str, exc: ImportError) -> click.Command:
    """Stand-in for a command whose module cannot be imported (e.g. an optional dependency is missing)."""

    def fail() -> None:
        raise click.ClickException(
            f"'{name}' is unavailable here: {exc} (install the extras: pip install 'panama-ina[all]')"
        )

    return click.Command(name, callback=fail, help=f"(unavailable: {exc})", add_help_option=True)


@click.group(
    cls=LazyGroup,
    lazy_subcommands={
        "bench": "panama.cli:bench",
        "cluster": "panama.cli.runtime_cmds:cluster",
        "controller": "panama.cli:controller",
        "demo": "panama.cli.experiment_cmds:demo",
        "experiment": "panama.cli.experiment_cmds:experiment",
        "hw": "panama.cli.hw_cmds:hw",
        "simulate": "panama.cli.sim_cmds:simulate",
        "switch": "panama.cli.runtime_cmds:switch",
        "topology": "panama.cli.topology_cmds:topology",
        "train": "panama.cli.train_cmds:train",
    },
    lazy_help={
        "cluster": "Start, inspect and stop a local cluster (controller + switch daemons on this machine).",
        "demo": "A half-minute tour: ring vs panama on a simulated shared cluster, then real training through "
        "switch daemons.",
        "experiment": "Experiments that reproduce the claims of the original work (docs/experiments.md).",
        "hw": "The aggregation accelerator in hardware (Amaranth RTL): verify, report, export Verilog.",
        "simulate": "Run a packet-level simulation of SCENARIO (a TOML file; omitted: the built-in default).",
        "switch": "Run one PANAMA switch daemon (a UDP aggregation accelerator) in the foreground.",
        "topology": "Inspect data-centre topologies (fat-tree, leaf-spine, or from a file).",
        "train": "Train the reference LeNet data-parallel on W workers and check the replicas agree.",
    },
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="panama-ina", prog_name="panama")
def cli() -> None:
    """PANAMA: in-network gradient aggregation for shared ML clusters."""


@cli.group(
    cls=LazyGroup,
    lazy_subcommands={
        "core": "panama.cli.core_cmds:bench_core",
        "sim": "panama.cli.sim_cmds:bench_sim",
        "allreduce": "panama.cli.runtime_cmds:bench_allreduce",
        "switch": "panama.cli.runtime_cmds:bench_switch",
    },
    lazy_help={
        "core": "Aggregate WORKERS x SIZE_MB through one accelerator; compare with numpy.add on the same packets.",
        "sim": "Simulator speed: packet hops per CPU second, compiled against pure Python.",
        "allreduce": "Time PANAMA allreduce through a local cluster against gloo (torch.distributed) in the same run.",
        "switch": "One switch daemon summing pre-built datagrams from a feeder process, against its "
        "one-datagram-per-call loop and a receive-and-forward socket floor in the same run (payload Gb/s per core).",
    },
)
def bench() -> None:
    """Benchmarks that report ratios against a baseline measured in the same run."""


@cli.group(
    cls=LazyGroup,
    lazy_subcommands={
        "plan": "panama.cli.topology_cmds:controller_plan",
        "serve": "panama.cli.runtime_cmds:controller_serve",
    },
    lazy_help={
        "plan": "Plan aggregation trees for one or more jobs and print the decisions and switch entries.",
        "serve": "Serve the controller's HTTP/JSON API (docs/runtime.md) for workers and switch daemons.",
    },
)
def controller() -> None:
    """Controller: plan trees offline, or serve the controller API for switch daemons."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors, exit code 2 for bad input."""
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = cli.main(args=args, prog_name="panama", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # pragma: no cover - click >= 8.2
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(2)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "panama"
        click.echo(f"{where}: error: {_one_line(exc.format_message())}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"panama: error: {_one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code if exc.exit_code else 1)
    except click.exceptions.Abort:
        click.echo("panama: aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BadBuildError as exc:  # compiled modules built by a Cython release known to miscompile them
        click.echo(f"panama: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:  # a file or socket the command could not use: one line, never a traceback
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"panama: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
