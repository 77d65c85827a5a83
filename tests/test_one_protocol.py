"""One protocol: the drivers use the core only through its public API (parsed with ast).

A driver (the in-memory fabric, the simulator, the UDP runtime) moves packets and arms
timers. If it reached into the core's private state (an accelerator's trees or slots, a
transport's windows) it could decide something the protocol does not say, or give a
worker information a real worker cannot have, as the simulator once did by reading the
accelerators' caps for its workers' first window.
"""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "panama"
DRIVERS = [SRC / "fabric.py", *sorted((SRC / "sim").rglob("*.py")), *sorted((SRC / "runtime").rglob("*.py"))]
# Modules that drive a worker: they must learn caps from the plan and results only.
WORKER_DRIVERS = [
    SRC / "sim" / "panama_host.py",
    SRC / "sim" / "training.py",
    SRC / "runtime" / "worker" / "communicator.py",
]
ACCELERATOR_INTROSPECTION = {"tree_status", "occupancy", "children_of", "parent_of", "check_invariants"}


def core_private_names() -> set[str]:
    """Every ``_name`` (not dunder) the core defines as a method or assigns on ``self``."""
    names = set()
    for path in (SRC / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:  # __slots__ entries
                    if isinstance(item, ast.Assign) and any(getattr(t, "id", "") == "__slots__" for t in item.targets):
                        names.update(
                            elt.value for elt in getattr(item.value, "elts", []) if isinstance(elt, ast.Constant)
                        )
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def foreign_private_uses(path: pathlib.Path, private: set[str]) -> list[tuple[int, str]]:
    """``(line, obj._name)`` for uses in ``path`` (obj not self/cls) of a private name of the core."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in private:
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_drivers_use_no_private_state_of_the_core():
    private = core_private_names()
    assert {"_trees", "_take_ack", "_inflight", "_clamp"} <= private  # the scan sees the core
    # The simulator's own objects that share a private name with the core (checked by hand).
    own: set[tuple[str, str]] = set()
    found = [
        f"{path.relative_to(SRC)}:{line} {text}"
        for path in DRIVERS
        for line, text in foreign_private_uses(path, private)
        if (str(path.relative_to(SRC)), text) not in own
    ]
    assert found == []


def test_worker_drivers_do_not_read_accelerator_state():
    for path in WORKER_DRIVERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ACCELERATOR_INTROSPECTION, f"{path.name}:{node.lineno} reads {node.attr}"


def test_the_scan_catches_a_private_use(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(acc, tr):\n    return acc._trees, tr._inflight, self._trees, acc.trees\n")
    assert [text for _, text in foreign_private_uses(bad, {"_trees", "_inflight"})] == ["acc._trees", "tr._inflight"]
