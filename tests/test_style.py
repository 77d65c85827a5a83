"""Lint and layout: ruff (configured in pyproject.toml) over the sources, tests, benchmarks and examples."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "bench", "examples", "setup.py"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


MAX_SOURCE_LINES = 700


def test_no_source_file_is_over_700_lines():
    """A file that grows past this has more than one job: split it along its jobs (issue 15)."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "src").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_SOURCE_LINES
    }
    assert long == {}
