"""Click commands: ``panama experiment {comm-ratio, shared-cluster, report}`` and ``panama demo``; the
results page's ``reproduce`` and ``publish`` are in page_cmds.py, the shared-cluster options in
cluster_args.py."""

from __future__ import annotations

from pathlib import Path

import click

from panama.cli.cluster_args import (  # noqa: F401  (_resolve_shared_cluster: tests use it from here)
    _command_line,
    _resolve_shared_cluster,
    _shared_cluster_options,
)
from panama.cli.common import DEFAULT_OUT, OutDir, usage_error
from panama.cli.page_cmds import publish_cmd, reproduce_cmd
from panama.experiments.page_outputs import PAGE

__all__ = ["demo", "experiment"]


def _float_list(field: str, text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise usage_error(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise usage_error(field, f"expected positive numbers, got {text!r}")
    return vals


@click.group(name="experiment")
def experiment() -> None:
    """Experiments that reproduce the claims of the original work (docs/experiments.md).

    \b
    comm-ratio      communication share of an iteration; single-job speed-up bound
    shared-cluster  one shared cluster under ring / ina-fixed / ina-single / panama
    report          write a results page (panama-out/results.md) from chosen experiment outputs
    reproduce       run every output of the results page into OUT/<name>, write OUT/results.md
    publish         store OUT's outputs in docs/results/, write docs/results.md and the README's rows
    """


experiment.add_command(publish_cmd)  # page_cmds.py: the results page's two commands
experiment.add_command(reproduce_cmd)


# --------------------------------------------------------------------------- comm-ratio


@experiment.command(name="comm-ratio")
@click.option(
    "--models",
    "models_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Input table (CSV, '#' comments; see src/panama/data/models.csv for the columns). "
    "Default: the packaged table with cited sources.",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Workers N of the ring: it moves 2(N-1)/N x the gradient per worker. Default: the large-N limit, 2x.",
)
@click.option(
    "--link-gbps",
    "link_gbps",
    default=None,
    metavar="LIST",
    help="Evaluate every row at each of these link rates (e.g. 10,40,100) instead of its own link_gbps.",
)
@click.option(
    "--out",
    "out_dir",
    type=OutDir(),
    default=DEFAULT_OUT / "comm-ratio",
    show_default=True,
    help="Output directory.",
)
@click.option("--no-plots", "--no-plot", "no_plot", is_flag=True, help="Skip comm_ratio.png.")
@click.option("--quiet", "-q", is_flag=True, help="No terminal table.")
def comm_ratio_cmd(
    models_path: Path | None, workers: int | None, link_gbps: str | None, out_dir: Path, no_plot: bool, quiet: bool
) -> None:
    """Communication/(communication+computation) and the in-network speed-up bound (the motivation figure).

    Per-iteration compute time comes from published single-GPU throughput, communication
    time from the gradient size over the link (ring allreduce moves about 2x what
    in-network aggregation does). Writes comm_ratio.csv, summary.json, models_used.csv
    and comm_ratio.png.
    """
    from panama.experiments.comm_ratio import ModelTableError, run_comm_ratio

    if workers is not None and workers < 2:
        raise usage_error("--workers", f"must be >= 2, got {workers}")
    links = _float_list("--link-gbps", link_gbps)
    try:
        summary = run_comm_ratio(
            out_dir, models_path=models_path, workers=workers, link_gbps=links, make_plot=not no_plot
        )
    except ModelTableError as exc:
        raise usage_error(f"--models: {exc.field}", exc.detail) from None
    if not quiet:
        click.echo(summary["table_text"])
        click.echo("")
        for name, r in summary["ranges"]["by_gpu"].items():
            click.echo(
                f"{name:<14} ratio {r['comm_ratio_min']:.2f}-{r['comm_ratio_max']:.2f}   "
                f"speed-up {r['speedup_min']:.2f}-{r['speedup_max']:.2f}"
            )
        click.echo(f"\nwrote {out_dir}/comm_ratio.csv, summary.json" + ("" if no_plot else ", comm_ratio.png"))


# --------------------------------------------------------------------------- shared-cluster


@experiment.command(name="shared-cluster")
@_shared_cluster_options
@click.option(
    "--out",
    "out_dir",
    type=OutDir(),
    default=None,
    help="Output directory (resumes finished runs found there). Default: panama-out/shared-cluster[-quick].",
)
@click.argument("more_axes", nargs=-1, metavar="[KEY=V1,V2]...")
def shared_cluster_cmd(
    quick: bool,
    preset: str | None,
    scenario_path: Path | None,
    sets: tuple[str, ...],
    schemes: str,
    load: float | None,
    trees: int | None,
    seed: int | None,
    seeds: str | None,
    sweeps: tuple[str, ...],
    jobs: int | None,
    scheduler: str | None,
    keep_runs: bool,
    fresh: bool,
    no_plot: bool,
    quiet: bool,
    floor: bool,
    out_dir: Path | None,
    more_axes: tuple[str, ...],
) -> None:
    """The main result: the same shared-cluster workload and seed under each scheme, normalised to ring.

    Trailing KEY=V1,V2 arguments are more sweep axes, so
    `--sweep load=0.3,0.5,0.7 trees=1,2,4 seed=1,2,3` works without quotes.

    Background web-search flows at a target load share a fat-tree (or leaf-spine) with
    data-parallel jobs, some above and some below the (scaled) 40 MB in-network threshold.
    Reports short-flow FCT mean and p99, large-flow FCT, large-job training time and bytes
    per tier, each as a ratio to ring, with 95 % confidence intervals over seeds. Writes
    runs.csv, summary.csv, summary.json, fct_cdf.png, normalized.png (sweep.png for sweeps).
    """
    from panama.experiments import cluster_scenario
    from panama.experiments.shared_cluster import format_table, run_shared_cluster
    from panama.experiments.sweep import SweepError
    from panama.sim.scenario import ScenarioError

    kw = _resolve_shared_cluster(
        quick, preset, scenario_path, sets, schemes, load, trees, seed, seeds, sweeps + more_axes, jobs
    )
    if out_dir is None:
        out_dir = DEFAULT_OUT / (
            "shared-cluster"
            if kw["preset"] in (cluster_scenario.DEFAULT_PRESET, "file")
            else f"shared-cluster-{kw['preset']}"
        )
    try:
        res = run_shared_cluster(
            out_dir,
            jobs=jobs,
            scheduler=scheduler,
            keep_runs=keep_runs,
            make_plots=not no_plot,
            progress=not quiet,
            command=_command_line(),
            fresh=fresh,
            floor=floor,
            **kw,
        )
    except ScenarioError as exc:
        raise usage_error(exc.key, exc.detail) from None
    except SweepError as exc:
        raise click.ClickException(str(exc)) from None
    if not quiet:
        click.echo(format_table(res.summary))
        for line in _schemes_used(res.runs, res.summary.get("config", {}).get("threshold_bytes")):
            click.echo(line)
        files = ", ".join(v for v in res.summary.get("files", {}).values())
        click.echo(
            f"\n{res.summary['computed_runs']} runs computed, {res.summary['resumed_runs']} resumed; "
            f"wrote {out_dir}/: {files}"
        )


def _schemes_used(runs: list[dict], threshold_bytes: int | None) -> list[str]:
    """One line per scheme: which allreduce each job actually ran under it, and why some ran ring."""
    used: dict[str, dict[str, set[str]]] = {}
    for run in runs:
        scheme = str(run["params"].get("scheme"))
        for job, ran in (run["result"].get("job_scheme_used") or {}).items():
            used.setdefault(scheme, {}).setdefault(str(ran), set()).add(job)
    lines = []
    for scheme, by_used in used.items():
        parts = [f"{ran}: {', '.join(sorted(jobs))}" for ran, jobs in sorted(by_used.items())]
        why = ""
        if scheme != "ring" and "ring" in by_used:
            limit = f"{threshold_bytes:,} B" if threshold_bytes is not None else "the threshold"
            why = f" (ring: gradient below threshold_bytes {limit}, or no accelerator room)"
        lines.append(f"jobs under {scheme} ran {'; '.join(parts)}{why}")
    return lines


# --------------------------------------------------------------------------- report


@experiment.command(name="report")
@click.option(
    "--comm-ratio",
    "comm_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_OUT / "comm-ratio",
    show_default=True,
    help="Output directory of comm-ratio.",
)
@click.option(
    "--shared-cluster",
    "shared_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directories of shared-cluster runs (repeatable). Default: those present of "
    + ", ".join(f"panama-out/{o.name}" for o in PAGE if o.kind == "shared-cluster")
    + " (the page's, as `reproduce` leaves them), panama-out/shared-cluster and panama-out/shared-cluster-sweep.",
)
@click.option(
    "--demo",
    "demo_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output directory of panama demo (training accuracy). Default: panama-out/demo if present.",
)
@click.option(
    "--output",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT / "results.md",
    show_default=True,
    help="Markdown file to write (the project's page is docs/results.md: name it to replace it).",
)
def report_cmd(comm_dir: Path, shared_dirs: tuple[Path, ...], demo_dir: Path | None, output: Path) -> None:
    """Write the results page (claims of the original work vs. our measured numbers) from experiment outputs.

    Every number in it is read from the outputs' summary.json files; nothing is typed in.
    """
    from panama.experiments.report import ReportError, write_report

    if not shared_dirs:
        shared_dirs = tuple(
            p
            for p in (
                *(DEFAULT_OUT / o.name for o in PAGE if o.kind == "shared-cluster"),
                DEFAULT_OUT / "shared-cluster",
                DEFAULT_OUT / "shared-cluster-sweep",
            )
            if (p / "summary.json").is_file()
        )
    if demo_dir is None and (DEFAULT_OUT / "demo" / "demo.json").is_file():
        demo_dir = DEFAULT_OUT / "demo"
    try:
        path = write_report(
            output, comm_ratio_dir=comm_dir, shared_dirs=list(shared_dirs), demo_dir=demo_dir, command=_command_line()
        )
    except ReportError as exc:
        raise usage_error(exc.field, exc.detail) from None
    click.echo(f"wrote {path}")


# --------------------------------------------------------------------------- demo


@click.command(name="demo")
@click.option(
    "--out",
    "out_dir",
    type=OutDir(),
    default=Path("panama-demo-out"),
    show_default=True,
    help="Output directory (resumes finished simulation runs found there).",
)
@click.option("--skip-train", is_flag=True, help="Only the simulated shared-cluster comparison.")
@click.option("--epochs", type=int, default=2, show_default=True, help="Epochs of the short panama train run.")
@click.option("--workers", type=int, default=2, show_default=True, help="Workers of the panama train run.")
@click.option("--jobs", "-j", type=int, default=None, help="Worker processes of the simulations (default: CPU count).")
@click.option("--quiet", "-q", is_flag=True, help="Only the headline table.")
def demo(out_dir: Path, skip_train: bool, epochs: int, workers: int, jobs: int | None, quiet: bool) -> None:
    """A half-minute tour: ring vs panama on a simulated shared cluster, then real training through switch daemons.

    Measured 32 s wall from scratch on the shared 2-core machine (`panama demo --out
    out/final/demo -j 2`), 15 s when its simulations are resumed from OUT.

    \b
    1. simulates the jobs-dominated shared-cluster preset (seed 1) under ring and panama and
       without any job (the floor), same flows and placement;
    2. trains the reference LeNet data-parallel with `panama train` through a local
       cluster of PANAMA switch daemons (UDP on 127.0.0.1), and once more with stock DDP
       on gloo (same data, seed and steps: the parameters must be bitwise equal);
    3. prints the headline table (gains against ring, higher is better: short-flow p99 and
       mean FCT, training time, bytes; the floor's beside) and where the plots are.
    """
    from panama.experiments.demo import run_demo
    from panama.experiments.sweep import SweepError

    if epochs < 1:
        raise usage_error("--epochs", f"must be >= 1, got {epochs}")
    if workers < 1:
        raise usage_error("--workers", f"must be >= 1, got {workers}")
    if jobs is not None and jobs < 1:
        raise usage_error("--jobs", f"must be >= 1, got {jobs}")
    echo = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    try:
        res = run_demo(
            out_dir,
            train=not skip_train,
            epochs=epochs,
            workers=workers,
            jobs=jobs,
            echo=echo,
            progress=not quiet,
            command=_command_line(),
        )
    except SweepError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(res["table_text"])
