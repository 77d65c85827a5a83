"""Every environment variable is named in one module (panama.environment), read by one typed reader."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from panama import _ext, environment
from panama.environment import EnvError

SRC = Path(__file__).resolve().parents[1] / "src" / "panama"
VARIABLE = re.compile(r"^PANAMA_[A-Z0-9_]+$")
# The one module that names the variables, and the build helper setup.py runs alone.
ALLOWED = {"environment.py", "_ext.py"}


def _module_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (``__all__`` lists them: Python constants such as
    ``PANAMA_OVERHEAD_BYTES`` are not environment variables)."""
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def variable_names(root: Path, allowed: set[str] = ALLOWED) -> list[str]:
    """``path:line: NAME`` for each string constant that is a whole ``PANAMA_*`` name outside
    ``allowed`` (paths relative to ``root``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in allowed:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        defined = _module_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.match(node.value):
                if node.value not in defined:
                    found.append(f"{rel}:{node.lineno}: {node.value}")
    return found


def test_no_module_but_panama_environment_names_a_variable():
    assert variable_names(SRC) == []


def test_the_scan_finds_a_planted_variable(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reader.py").write_text(
        "import os\n\nPANAMA_LIMIT = 3  # a Python constant: fine\n__all__ = ['PANAMA_LIMIT']\n\n\n"
        "def f():\n    return os.environ.get('PANAMA_SECRET_KNOB')\n"
    )
    (tmp_path / "environment.py").write_text("X = 'PANAMA_ALLOWED_HERE'\n")
    assert variable_names(tmp_path) == ["pkg/reader.py:8: PANAMA_SECRET_KNOB"]


def test_every_variable_has_a_reader_with_a_docstring():
    names = {v: k for k, v in vars(environment).items() if k.isupper() and isinstance(v, str) and k != "NO_EXTENSIONS"}
    assert environment.NO_EXTENSIONS == _ext.ENV_VAR == "PANAMA_NO_EXTENSIONS"
    for constant in names.values():
        reader = getattr(environment, constant.lower())
        assert callable(reader) and reader.__doc__, constant
    for name in ("no_extensions",):
        assert getattr(environment, name).__doc__
    assert set(environment.__all__) >= set(names.values()) | {c.lower() for c in names.values()}
    assert not [name for name in names if name.startswith("PANAMA_") and name not in environment.__doc__]


def test_readers_parse_check_and_default(monkeypatch):
    for name in ("PANAMA_TIMEOUT_S", "PANAMA_SIZE_BYTES", "PANAMA_UDP_OFFLOAD", "PANAMA_CLUSTER_STATE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    assert environment.timeout_s(7.0) == 7.0 and environment.size_bytes() is None and environment.rank() is None
    assert environment.udp_offload() and environment.cluster_state() is None
    monkeypatch.setenv(environment.TIMEOUT_S, " 2.5 ")
    monkeypatch.setenv(environment.SIZE_BYTES, "4096")
    monkeypatch.setenv(environment.UDP_OFFLOAD, "Off")
    monkeypatch.setenv(environment.CLUSTER_STATE, "/tmp/x.json")
    monkeypatch.setenv(environment.RANK, "3")
    assert environment.timeout_s(7.0) == 2.5 and environment.size_bytes() == 4096 and environment.rank() == 3
    assert not environment.udp_offload() and environment.cluster_state() == Path("/tmp/x.json")
    for name, value, reader, detail in (
        (environment.TIMEOUT_S, "0", lambda: environment.timeout_s(1.0), "must be > 0"),
        (environment.TIMEOUT_S, "soon", lambda: environment.timeout_s(1.0), "number of seconds"),
        (environment.SIZE_BYTES, "-1", environment.size_bytes, ">= 0"),
        (environment.RANK, "x", environment.rank, "must be an integer"),
    ):
        monkeypatch.setenv(name, value)
        with pytest.raises(EnvError) as info:
            reader()
        assert info.value.field == name and detail in info.value.detail and str(info.value).startswith(name)
