"""The ``panama`` command line.

Subcommands live in the modules of the layer they drive and are imported only when
invoked (``LazyGroup``), so ``panama --help`` stays fast and a missing optional
dependency (torch, dask) only affects the commands that need it.

Every usage or configuration error ends as one line on stderr,
``panama <command>: error: <message naming the field>``, and exit code 2.
"""

from __future__ import annotations

import importlib
import sys

import click


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attribute"`` strings resolved on use."""

    def __init__(self, *args, lazy_subcommands: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_subcommands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            try:
                return self.resolve(cmd_name)
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
)
def bench() -> None:
    """Benchmarks that report ratios against a baseline measured in the same run."""


@cli.group(
    cls=LazyGroup,
    lazy_subcommands={
        "plan": "panama.cli.topology_cmds:controller_plan",
        "serve": "panama.cli.runtime_cmds:controller_serve",
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
    except OSError as exc:  # a file or socket the command could not use: one line, never a traceback
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"panama: error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
