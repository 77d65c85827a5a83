"""Click commands of the simulator: ``panama simulate`` and ``panama bench sim``."""

from __future__ import annotations

from pathlib import Path

import click

from panama.benchmarks.settings import SimBenchConfig
from panama.cli.common import OutDir, usage_error
from panama.cli.options import model_from_options, model_options
from panama.sim.scenario import SCHEMES, ScenarioError, load_scenario

__all__ = ["simulate", "bench_sim"]


@click.command(name="simulate")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=OutDir(),
    help="Output directory (created): summary.json, flows.csv, jobs.csv, resolved.toml/.json, PNG plots.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario value by dotted key, e.g. --set network.pfc=false --set seed=3 "
    "--set jobs.0.iterations=10 (repeatable; values parsed as TOML).",
)
@click.option(
    "--scheme",
    type=click.Choice(SCHEMES),
    default=None,
    help="Run every job with this allreduce scheme (same as --set scheme=..., clearing per-job schemes).",
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line and no terminal table.")
def simulate(
    scenario: Path | None, out_dir: Path, sets: tuple[str, ...], scheme: str | None, no_plots: bool, quiet: bool
) -> None:
    """Run a packet-level simulation of SCENARIO (a TOML file; omitted: the built-in default).

    Background flows, training jobs (panama, ina-single, ina-fixed or ring allreduce),
    PSwitch accelerators, PFC and ECN are simulated in integer picoseconds; the run is
    reproducible from the scenario's seed. Keys and defaults: docs/simulator.md.
    """
    from panama.sim.runner import run_scenario

    try:
        sc = load_scenario(scenario, sets)
        if scheme is not None:
            sc = sc.with_scheme(scheme)
        result = run_scenario(sc, out_dir, progress=not quiet, plots=not no_plots)
    except ScenarioError as exc:
        raise usage_error(exc.key, exc.detail) from None
    if not quiet:
        from panama.sim.outputs import terminal_table

        click.echo(terminal_table(result))
        click.echo(f"\nwrote {len(result.files)} files to {out_dir}")


@click.command("sim")
@model_options(SimBenchConfig)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_sim(as_json: bool, **options) -> None:
    """Simulator speed: packet hops per CPU second, compiled against pure Python.

    reference: 4 long-lived DCTCP flows through one 10 Gbps bottleneck (10 µs links, ECN
    K=65 packets), with a bare heapq store-and-forward loop moving the same number of
    hops in the same process; prints both rates, their ratio, and the scenario's
    goodput, Jain fairness, bottleneck queue mean/p99 and drops. panama: four 16-worker
    in-network jobs and background flows on a k=8 fat-tree. paper-100g: the first 10 ms of
    the shared-cluster 'paper' preset at 100 Gb/s (128 hosts, eight jobs, web-search
    background at load 0.3), scheme panama: the first allreduce starts at about 6.5 ms
    (pure Python takes one to two minutes per repetition, three repetitions: 6.5 min in
    all on the 2-core development machine, 2026-11-29). panama and
    paper-100g also report engine events per packet hop. When the compiled fast path
    is installed, the pure-Python path runs the same scenario in a child process
    (PANAMA_NO_EXTENSIONS=1), in turn slice by slice; its rate, the speed-up and whether
    the results are identical are reported. Each side is timed in CPU seconds and repeated
    (medians, with their spread), so that two runs agree within 10 % on a shared machine.
    """
    import json

    from panama.benchmarks.sim import bench_sim_report, format_bench_sim

    res = bench_sim_report(model_from_options(SimBenchConfig, options))
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        click.echo(format_bench_sim(res))
