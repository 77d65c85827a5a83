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
@click.option("--clock-mhz", type=float, default=250.0, show_default=True, help="Assumed clock for line_rate_gbps.")
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
@click.option(
    "--simulate",
    is_flag=True,
    help="Measure cycles per packet in simulation now (about a minute) instead of reading the stored "
    "measurement of this design (panama/data/hw/cycles.json).",
)
@click.option(
    "--save-cycles",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Add a simulated measurement to this JSON file (the format of panama/data/hw/cycles.json).",
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
    simulate: bool,
    save_cycles: Path | None,
    as_json: bool,
) -> None:
    """Lanes, cycles per packet under back-to-back input (measured in simulation), the line rate at
    an assumed clock, the measured Fmax of the placed-and-routed ECP5 configuration with the line
    rate at that clock (`panama hw pnr`), and LUT/FF/DSP/BRAM from Yosys synth_xilinx."""
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
        simulate=simulate or save_cycles is not None,
        save_cycles=save_cycles,
    )
    if as_json:
        echo_json(out)
        return
    click.echo(
        f"lanes {out['lanes']} ({out['width_bits']}-bit beats): cycles/packet {out['cycles_per_packet']:.2f} "
        f"for {out['datagram_bytes']}-byte datagrams ({out['beats_per_packet']} beats, {out['cycles_source']})"
    )
    click.echo(
        f"assumed clock {out['clock_mhz']} MHz: {out['line_rate_gbps']} Gb/s of datagrams, "
        f"{out['ethernet_gbps']} Gb/s of Ethernet line"
    )
    t = out["timing"]
    if "status" in t:
        click.echo(f"measured clock ({t['family']} {t['part']}): {t['status']}")
    else:
        click.echo(
            f"measured clock: Fmax {t['fmax_mhz']} MHz on {t['part']} ({t['lanes']} lanes, {t['config']}): "
            f"{t['line_rate_gbps_at_fmax']} Gb/s of datagrams ({t['cycles_per_packet']:.2f} cycles/packet)"
        )
    if "resources" in out:
        r = out["resources"]
        if "status" in r:
            click.echo(f"{r['family']}: {r['status']}")
        else:
            click.echo(
                f"{r['family']} estimate: LUT {r['LUT']:,}  FF {r['FF']:,}  DSP {r['DSP']}  BRAM36 {r['BRAM36']}  "
                f"LUTRAM {r['LUTRAM']} ({r['source']}: {r.get('yosys', 'yosys')}, {r.get('measured', '')}; "
                "synthesis only, not placed and routed)"
            )


@hw.command(name="pnr")
@click.option("--width", type=int, default=None, help="Stream width in bits (default: the stored ECP5 configuration).")
@click.option("--slots", type=int, default=None, help="Packet memory in slots.")
@click.option("--payload-elems", type=int, default=None, help="Floats per slot.")
@click.option("--trees", type=int, default=None, help="Tree-table entries (max_trees).")
@click.option("--children", type=int, default=None, help="Children per tree (max_children, a power of 2).")
@click.option("--ports", type=int, default=None, help="Neighbours (ingress/egress ports).")
@click.option("--run", "rerun", is_flag=True, help="Synthesise and place and route now (tens of minutes).")
@click.option("--freq", type=float, default=100.0, show_default=True, help="With --run: nextpnr target clock (MHz).")
@click.option("--timeout-s", type=float, default=3600.0, show_default=True, help="With --run: limit per tool.")
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --run: add the result to this JSON file (the format of panama/data/hw/pnr.json).",
)
@click.option(
    "--log-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="With --run: keep the logs."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def pnr(
    width: int | None,
    slots: int | None,
    payload_elems: int | None,
    trees: int | None,
    children: int | None,
    ports: int | None,
    rerun: bool,
    freq: float,
    timeout_s: float,
    save: Path | None,
    log_dir: Path | None,
    as_json: bool,
) -> None:
    """Place and route the datapath on the largest ECP5 (LFE5UM-85F, Yosys synth_ecp5 + nextpnr-ecp5):
    achieved Fmax per clock domain, utilisation, critical path. Without --run, the stored result of
    this very design (panama/data/hw/pnr.json); exit code 1 when there is none or it failed."""
    from dataclasses import replace

    from panama.hw.pnr import PNR_CONFIG, place_and_route, stored_pnr

    if freq <= 0:
        raise usage_error("--freq", f"must be > 0, got {freq}")
    if timeout_s <= 0:
        raise usage_error("--timeout-s", f"must be > 0, got {timeout_s}")
    if (save or log_dir) and not rerun:
        raise usage_error("--run", "--save and --log-dir need --run")
    given = (
        ("width", width),
        ("slots", slots),
        ("payload_elems", payload_elems),
        ("max_trees", trees),
        ("max_children", children),
        ("ports", ports),
    )
    try:
        cfg = replace(PNR_CONFIG, **{k: v for k, v in given if v is not None})
    except ValueError as exc:
        raise usage_error("config", str(exc)) from None
    if rerun:
        res = place_and_route(cfg, freq_mhz=freq, timeout_s=timeout_s, logdir=log_dir, save=save)
    else:
        res = stored_pnr(cfg) or {"config": repr(cfg), "status": "no stored place and route of this design: use --run"}
    if as_json:
        echo_json(res)
    else:
        click.echo(f"{res['config']} on {res.get('device', 'LFE5UM-85F')}-{res.get('speed', 8)}:")
        for clk, f in res.get("fmax", {}).items():
            click.echo(f"  Fmax {clk}: {f['achieved_mhz']} MHz (target {f['target_mhz']} MHz)")
        for bel, (used, avail) in res.get("utilisation", {}).items():
            click.echo(f"  {bel}: {used:,} of {avail:,} ({100 * used / avail:.1f} %)")
        if "critical_path" in res:
            cp = res["critical_path"]
            click.echo(
                f"  critical path {cp['delay_ns']} ns ({cp['logic_ns']} logic, {cp['routing_ns']} routing, "
                f"{cp['logic_levels']} logic levels): {cp['from']} -> {cp['to']}"
            )
        if "status" in res:
            click.echo(f"  {res['status']}")
    if "status" in res:
        raise SystemExit(1)


@hw.command(name="verilog")
@click.option(
    "--out", "out_file", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Verilog file to write."
)
def verilog(out_file: Path) -> None:
    """Write the datapath (default configuration) as Verilog, top module panama_aggregator."""
    from panama.hw.report import verilog_text

    out_file.write_text(verilog_text())
    click.echo(f"wrote {out_file}")
