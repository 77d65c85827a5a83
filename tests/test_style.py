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


MAX_FUNCTION_LINES = 120
EXPLAIN_OVER_LINES = 80
# Where the rule is enforced so far (issue 29); other packages join once their long functions are split.
SHORT_FUNCTIONS_IN = ["src/panama/runtime", "src/panama/environment.py", "src/panama/settings.py"]


def long_functions(paths) -> list[str]:
    """Functions over MAX_FUNCTION_LINES, and those over EXPLAIN_OVER_LINES whose body does not
    start with a ``# Long: <why>`` comment (in its first lines, after the docstring)."""
    import ast

    found = []
    for path in paths:
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = node.end_lineno - node.lineno + 1
            head = "\n".join(lines[node.lineno - 1 : node.body[0].end_lineno + 3])
            if n > MAX_FUNCTION_LINES or (n > EXPLAIN_OVER_LINES and "# Long: " not in head):
                found.append(f"{path.name}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_functions_are_short_or_say_why():
    paths = []
    for rel in SHORT_FUNCTIONS_IN:
        p = ROOT / rel
        paths += [p] if p.is_file() else sorted(p.rglob("*.py"))
    assert long_functions(paths) == []


def test_the_function_length_rule_catches_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    (tmp_path / "a.py").write_text(f"def f():\n{body}\n\n\ndef g():\n    # Long: a reason\n{body}\n")
    assert long_functions([tmp_path / "a.py"]) == ["a.py:1 f (91 lines)"]
