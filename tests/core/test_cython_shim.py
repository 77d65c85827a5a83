"""The no-op stand-ins for ``cython`` decorators, used by an interpreted install without
Cython: every decorator a module takes from them exists there and changes nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import panama
from panama.core import _cython_shim as shim

SRC = Path(panama.__file__).parent


def _modules_falling_back_to_the_shim() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "_cython_shim as cython" in p.read_text()]


def test_every_cython_name_such_a_module_uses_is_in_the_shim():
    users = _modules_falling_back_to_the_shim()
    assert {p.name for p in users} >= {"packet.py", "lossless.py"}
    for path in users:
        used = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cython"
        }
        assert used <= set(shim.__all__), f"{path.name} uses cython.{sorted(used - set(shim.__all__))}"


def test_the_stand_ins_return_what_they_decorate():
    class Plain:
        pass

    def fn():
        return 1

    assert shim.freelist(8)(Plain) is Plain
    assert shim.no_gc(Plain) is Plain
    assert shim.cclass(Plain) is Plain
    assert shim.wraparound(False)(fn) is fn
