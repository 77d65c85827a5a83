"""Code shapes that a Cython release is known to miscompile stay out of the compiled modules.

Cython 3.3.0 translates a loop over a dict attribute of a function's argument (``for s in
tree.slots.values():``, ``for k in tree.slots``, in comprehensions too) without loading
the attribute: the loop dereferences NULL and the process segfaults (issue 36; reproduced
outside the project with a two-line ``.pxd`` and a four-line function). The build refuses
that release (setup.py, ``panama._ext.BAD_CYTHON``), and the compiled modules never use
the shape at all: they bind such an attribute to a local first (``slots = tree.slots``),
which every release compiles correctly. ``self.<attr>`` loops are not affected.
"""

from __future__ import annotations

import ast
from pathlib import Path

import panama
from panama import _ext

ROOT = Path(panama.__file__).parent


def _loops_over_an_argument_attribute(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, source)`` of loops and comprehensions iterating ``x.attr`` or
    ``x.attr.values()/items()/keys()`` with ``x`` a plain name other than self/cls."""
    found = []
    iters = [n.iter for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    for it in iters:
        node = it
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            if node.func.attr in ("values", "items", "keys"):
                node = node.func.value
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id not in ("self", "cls")
        ):
            found.append((it.lineno, ast.unparse(it)))
    return found


def test_no_compiled_module_loops_over_an_argument_attribute():
    offenders = []
    for name in _ext.COMPILED_MODULES:
        if name in _ext.COMPONENTS:  # .pyx components: their .py twin never runs compiled
            continue
        path = Path(_ext.source_of(name))
        for line, src in _loops_over_an_argument_attribute(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(ROOT)}:{line} for ... in {src}")
    assert offenders == []


def test_the_check_sees_the_shape():
    bad = "def f(tree):\n    for s in tree.slots.values():\n        pass\n    return [k for k in tree.slots]\n"
    good = (
        "def f(self, tree):\n    slots = tree.slots\n    for s in slots.values():\n        pass\n"
        "    for x in self.a.items():\n        pass\n"
    )
    assert [line for line, _ in _loops_over_an_argument_attribute(ast.parse(bad))] == [2, 4]
    assert _loops_over_an_argument_attribute(ast.parse(good)) == []
