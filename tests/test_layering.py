"""Imports point downward only; the protocol core is pure (parsed with ast, never imported)."""

import ast
import pathlib
import re

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
    "runtime": {"panama.sim", "panama.experiments", "panama.cli", "panama.training", "panama.distributed", "click"},
    "training": {"panama.sim", "panama.experiments", "panama.cli", "click"},
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


def module_level_imports(path: pathlib.Path) -> set[str]:
    """Modules imported when ``path`` is imported: its top-level statements, including those
    inside module-level ``if``/``try``/``with`` blocks, not those inside functions or classes
    (which run only when called) nor under ``if TYPE_CHECKING:``."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return names


def test_the_runtime_imports_no_torch_at_module_level():
    """Issue 38: the runtime runs without torch; the DDP hook and the CUDA staging live in
    panama.distributed. A function may import torch lazily (a tensor passed in)."""
    found = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in sorted((SRC / "runtime").rglob("*.py"))
        for name in module_level_imports(path)
        if name == "torch" or name.startswith("torch.") or name.startswith("panama.distributed")
    ]
    assert found == []
    assert not (SRC / "runtime" / "worker" / "ddp_hook.py").exists()
    assert (SRC / "distributed" / "ddp_hook.py").exists()


def test_the_module_level_check_sees_blocks_but_not_functions(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ntry:\n    import torch.cuda\n"
        "except ImportError:\n    pass\ndef f():\n    import torch.nn\n"
    )
    assert module_level_imports(mod) == {"typing", "torch.cuda"}


def test_rule_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import socket\nfrom time import monotonic\nfrom panama.sim import engine\nimport numpy\n")
    assert imported_modules(bad) == {"socket", "time", "panama.sim", "numpy"}
    assert len(violations([bad], CORE_FORBIDDEN)) == 3


# Marks of code that runs only compiled (or only interpreted): a flag set from the module's
# file name, or Cython's own switch.
COMPILED_ONLY = re.compile(r"""_COMPILED|cython\.compiled|__file__\.endswith\(\s*['"]\.py['"]\)""")


def compiled_only_branches(root: pathlib.Path) -> list[str]:
    """``file: mark`` for every source (``.py``, ``.pxd``, ``.pyx``) under ``root`` that holds
    a mark of a compiled-only branch."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".pxd", ".pyx"):
            found += [f"{path.name}: {m.group()}" for m in COMPILED_ONLY.finditer(path.read_text())]
    return found


def test_the_core_runs_one_code_path_compiled_or_not():
    """The core is the same code compiled and interpreted (issue 29): C types come from the
    ``.pxd`` beside a module, never from a branch on which path runs; an implementation
    chosen at import (a component, ``panama._ext.COMPONENTS``) lives outside the core."""
    assert compiled_only_branches(SRC / "core") == []


def test_the_compiled_only_check_finds_each_mark(tmp_path):
    (tmp_path / "a.py").write_text('_COMPILED = not __file__.endswith(".py")\n')
    (tmp_path / "b.pxd").write_text("cdef bint _COMPILED\n")
    (tmp_path / "c.py").write_text("import cython\nif cython.compiled:\n    pass\nx = __file__.endswith('.py')\n")
    (tmp_path / "d.c").write_text("_COMPILED\n")  # generated C is not a source
    assert compiled_only_branches(tmp_path) == [
        "a.py: _COMPILED",
        'a.py: __file__.endswith(".py")',
        "b.pxd: _COMPILED",
        "c.py: cython.compiled",
        "c.py: __file__.endswith('.py')",
    ]


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


def _imports(tree: ast.Module):
    """Every import of a module, at module level or inside a function (a lazy import closes
    a cycle as surely as an eager one, it only hides it until run time), except those
    under ``if TYPE_CHECKING:`` (never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
            yield node


# Written by setup.py beside the compiled modules it built (git-ignored; panama._ext.BUILD_RECORD): no code.
GENERATED = pathlib.Path("_build_info.py")


def import_graph(root: pathlib.Path = SRC):
    """Module -> modules it imports (at import time or in a function), within the package
    (networkx DiGraph)."""
    import networkx as nx

    modules = {}
    for path in root.rglob("*.py"):
        if path.relative_to(root) == GENERATED:
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        for node in _imports(ast.parse(path.read_text())):
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


def test_the_cycle_check_finds_a_cycle_closed_by_a_function_level_import(tmp_path):
    """As switchd and its data-plane loops did before issue 29: the daemon imported the
    loops inside a function, the loops imported the daemon."""
    import networkx as nx

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "daemon.py").write_text("import pkg.hints\n\n\ndef serve():\n    from pkg.loop import run\n\n    run()\n")
    (pkg / "loop.py").write_text("from pkg.daemon import serve\n\n\ndef run():\n    pass\n")
    # Imports for type checkers only never run: no cycle through pkg.hints.
    (pkg / "hints.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.daemon\n")
    cycles = list(nx.simple_cycles(import_graph(pkg)))
    assert sorted(map(sorted, cycles)) == [["pkg.daemon", "pkg.loop"]]


def design_map(text: str) -> dict[str, set[str]]:
    """The package map of docs/design.md: package -> the ``panama`` packages its arrow lists
    (continuation lines included; other names, e.g. numpy, are not checked)."""
    block = text.split("## Package map", 1)[1].split("```", 2)[1]
    arrows: dict[str, set[str]] = {}
    current, column = None, 0
    for line in block.splitlines():
        if line.startswith("panama."):
            current = line.split()[0].removeprefix("panama.")
            column = line.index("->") + 2
            arrows[current] = set()
        if current is None or len(line) <= column:
            continue
        for word in line[column:].replace(",", " ").replace(":", " ").split():
            arrows[current].add(word.removeprefix("panama.").split(".")[0])
    return arrows


def test_the_design_map_draws_the_arrows_of_the_code():
    """Every package of src/panama is in docs/design.md's map, and each arrow names exactly
    the packages it imports (module- or function-level)."""
    graph = import_graph()
    package = {name: name.split(".")[1] for name in graph if name.count(".") >= 1}
    real: dict[str, set[str]] = {p: set() for p in package.values() if p != "__main__"}
    for a, b in graph.edges():
        if a in package and b in package and package[a] != package[b] and package[a] in real:
            real[package[a]].add(package[b])
    drawn = design_map((SRC.parents[1] / "docs" / "design.md").read_text())
    assert set(drawn) == set(real)
    assert {p: drawn[p] & set(real) for p in drawn} == real


def test_the_design_map_is_read_with_its_continuation_lines():
    text = (
        "## Package map\n\n```\n"
        "panama.cli     the command        -> sim, runtime,\n"
        "               lazily                training, numpy\n"
        "panama.core    the protocol       -> numpy only\n"
        "```\n"
    )
    assert design_map(text) == {"cli": {"sim", "runtime", "training", "numpy"}, "core": {"numpy", "only"}}


# ---------------------------------------------------------------------- the runtime's rooms
RUNTIME = SRC / "runtime"
ROOMS = ("controller", "switch", "worker")  # services that talk over the control plane only
MAX_LOOSE_RUNTIME_MODULES = 5


def room_violations(runtime: pathlib.Path = RUNTIME) -> list[str]:
    """``room/file imports panama.runtime.other`` for every import (any level) from one
    room of the runtime into another."""
    found = []
    for room in ROOMS:
        for path in sorted((runtime / room).rglob("*.py")):
            for node in _imports(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    other = name.split(".")[2] if name.startswith("panama.runtime.") else None
                    if other in ROOMS and other != room:
                        found.append(f"{room}/{path.name} imports {name}")
    return found


def test_controller_switch_and_worker_import_none_of_each_other():
    """They share the control plane (``runtime/control``: messages, client, server) and
    nothing else: the controller's ready file is written by ``runtime/process``, not the daemon."""
    assert room_violations() == []


def test_the_room_check_finds_a_crossing(tmp_path):
    for room in ROOMS:
        (tmp_path / room).mkdir()
    (tmp_path / "controller" / "service.py").write_text(
        "def run():\n    from panama.runtime.switch.daemon import write_ready_file\n"
    )
    (tmp_path / "worker" / "c.py").write_text("from panama.runtime.control.client import call\n")
    assert room_violations(tmp_path) == ["controller/service.py imports panama.runtime.switch.daemon"]


def test_at_most_five_loose_modules_at_the_top_of_the_runtime():
    loose = sorted(p.name for p in RUNTIME.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_RUNTIME_MODULES, loose


API_FILES = (RUNTIME / "controller" / "api.py", RUNTIME / "switch" / "api.py")


def foreign_private_reads(path: pathlib.Path) -> list[str]:
    """``file:line name`` for every private attribute (``_x``, not dunder) an API module
    reads that it does not define itself: on an object other than ``self``, or on ``self``
    without a ``def _x`` or an assignment ``self._x = ...`` in the module."""
    tree = ast.parse(path.read_text())
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                defined.add(node.attr)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        if not on_self or node.attr not in defined:
            found.append(f"{path.name}:{node.lineno} {node.attr}")
    return found


@pytest.mark.parametrize("path", API_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_apis_read_no_private_name_of_another_object(path):
    """The API classes are built from their service and call its public surface (issue 38)."""
    assert foreign_private_reads(path) == []


def test_the_private_name_check_finds_each_kind(tmp_path):
    bad = tmp_path / "api.py"
    bad.write_text(
        "class A:\n"
        "    def __init__(self, service):\n"
        "        self.service = service\n"
        "        self._mine = 1\n"
        "    def _helper(self):\n"
        "        return self._mine + self._helper.__doc__.__len__()\n"
        "    def h(self):\n"
        "        return self.service._admit, self._session\n"
    )
    assert foreign_private_reads(bad) == ["api.py:8 _admit", "api.py:8 _session"]
