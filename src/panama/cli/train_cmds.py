"""``panama train``: data-parallel LeNet training with PANAMA, gloo or in-process allreduce."""

from __future__ import annotations

from pathlib import Path

import click

from panama.cli.common import usage_error
from panama.cli.options import model_from_options, model_options
from panama.training.config import TrainConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@model_options(
    TrainConfig,
    aliases={"workers": ["-w"], "epochs": ["-e"], "batch_size": ["-b"], "timeout_s": ["--timeout"]},
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON result file. Default: runs/train/<dataset>-<allreduce>-w<W>-seed<seed>.json.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def train(out: Path | None, quiet: bool, **options) -> None:
    """Train the reference LeNet data-parallel on W workers and check the replicas agree.

    Each global minibatch is split across the workers; each computes forward/backward on
    its shard; gradients are summed with --allreduce; every replica applies the same SGD
    step. Prints one row per epoch (test accuracy, seconds, bytes sent per worker), writes
    a JSON result, and exits with code 1 if the replicas' parameters are not bitwise equal.
    """
    from panama.training.data import IdxFormatError, load_dataset
    from panama.training.run import TrainingError, default_out_path, format_bytes
    from panama.training.run import train as run_training

    cfg = model_from_options(TrainConfig, options)
    try:
        dataset = load_dataset(cfg.data_dir)
    except IdxFormatError as exc:
        raise usage_error("--data-dir", str(exc)) from None
    if dataset.num_train < cfg.workers:
        raise usage_error("--workers", f"{cfg.workers} workers but only {dataset.num_train} training examples")

    where = cfg.controller or ("local cluster" if cfg.allreduce == "panama" else None)
    click.echo(
        f"panama train: {dataset.name} ({dataset.num_train} train / {dataset.num_test} test), "
        f"{cfg.workers} workers, allreduce={cfg.allreduce}{f' via {where}' if where else ''}, "
        f"batch {cfg.batch_size}, lr {cfg.lr:g}, seed {cfg.seed}"
    )
    header = (
        f"{'epoch':>5}  {'steps':>5}  {'train loss':>10}  {'test acc':>8}  {'s/epoch':>8}  "
        f"{'sent/worker':>12}  {'TCP/worker':>12}"
    )
    click.echo(header)
    click.echo("-" * len(header))

    def on_epoch(e) -> None:
        click.echo(
            f"{e.epoch:>5}  {e.steps:>5}  {e.train_loss:>10.4f}  {e.test_accuracy:>8.4f}  "
            f"{e.seconds:>8.2f}  {format_bytes(e.bytes_sent_per_worker):>12}  "
            f"{'-' if e.tcp_bytes_sent_per_worker is None else format_bytes(e.tcp_bytes_sent_per_worker):>12}"
        )

    def on_status(line: str) -> None:
        if not quiet:
            click.echo(f"  ... {line}", err=True)

    try:
        result = run_training(cfg, dataset=dataset, on_epoch=on_epoch, on_status=on_status)
    except TrainingError as exc:
        summary, _, detail = str(exc).partition("\n")
        if detail:
            click.echo(detail, err=True)
        raise click.ClickException(f"training failed: {summary}") from None

    path = result.write_json(out if out is not None else default_out_path(cfg))
    click.echo(f"sent/worker: {result.bytes_sent_source}")
    if cfg.allreduce != "local":
        click.echo("TCP/worker: measured host-based (gloo) TCP bytes of each worker, controller API excluded")
    digests = result.parameter_sha256
    if result.replicas_identical:
        click.echo(
            f"replicas identical: yes, all {len(digests)} replicas hold bitwise-equal parameters "
            f"(sha256 {digests[0][:16]}...)"
        )
    else:
        shown = ", ".join(f"rank {r}: {d[:16]}" for r, d in enumerate(digests))
        click.echo(f"replicas identical: NO ({shown})")
    click.echo(
        f"final test accuracy {result.final_test_accuracy:.4f}, total {result.total_seconds:.1f} s; wrote {path}"
    )
    if not result.replicas_identical:
        raise click.ClickException("replicas diverged: parameters differ between workers")
