"""``panama bench core``: accelerator throughput against raw numpy.add in the same run."""

from __future__ import annotations

import click

from panama.cli.common import echo_json
from panama.core.codec import DEFAULT_PAYLOAD_ELEMS, MAX_PAYLOAD_ELEMS
from panama.tables import format_table


@click.command("core")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True, help="Contributing workers.")
@click.option(
    "--size-mb", type=click.FloatRange(0.001, 4096), default=64.0, show_default=True, help="Gradient MB per worker."
)
@click.option(
    "--payload-elems",
    type=click.IntRange(1, MAX_PAYLOAD_ELEMS),
    default=DEFAULT_PAYLOAD_ELEMS,
    show_default=True,
    help="float32 elements per packet (default fits a 1500-byte MTU).",
)
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True, help="Runs; the best is reported.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_core(workers: int, size_mb: float, payload_elems: int, repeat: int, seed: int, as_json: bool) -> None:
    """Aggregate WORKERS x SIZE_MB through one accelerator; compare with numpy.add on the same packets."""
    from panama.benchmarks.core import run_core_bench

    if not as_json:
        click.echo(f"building {workers} x {size_mb:g} MB of contributions ...", err=True)
    result = run_core_bench(workers=workers, size_mb=size_mb, payload_elems=payload_elems, repeat=repeat, seed=seed)
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
        f"{payload_elems} floats; result {'exact' if result.exact else 'WRONG'})"
    )
