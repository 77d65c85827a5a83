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


def _module_level_imports(tree: ast.Module):
    """Imports that run when the module is imported (not those inside functions or under TYPE_CHECKING)."""

    def walk(node):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                for child in node.body + node.orelse:
                    yield from walk(child)
        elif isinstance(node, ast.Try):
            for child in node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]:
                yield from walk(child)

    for node in tree.body:
        yield from walk(node)


def import_graph(root: pathlib.Path = SRC):
    """Module -> modules it imports at import time, within the package (networkx DiGraph)."""
    import networkx as nx

    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for node in _module_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                targets = []
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_import_cycles_between_modules():
    import networkx as nx

    graph = import_graph()
    assert graph.number_of_edges() > 100  # the graph was really built
    assert list(nx.simple_cycles(graph)) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    import networkx as nx

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("import pkg.a\nx = 1\n")
    assert list(nx.simple_cycles(import_graph(pkg))) != []
