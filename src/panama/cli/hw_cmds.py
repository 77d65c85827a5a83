"""Click commands of the hardware datapath: ``panama hw verify | report | verilog``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from panama.cli.common import echo_json, usage_error

__all__ = ["hw"]


def _config(width: int, slots: int, payload_elems: int, lanes_note: bool = False):
    from panama.hw.layout import HwConfig

    try:
        return HwConfig(width=width, slots=slots, payload_elems=payload_elems)
    except ValueError as exc:
        raise usage_error("config", str(exc)) from None


@click.group(name="hw")
def hw() -> None:
    """The aggregation accelerator in hardware (Amaranth RTL): verify, report, export Verilog."""


@hw.command(name="verify")
@click.option("--packets", type=int, default=2000, show_default=True, help="Datagrams in the random stream.")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="Seed of the stream (>= 0).")
@click.option(
    "--width", type=int, default=None, help="Stream width in bits (default: the small CI configuration, 256)."
)
@click.option("--slots", type=int, default=None, help="Packet memory in slots (default 16).")
@click.option("--payload-elems", type=int, default=None, help="Floats per slot (default 8).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify(
    packets: int, seed: int, width: int | None, slots: int | None, payload_elems: int | None, as_json: bool
) -> None:
    """Drive one random multi-job, multi-tree stream (duplicates, retransmissions, lost results,
    parent results, acks, job arrivals and departures, malformed datagrams) through the RTL in
    simulation and through the core accelerator; compare every verdict and every emitted datagram
    byte for byte. Exit code 1 if anything differs."""
    if packets < 1:
        raise usage_error("--packets", f"must be >= 1, got {packets}")
    from dataclasses import replace

    from panama.hw.verify import CI_CONFIG, run_verify

    try:
        cfg = replace(
            CI_CONFIG,
            **{
                k: v for k, v in (("width", width), ("slots", slots), ("payload_elems", payload_elems)) if v is not None
            },
        )
    except ValueError as exc:
        raise usage_error("config", str(exc)) from None
    result = run_verify(packets, seed, cfg)
    if as_json:
        echo_json(result)
    else:
        click.echo(
            f"packets {result['packets']}  emitted {result['emitted']}  mismatches {result['mismatches']}  "
            f"cycles {result['cycles']}  verdicts {json.dumps(result['verdicts'])}"
        )
        for ex in result["examples"]:
            click.echo(f"  mismatch at packet {ex['packet']}: core {ex['core']} rtl {ex['rtl']}")
    if result["mismatches"]:
        raise SystemExit(1)


@hw.command(name="report")
@click.option("--clock-mhz", type=float, default=250.0, show_default=True, help="Assumed clock (timing not checked).")
@click.option("--packets", type=int, default=32, show_default=True, help="Back-to-back packets simulated.")
@click.option("--family", default="xcup", show_default=True, help="Yosys synth_xilinx -family (xcup, xcu, xc7).")
@click.option("--no-synth", is_flag=True, help="Leave out the resources.")
@click.option(
    "--synth",
    "rerun",
    is_flag=True,
    help="Run Yosys now (about 25 min for the default configuration) instead of reading the measured "
    "result of this design shipped in panama/data/hw/synthesis.json.",
)
@click.option(
    "--save-synthesis",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --synth: add the result to this JSON file (the format of panama/data/hw/synthesis.json).",
)
@click.option(
    "--yosys-log",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --synth: keep the Yosys log here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def report(
    clock_mhz: float,
    packets: int,
    family: str,
    no_synth: bool,
    rerun: bool,
    save_synthesis: Path | None,
    yosys_log: Path | None,
    as_json: bool,
) -> None:
    """Lanes, assumed clock, cycles per packet measured in simulation under back-to-back input, the
    resulting line rate, and LUT/FF/DSP/BRAM from Yosys synth_xilinx, for the default configuration."""
    if clock_mhz <= 0:
        raise usage_error("--clock-mhz", f"must be > 0, got {clock_mhz}")
    if packets < 4:
        raise usage_error("--packets", f"must be >= 4, got {packets}")
    from panama.hw.report import report as run_report

    if (save_synthesis or yosys_log) and not rerun:
        raise usage_error("--synth", "--save-synthesis and --yosys-log need --synth")
    out = run_report(
        clock_mhz=clock_mhz,
        packets=packets,
        synth=not no_synth,
        family=family,
        yosys_log=yosys_log,
        rerun=rerun,
        save=save_synthesis,
    )
    if as_json:
        echo_json(out)
        return
    click.echo(
        f"lanes {out['lanes']} ({out['width_bits']}-bit beats), clock {out['clock_mhz']} MHz assumed "
        f"(timing closure not checked)"
    )
    click.echo(
        f"cycles/packet {out['cycles_per_packet']:.2f} for {out['datagram_bytes']}-byte datagrams "
        f"({out['beats_per_packet']} beats): {out['line_rate_gbps']} Gb/s of datagrams, "
        f"{out['ethernet_gbps']} Gb/s of Ethernet line"
    )
    if "resources" in out:
        r = out["resources"]
        if "status" in r:
            click.echo(f"{r['family']}: {r['status']}")
        else:
            click.echo(
                f"{r['family']}: LUT {r['LUT']:,}  FF {r['FF']:,}  DSP {r['DSP']}  BRAM36 {r['BRAM36']}  "
                f"LUTRAM {r['LUTRAM']} ({r['source']}: {r.get('yosys', 'yosys')}, {r.get('measured', '')}; "
                "timing closure not checked)"
            )


@hw.command(name="verilog")
@click.option(
    "--out", "out_file", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Verilog file to write."
)
def verilog(out_file: Path) -> None:
    """Write the datapath (default configuration) as Verilog, top module panama_aggregator."""
    from panama.hw.report import verilog_text

    out_file.write_text(verilog_text())
    click.echo(f"wrote {out_file}")
