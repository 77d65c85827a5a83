"""Where the CPU seconds of a simulation go, by component, from a ``perf`` profile.

``perf`` (Debian package ``linux-perf``) samples the whole process, inside compiled code
too; this script sums ``perf report``'s per-symbol shares by simulator component (the
Cython-generated symbols carry their module and function names; CPython's own symbols
are "Python objects and calls"). Issue 34's table in docs/performance.md was made so::

    python bench/perf_components.py record /tmp/slice.toml   # perf record + report + this table
    python bench/perf_components.py table perf-report.txt 6.89  # an existing report, CPU s of the run

``/tmp/slice.toml``: any scenario (``panama simulate``'s format); the table gives each
component's share of the samples and, with the run's CPU seconds, its seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# First match wins; symbols are Cython's __pyx_* names (module and function inside).
RULES = [
    ("engine: event queue and dispatch", r"heap_|EventQueue|engine_|Port_fire|_TimerEntry|Timer_"),
    (
        "ports: enqueue, pipes, arrival loops",
        r"ports_|PacketPipe|deliver|LosslessPort_send|LosslessPort__commit|HostPort|^deque|dequereviter",
    ),
    (
        "switch buffer, PFC, releases",
        r"ReleaseRing|catch_up|note_release|Switch__admit|check_resume|send_pfc|pause|resume|release",
    ),
    ("routing / ECMP", r"routing_|ecmp"),
    ("hooks, delay lines", r"DelayLine|_run_hook|Switch__emit|drain_delayline|pswitch_"),
    ("DCTCP flows", r"dctcp_"),
    ("PANAMA host transport", r"transport_|panama_host_|cc_"),
    ("accelerator", r"accelerator_"),
    ("packets (creation)", r"packet_|SimPacket|new_packet"),
    ("sampling, diagnostics", r"sampler_|qahead_|diagnostics"),
    ("cyclic GC", r"gc_collect|visit_|_traverse|subtract_refs|move_unreachable|update_refs"),
    (
        "Python objects and calls",
        r"^_?Py|Pyx|object_|dict|list_|long_|tuple|method_|unicode|getset|PyMember|type_|frame|code_|slot_|vectorcall",
    ),
]

_LINE = re.compile(r"\s+([0-9.]+)%\s+\[([.k])\]\s+(\S+)")


def components(report: str) -> dict[str, float]:
    """Percent of samples by component, from ``perf report --no-children --sort symbol --stdio``."""
    total: dict[str, float] = {}
    for line in report.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        pct, space, sym = float(m.group(1)), m.group(2), m.group(3)
        name = "kernel" if space == "k" else next((n for n, rx in RULES if re.search(rx, sym)), "other")
        total[name] = total.get(name, 0.0) + pct
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def table(shares: dict[str, float], cpu_s: float | None) -> str:
    rows = ["| component | % of samples | CPU s |", "|---|---|---|"]
    for name, pct in shares.items():
        secs = f"{pct * cpu_s / 100:.2f}" if cpu_s else ""
        rows.append(f"| {name} | {pct:.1f} | {secs} |")
    return "\n".join(rows)


def _record(scenario: str) -> tuple[str, float]:
    run = (
        "import json, sys, time\n"
        "from panama.sim.runner import Simulation\n"
        "from panama.sim.scenario import load_scenario\n"
        "sim = Simulation(load_scenario(sys.argv[1]))\n"
        "t0 = time.process_time(); sim.run(progress=False)\n"
        "print(json.dumps({'run_cpu_s': time.process_time() - t0}))\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "perf.data")
        out = subprocess.run(
            ["perf", "record", "-F", "2000", "-o", data, sys.executable, "-c", run, scenario],
            check=True,
            capture_output=True,
            text=True,
        )
        cpu_s = json.loads(out.stdout.strip().splitlines()[-1])["run_cpu_s"]
        report = subprocess.run(
            ["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return report, cpu_s


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "record":
        report, cpu_s = _record(argv[1])
    elif len(argv) >= 2 and argv[0] == "table":
        report = Path(argv[1]).read_text()
        cpu_s = float(argv[2]) if len(argv) > 2 else None
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(components(report), cpu_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
