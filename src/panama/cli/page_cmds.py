"""Click commands of the results page: ``panama experiment reproduce`` (run every output of the
page into one directory and write the page there) and ``panama experiment publish`` (store such a
directory's outputs in docs/results/ and write docs/results.md and the README's rows from them).
Both follow one table, :data:`panama.experiments.page_outputs.PAGE`."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path
from typing import Any

import click

from panama.cli.cluster_args import _command_line, parse_seeds, resolve_args
from panama.cli.common import DEFAULT_OUT, OutDir
from panama.experiments.page_outputs import PAGE, PAGE_OUTPUTS
from panama.experiments.schemes import PRESET_NAMES

__all__ = ["publish_cmd", "reproduce_cmd"]


@click.command(name="publish")
@click.option(
    "--from",
    "run_root",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=Path("out/final"),
    show_default=True,
    help="Directory holding the page's outputs (as `panama experiment reproduce --out DIR` leaves them): "
    + ", ".join(f"{name}/" for name in PAGE_OUTPUTS)
    + ".",
)
def publish_cmd(run_root: Path) -> None:
    """Store the page's outputs in docs/results/ and write docs/results.md and the README's headline rows from them.

    Run in the repository's root. Copies summaries, demo and training records, scenarios and
    figures (not the per-run points); tests/test_doc_numbers.py then checks every quoted
    number against these stored files.
    """
    from panama.experiments.publish import publish

    for path in publish(run_root):
        click.echo(f"wrote {path}")


# --------------------------------------------------------------------------- reproduce


def _reproduce_help() -> str:
    """The help of reproduce: the command behind each output, from the table it runs."""
    rows = []
    for o in PAGE:
        rows.append(f"OUT/{o.name}:")
        rows += textwrap.wrap(
            o.command(f"OUT/{o.name}"), 76, initial_indent="    ", subsequent_indent="        ", break_on_hyphens=False
        )
    return "\n".join(
        [
            "Run the experiments behind every output of the results page (resuming finished runs) and write the page.",
            "",
            "Each output gets its own folder, made with the settings the published page used "
            "(src/panama/experiments/page_outputs.py); each records the standalone command below, "
            "which the page prints. The paper-scale outputs take hours on a few cores (docs/experiments.md).",
            "",
            "\b",
            *rows,
            "",
            "Then it writes OUT/results.md (or --output) from them and prints the command that stores them "
            "in docs/ (`panama experiment publish --from OUT`); inspect the page first.",
        ]
    )


@click.command(name="reproduce", help=_reproduce_help())
@click.option(
    "--out",
    "out_dir",
    type=OutDir(),
    default=DEFAULT_OUT,
    show_default=True,
    help=f"Run directory: one folder per output of the results page ({', '.join(PAGE_OUTPUTS)}), the page "
    "itself (results.md); finished runs found there are resumed. `panama experiment publish --from OUT` "
    "then stores it in docs/.",
)
@click.option(
    "--seeds",
    default=None,
    metavar="LIST",
    help="Seeds of every shared-cluster output instead of each one's own (above); the page then differs "
    "from the published one. "
    "Changed: the default used to be 1,2,3 for all.",
)
@click.option(
    "--preset",
    type=click.Choice(PRESET_NAMES),
    default=None,
    help="Run every shared-cluster output on this preset instead of its own (the page's: paper, "
    "jobs-dominated), e.g. tiny for a smoke test of the whole path; the page is then not the published "
    "configuration. Changed: it used to choose the main result's preset only.",
)
@click.option(
    "--loads",
    default="",
    metavar="LIST",
    help="Also a load sweep at these loads (e.g. 0.1,0.3,0.5) on --sweep-preset into OUT/shared-cluster-sweep "
    "(--seeds, else 1,2,3). Not on the results page, and publish ignores it. Changed: off by default "
    "(it used to run at 0.1,0.3,0.5).",
)
@click.option(
    "--sweep-preset",
    type=click.Choice(["quick", "tiny"]),
    default="quick",
    show_default=True,
    help="Preset of the load sweep (--loads).",
)
@click.option(
    "--skip-demo",
    is_flag=True,
    help="Do not run the demo (training accuracy through switch daemons); the page then has no demo "
    "unless OUT/demo holds a finished one.",
)
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: CPU count).")
@click.option(
    "--scheduler", default=None, metavar="tcp://HOST:PORT", help="Existing Dask cluster for the simulator runs."
)
@click.option(
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Results page to write [default: OUT/results.md]. The project's page (docs/results.md) is written "
    "by `panama experiment publish --from OUT`, never by reproduce.",
)
def reproduce_cmd(
    out_dir: Path,
    seeds: str | None,
    preset: str | None,
    loads: str,
    sweep_preset: str,
    skip_demo: bool,
    jobs: int | None,
    scheduler: str | None,
    output: Path | None,
) -> None:
    # Its help is _reproduce_help()'s, written from the table it runs.
    from panama.experiments.publish import write_results_page
    from panama.experiments.sweep import SweepError

    cmd = _command_line() or shlex.join(["panama", "experiment", "reproduce", "--out", out_dir.as_posix()])
    seed_list = None if seeds is None else parse_seeds(seeds)  # None: each output's own
    # every shared-cluster output (and the sweep) validated before anything runs, each from the
    # very options its recorded command shows
    shared = {
        o.name: resolve_args(o.settings(seeds=seed_list, preset=preset), jobs)
        for o in PAGE
        if o.kind == "shared-cluster"
    }
    sweep_args = ["--preset", sweep_preset, "--seeds", seeds or "1,2,3", "--sweep", f"load={loads}"]
    sweep = resolve_args(sweep_args, jobs) if loads.strip() else None
    steps = [o for o in PAGE if not (skip_demo and o.kind == "demo")]
    n = len(steps) + 1 + (sweep is not None)
    try:
        for i, o in enumerate(steps, 1):
            command = o.command(out_dir / o.name, seeds=seed_list, preset=preset)
            click.echo(f"[{i}/{n}] {o.name}: {command}", err=True)
            _run_page_output(o, out_dir / o.name, command, shared.get(o.name), jobs, scheduler)
        if sweep is not None:
            click.echo(f"[{n - 1}/{n}] load sweep, not on the page ({sweep_preset}, loads {loads})", err=True)
            sweep_dir = out_dir / "shared-cluster-sweep"
            sweep_cmd = shlex.join(
                ["panama", "experiment", "shared-cluster", *sweep_args, "--out", sweep_dir.as_posix()]
            )
            _run_shared(sweep_dir, sweep, jobs, scheduler, sweep_cmd)
    except SweepError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"[{n}/{n}] results page", err=True)
    page = write_results_page(out_dir, output or out_dir / "results.md", command=cmd)
    click.echo(f"wrote {page}")
    click.echo("to store these outputs in docs/results/ and write docs/results.md and the README's rows from them:")
    click.echo(f"  panama experiment publish --from {shlex.quote(out_dir.as_posix())}")


def _run_shared(out: Path, kw: dict[str, Any], jobs: int | None, scheduler: str | None, command: str) -> None:
    from panama.experiments.shared_cluster import format_table, run_shared_cluster

    res = run_shared_cluster(out, jobs=jobs, scheduler=scheduler, command=command, **kw)
    click.echo(format_table(res.summary), err=True)


def _run_page_output(
    o: Any, out: Path, command: str, kw: dict[str, Any] | None, jobs: int | None, scheduler: str | None
) -> None:
    """One output of the results page (a page_outputs.PageOutput) into ``out``."""
    if o.kind == "comm-ratio":
        from panama.experiments.comm_ratio import run_comm_ratio

        run_comm_ratio(out)
    elif o.kind == "shared-cluster":
        _run_shared(out, kw or {}, jobs, scheduler, command)
    else:
        from panama.experiments.demo import run_demo

        run_demo(out, jobs=jobs, echo=lambda m: click.echo(m, err=True), command=command)
