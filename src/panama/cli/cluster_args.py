"""The shared-cluster command's options and their resolution into run_shared_cluster's keyword
arguments, shared by ``panama experiment shared-cluster`` (experiment_cmds) and ``panama
experiment reproduce`` (page_cmds, which resolves each output's recorded options exactly as the
command would: :func:`resolve_args`)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from panama.cli.common import usage_error
from panama.experiments.schemes import DEFAULT_PRESET, PRESET_NAMES, SCHEME_ORDER

__all__ = ["SCHEMES_ALL", "parse_seeds", "resolve_args"]

#: Every scheme of the shared-cluster experiment, the baseline first (its default --schemes).
SCHEMES_ALL = ",".join(SCHEME_ORDER)


def _command_line() -> str:
    """The command as typed (``panama ...``), for the provenance recorded in outputs."""
    argv = sys.argv[1:] if Path(sys.argv[0]).name == "panama" else None
    return "panama " + shlex.join(argv) if argv else ""


def _shared_cluster_options(f):
    # Long: one declarative table of the command's options, in --help order; split, it would
    # scatter the command's interface over several places.
    options = [
        click.option(
            "--quick",
            is_flag=True,
            help="Small preset (leaf-spine 4x2x4, 20 ms of traffic): 2 s on the idle 2-core machine (measured, "
            "compiled, 5 runs with the floor).",
        ),
        click.option(
            "--preset",
            type=click.Choice(PRESET_NAMES),
            default=None,
            help="Built-in scenario preset. Default paper: fat-tree k=8, 128 hosts, every worker on its own host, "
            "150 ms of traffic at load 0.3, seeds 1-5 (over 2,000 short flows each): 318 s on the 2-core machine "
            "(measured, compiled, 25 runs with the floor). jobs-dominated: the paper cluster with only short "
            "(<= 100 KB) background flows at load 0.1, where the jobs carry most bytes. full: fat-tree k=4, 40 ms, "
            "3 s per seed. tiny: smoke tests only.",
        ),
        click.option(
            "--scenario",
            "scenario_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Base scenario TOML (panama simulate format) instead of a preset.",
        ),
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="KEY=VALUE",
            help="Override a base-scenario key (dotted, e.g. --set network.pfc=false); repeatable.",
        ),
        click.option(
            "--schemes",
            default=SCHEMES_ALL,
            show_default=True,
            help="Comma-separated schemes; ring is the baseline of every ratio.",
        ),
        click.option("--load", type=float, default=None, help="Background load (fraction of host link rate)."),
        click.option("--trees", type=int, default=None, help="Aggregation trees per job (panama, ina-fixed)."),
        click.option("--seed", type=int, default=None, help="Seed (workload, placement, ECMP)."),
        click.option(
            "--seeds", default=None, metavar="LIST", help="Several seeds, e.g. 1,2,3 (same as --sweep seed=1,2,3)."
        ),
        click.option(
            "--sweep",
            "sweeps",
            multiple=True,
            metavar="KEY=V1,V2",
            help="Sweep axes, e.g. --sweep 'load=0.3,0.5,0.7 trees=1,2,4 seed=1,2,3'. Keys: load, trees, "
            "seed, workload, topology, threshold, duration or any dotted scenario key.",
        ),
        click.option(
            "--jobs",
            "-j",
            type=int,
            default=None,
            help="Worker processes (default: CPU count); 1 runs in this process.",
        ),
        click.option(
            "--scheduler",
            default=None,
            metavar="tcp://HOST:PORT",
            help="Run the points on an existing Dask cluster instead of local processes.",
        ),
        click.option(
            "--keep-runs", is_flag=True, help="Keep each run's simulator outputs (flows.csv, jobs.csv) in runs/."
        ),
        click.option(
            "--fresh", is_flag=True, help="Discard finished runs in the output directory instead of resuming."
        ),
        click.option("--no-plots", "--no-plot", "no_plot", is_flag=True, help="Skip the PNG plots."),
        click.option("--quiet", "-q", is_flag=True, help="No progress bar and no table."),
        click.option(
            "--floor/--no-floor",
            default=True,
            show_default=True,
            help="Also run each point without its jobs ('floor (no jobs)': the same flows, the fabric's floor).",
        ),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def parse_seeds(seeds: str) -> list[int]:
    """``--seeds``: comma-separated non-negative integers; a UsageError naming ``--seeds`` otherwise."""
    try:
        vals = [int(v) for v in seeds.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or any(v < 0 for v in vals):
        raise usage_error("--seeds", f"expected comma-separated non-negative integers, got {seeds!r}")
    return vals


def _resolve_shared_cluster(
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
) -> dict[str, Any]:
    """Validate options into keyword arguments of run_shared_cluster (UsageErrors name the option)."""
    from panama.experiments.shared_cluster import experiment_scenario
    from panama.experiments.sweep import parse_sweep
    from panama.sim.scenario import SCHEMES, ScenarioError, load_scenario

    if quick and preset not in (None, "quick"):
        raise usage_error("--quick", f"conflicts with --preset {preset}")
    if scenario_path is not None and (quick or preset is not None):
        raise usage_error("--scenario", "give either a scenario file or a preset, not both")
    from panama.experiments.cluster_scenario import seed_axis

    preset = "quick" if quick else (preset or DEFAULT_PRESET)
    scheme_list = [s.strip() for s in schemes.split(",") if s.strip()]
    known = SCHEMES
    bad = [s for s in scheme_list if s not in known]
    if bad or not scheme_list:
        raise usage_error(
            "--schemes", f"unknown scheme {bad[0] if bad else schemes!r} (choose from {', '.join(known)})"
        )
    if "ring" not in scheme_list:
        raise usage_error("--schemes", "must include ring (the baseline of every ratio)")
    if jobs is not None and jobs < 1:
        raise usage_error("--jobs", f"must be >= 1, got {jobs}")
    try:
        axes = parse_sweep(sweeps)
    except ValueError as exc:
        raise usage_error("--sweep", str(exc)) from None
    for name, value in (("load", load), ("trees", trees), ("seed", seed)):
        if value is not None:
            if name in axes:
                raise usage_error(f"--{name}", f"also given in --sweep {name}=...")
            axes[name] = [value]
    if seeds is not None:
        if "seed" in axes:
            raise usage_error("--seeds", "seed also given by --seed or --sweep")
        axes["seed"] = parse_seeds(seeds)
    if "scheme" in axes:
        raise usage_error("--sweep", "'scheme' is not a sweep axis: use --schemes")
    try:
        if scenario_path is not None:
            base = load_scenario(scenario_path, sets)
        else:
            base = experiment_scenario(preset)
            if sets:
                base = base.with_overrides(sets)
    except ScenarioError as exc:
        key = "--scenario" if exc.key in ("SCENARIO", str(scenario_path)) else exc.key
        raise usage_error(key, exc.detail) from None
    if "seed" not in axes:
        axes["seed"] = seed_axis(preset, base.seed, from_preset=scenario_path is None)
    # Single values (--load, --trees, --seed) stay sweep parameters rather than base-scenario
    # edits, so that they appear in every output row; every combination is validated now.
    from panama.experiments.shared_cluster import apply_params
    from panama.experiments.sweep import grid

    for params in grid(axes):
        try:
            apply_params(base.model_dump(mode="json"), params)
        except ScenarioError as exc:
            raise usage_error(f"--sweep {exc.key}", exc.detail) from None
    return {"base": base, "preset": preset if scenario_path is None else "file", "schemes": scheme_list, "axes": axes}


@click.command(name="shared-cluster", add_help_option=False)
@_shared_cluster_options
@click.argument("more_axes", nargs=-1)
def _options_only(**_params: Any) -> None:
    """The shared-cluster command's options without its output directory (for resolve_args)."""


def resolve_args(args: Sequence[str], jobs: int | None) -> dict[str, Any]:
    """``panama experiment shared-cluster ARGS`` (no --out) resolved as that command resolves it:
    keyword arguments of run_shared_cluster; a bad value exits 2 naming the option."""
    p = _options_only.make_context("shared-cluster", list(args)).params
    return _resolve_shared_cluster(
        p["quick"], p["preset"], p["scenario_path"], p["sets"], p["schemes"], p["load"], p["trees"],
        p["seed"], p["seeds"], p["sweeps"] + p["more_axes"], jobs,
    )  # fmt: skip
