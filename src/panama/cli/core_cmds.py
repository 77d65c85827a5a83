"""``panama bench core``: accelerator throughput against raw numpy.add in the same run."""

from __future__ import annotations

import click

from panama.benchmarks.settings import CoreBenchConfig
from panama.cli.common import echo_json
from panama.cli.options import model_from_options, model_options
from panama.tables import format_table


@click.command("core")
@model_options(CoreBenchConfig, exclude=("window",))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_core(as_json: bool, **options) -> None:
    """Aggregate WORKERS x SIZE_MB through one accelerator; compare with numpy.add on the same packets."""
    from panama.benchmarks.core import run_core_bench

    cfg = model_from_options(CoreBenchConfig, options)
    if not as_json:
        click.echo(f"building {cfg.workers} x {cfg.size_mb:g} MB of contributions ...", err=True)
    result = run_core_bench(cfg)
    if as_json:
        echo_json(result.as_dict())
        return
    rows = [
        (
            "accelerator",
            f"{result.accelerator_gbps:.3f}",
            f"{result.accelerator_pps:,.0f}",
            f"{result.accelerator_s:.3f}",
        ),
        ("numpy.add (same packets)", f"{result.numpy_gbps:.3f}", f"{result.numpy_pps:,.0f}", f"{result.numpy_s:.3f}"),
    ]
    click.echo(format_table(rows, ("", "payload GB/s", "packets/s", "seconds")))
    click.echo(
        f"ratio accelerator/numpy.add = {result.ratio:.3f}   ({result.contributions:,} contributions of "
        f"{cfg.payload_elems} floats; result {'exact' if result.exact else 'WRONG'})"
    )
