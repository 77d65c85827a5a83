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
    "sim": {"panama.runtime", "panama.experiments", "panama.cli", "torch", "click"},
    "runtime": {"panama.sim", "panama.experiments", "panama.cli", "click"},
    "fabric.py": {"panama.sim", "panama.runtime", "panama.experiments", "panama.cli", "click"},
    "hw": {"panama.sim", "panama.runtime", "panama.experiments", "panama.cli", "panama.fabric", "click"},
    "experiments": {"panama.cli", "click"},
    "distributed": {"panama.sim", "panama.experiments", "panama.cli", "click"},
    "benchmarks": {"panama.cli", "click"},
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
        for name in imported_modules(path):
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
    """panama.hw is optional (amaranth): nothing but the CLI (its lazily loaded hw commands) may import it."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if SRC / "hw" in path.parents or SRC / "cli" in path.parents:
            continue
        for name in imported_modules(path):
            if name == "panama.hw" or name.startswith("panama.hw."):
                found.append(f"{path.relative_to(SRC)} imports {name}")
    assert found == []


def test_only_the_cli_package_imports_click():
    """``panama.cli`` is the command line: nothing below it parses arguments (no carve-outs)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if SRC / "cli" in path.parents or path == SRC / "__main__.py":  # the entry point runs the CLI
            continue
        for name in imported_modules(path):
            if name == "click" or name.startswith("click.") or name == "panama.cli" or name.startswith("panama.cli."):
                found.append(f"{path.relative_to(SRC)} imports {name}")
    assert found == []


def test_benchmark_scripts_only_use_the_library_and_its_cli():
    """bench/ scripts are thin: they import panama (any layer) but no test helpers."""
    bench = SRC.parents[1] / "bench"
    for path in sorted(bench.glob("*.py")):
        for name in imported_modules(path):
            assert not name.startswith("tests"), f"{path.name} imports {name}"
