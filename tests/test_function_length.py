"""Functions stay short enough to read (issue 29): none over 120 lines in ``src/panama``, and
one over 80 lines says why in a ``# Long:`` comment within the first three lines of its body."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "panama"
MAX_LINES = 120
EXPLAIN_ABOVE = 80


def _functions():
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(SRC.parent), node, lines


def _explained(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """A ``# Long:`` comment on one of the first three lines of the body: right after the
    signature, or right after the docstring."""
    first = node.body[0]
    sig_end = first.lineno - 1
    while sig_end > node.lineno and lines[sig_end - 1].strip().startswith("#"):
        sig_end -= 1  # comments between the signature and the first statement are the body's
    starts = [sig_end + 1]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        starts.append(first.end_lineno + 1)
    return any(lines[i - 1].strip().startswith("# Long:") for s in starts for i in range(s, min(s + 3, len(lines) + 1)))


def test_no_function_is_over_120_lines():
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, node, _ in _functions()
        if node.end_lineno - node.lineno + 1 > MAX_LINES
    ]
    assert not long, "functions over 120 lines (split them at a real seam):\n" + "\n".join(long)


def test_a_function_over_80_lines_says_why_it_stays_long():
    unexplained = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, node, lines in _functions()
        if node.end_lineno - node.lineno + 1 > EXPLAIN_ABOVE and not _explained(node, lines)
    ]
    assert not unexplained, (
        "functions over 80 lines without a '# Long:' comment in the first 3 lines of the body:\n"
        + "\n".join(unexplained)
    )
