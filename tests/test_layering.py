"""Imports point downward only; the protocol core is pure (parsed with ast, never imported)."""

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "panama"

CORE_FORBIDDEN = {
    "socket",
    "time",
    "datetime",
    "threading",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "selectors",
    "select",
    "random",
    "subprocess",
    "torch",
    "aiohttp",
    "panama.sim",
    "panama.runtime",
    "panama.fabric",
    "panama.cli",
    "panama.experiments",
}
# layer -> packages it must not import
RULES = {
    "core": CORE_FORBIDDEN,
    "sim": {"panama.runtime", "panama.experiments", "panama.cli", "torch"},
    "runtime": {"panama.sim", "panama.experiments"},
    "fabric.py": {"panama.sim", "panama.runtime", "panama.experiments", "panama.cli"},
    "hw": {"panama.sim", "panama.runtime", "panama.experiments", "panama.cli", "panama.fabric"},
}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(files, forbidden):
    found = []
    for path in files:
        # a driver's own command module (cli.py, *_cli.py) may use the shared CLI helpers
        allowed = {"panama.cli"} if path.name == "cli.py" or path.name.endswith("_cli.py") else set()
        for name in imported_modules(path):
            if any(name == ok or name.startswith(ok + ".") for ok in allowed):
                continue
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.name} imports {name}")
    return found


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_point_downward(layer):
    target = SRC / layer
    files = [target] if target.is_file() else sorted(target.rglob("*.py"))
    if layer == "core":
        assert files, "the core package must exist"
    assert violations(files, RULES[layer]) == []


def test_rule_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import socket\nfrom time import monotonic\nfrom panama.sim import engine\nimport numpy\n")
    assert imported_modules(bad) == {"socket", "time", "panama.sim", "numpy"}
    assert len(violations([bad], CORE_FORBIDDEN)) == 3


def test_only_the_cli_imports_hw():
    """panama.hw is optional (amaranth): nothing but the CLI's lazy registry may import it."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if SRC / "hw" in path.parents:
            continue
        for name in imported_modules(path):
            if name == "panama.hw" or name.startswith("panama.hw."):
                found.append(f"{path.relative_to(SRC)} imports {name}")
    assert found == []
