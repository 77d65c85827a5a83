"""The digest that names a synthesised design (its own module, so that the place-and-route
flow and the report both key stored results by it without importing each other)."""

from __future__ import annotations

import ast
import hashlib
import importlib
from pathlib import Path

from panama.hw.layout import HwConfig

SYNTH_SCRIPT = "read_verilog {src}; synth_xilinx -family {family} -top panama_aggregator -flatten; stat"
_DESIGN_SOURCES = (
    "panama.hw.datapath",
    "panama.hw.beats",
    "panama.hw.control",
    "panama.hw.header_fsm",
    "panama.hw.ingress",
    "panama.hw.layout",
    "panama.hw.fp32",
    "panama.core.codec",
    "panama.core.packet",
)


def _strip_docstring(body: list) -> list:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def _only_imports(nodes: list) -> bool:
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes)


def _is_cython_directive(decorator: ast.expr) -> bool:
    """``@cython.name`` or ``@cython.name(...)``: a compile directive (how the compiled build
    allocates or calls, never what the code does; a no-op interpreted)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "cython"


def source_definitions(text: str) -> list[tuple[str, str]]:
    """``(name, ast.dump)`` of every top-level definition in a module's source: functions,
    classes and assignments (named by their targets), with the docstrings of the module,
    its functions and classes removed. Imports, ``if TYPE_CHECKING:`` and ``try:`` blocks of
    imports, ``__all__`` and ``@cython.*`` compile directives are left out: they say where a
    definition lives or how the compiled build runs it, not what it does. Any other top-level
    statement counts with an empty name. ``ast.dump`` leaves out line numbers, so formatting,
    comments and the order of definitions do not count."""
    out = []
    for node in _strip_docstring(ast.parse(text).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.If) and _only_imports(node.body + node.orelse):
            continue
        if isinstance(node, ast.Try) and _only_imports(
            node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
        ):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                sub.body = _strip_docstring(sub.body) or [ast.Pass()]
                sub.decorator_list = [d for d in sub.decorator_list if not _is_cython_directive(d)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.Assign):
            name = ", ".join(ast.unparse(t) for t in node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            name = ast.unparse(node.target)
        else:
            name = ""
        if name == "__all__":
            continue
        out.append((name, ast.dump(node)))
    return out


def design_digest(
    cfg: HwConfig = HwConfig(), family: str = "xcup", *, script: str = SYNTH_SCRIPT, extra: tuple[str, ...] = ()
) -> str:
    """SHA-256 naming the synthesised design: family, configuration, synthesis script, and
    every top-level definition of the modules that generate the RTL (``_DESIGN_SOURCES``;
    :func:`source_definitions`), sorted by name. Any code change counts; formatting,
    comments, docstrings, imports and which of these modules holds a definition do not, so
    moving code between them keeps the stored synthesis. The Verilog text itself is no
    key: its ``src`` attributes name files and lines. ``script`` and ``extra`` (more modules,
    e.g. a harness around the datapath) name another flow (place and route)."""
    h = hashlib.sha256(f"{family}\n{cfg!r}\n{script}\n".encode())
    definitions = []
    for name in _DESIGN_SOURCES + extra:
        path = Path(importlib.import_module(name).__file__)
        if path.suffix != ".py":  # a compiled module: hash its source beside it
            path = path.with_name(path.name.split(".")[0] + ".py")
        definitions += source_definitions(path.read_text())
    for name, dump in sorted(definitions):
        h.update(f"{name}\n{dump}\n".encode())
    return h.hexdigest()
