"""No Cython release can break the compiled fast path silently (issue 36).

Cython 3.3.0 drops the attribute load of a loop over an attribute of a def function's
argument annotated with an extension type (``for slot in tree.slots.values()`` with
``tree: _Tree``): the loop iterates over NULL and segfaults. Four guards, each tested here
without building anything: the sources have no such loop; the build requirements exclude
every release of ``panama._ext.BAD_CYTHON``; ``setup.py`` refuses to build with one; and a
build made by one (its record, ``panama/_build_info.py``) is refused at import, with one
line naming the release and the fix (the ``panama`` command: that line and exit 2).
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import panama
from panama import _ext

PACKAGE = Path(panama.__file__).parent
ROOT = Path(__file__).resolve().parents[2]
SO = importlib.machinery.EXTENSION_SUFFIXES[0]  # only the file's existence is checked


def _extension_types() -> set[str]:
    """Every extension type the .pxd files declare (what an annotation may name for Cython)."""
    return {name for pxd in PACKAGE.rglob("*.pxd") for name in re.findall(r"cdef class (\w+)", pxd.read_text())}


def _loops_over_annotated_arguments(source: str, types: set[str]) -> list[str]:
    """``for`` loops and comprehensions iterating over an expression that reads an attribute
    of an argument annotated with one of ``types``: the shape Cython 3.3.0 miscompiles."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        typed = {a.arg for a in args if a.annotation and set(re.findall(r"\w+", ast.unparse(a.annotation))) & types}
        for node in ast.walk(fn):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                iters = [node.iter]
            elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                iters = [g.iter for g in node.generators]
            else:
                continue
            for it in iters:
                if any(
                    isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in typed
                    for n in ast.walk(it)
                ):
                    found.append(f"{fn.name}:{it.lineno}: for ... in {ast.unparse(it)}")
    return found


def test_the_scan_finds_the_miscompiled_shape():
    source = textwrap.dedent(
        """
        def release(self, tree: _Tree, n: int, other) -> None:
            for slot in tree.slots.values():
                pass
            total = sum(a for a in tree.child_ack.values())
            for x in other.slots.values():  # not annotated: compiled right
                pass
            slots = tree.slots  # a local: compiled right
            for slot in slots.values():
                pass
        """
    )
    found = _loops_over_annotated_arguments(source, {"_Tree"})
    assert [f.split(": ", 1)[0] for f in found] == ["release:3", "release:5"]


def test_no_compiled_module_loops_over_an_attribute_of_an_annotated_argument():
    types = _extension_types()
    assert {"_Tree", "Packet", "Port"} <= types
    found = []
    for name in _ext.COMPILED_MODULES:
        if name in _ext.COMPONENTS:  # compiled from the .pyx (cdef-typed arguments), not its .py
            continue
        path = Path(_ext.source_of(name))
        found += [f"{path.relative_to(PACKAGE)}: {f}" for f in _loops_over_annotated_arguments(path.read_text(), types)]
    assert found == [], "bind the attribute to a local first (see panama._ext.BAD_CYTHON)"


def test_the_build_requirements_exclude_every_bad_release():
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("no source checkout")
    requires = tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    cython = [r for r in requires if re.match(r"cython\b", r, re.I)]
    assert len(cython) == 1
    excluded = {c.strip()[2:].strip() for c in cython[0][len("Cython") :].split(",") if c.strip().startswith("!=")}
    assert _ext.BAD_CYTHON and set(_ext.BAD_CYTHON) <= excluded


def _fake_build(tmp_path: Path, cython_version: str | None, extensions: bool = True) -> str:
    package = tmp_path / "panama"
    (package / "sim").mkdir(parents=True)
    if extensions:
        (package / "sim" / ("engine" + SO)).write_bytes(b"")
    _ext.write_build_record(str(package), cython_version)
    return str(package)


def test_the_build_record_names_the_cython_release(tmp_path):
    package = _fake_build(tmp_path, "3.2.9")
    assert _ext.built_with_cython(package) == "3.2.9"
    assert ast.parse(Path(package, _ext.BUILD_RECORD + ".py").read_text())  # a module: import panama._build_info
    _ext.write_build_record(package, None)
    assert _ext.built_with_cython(package) is None and not Path(package, _ext.BUILD_RECORD + ".py").exists()


@pytest.mark.parametrize("version", sorted(_ext.BAD_CYTHON))
def test_a_build_by_a_bad_release_is_refused_in_one_line_naming_it_and_the_fix(tmp_path, version):
    message = _ext.refusal(_fake_build(tmp_path, version))
    assert message is not None and "\n" not in message
    assert f"Cython {version}" in message and f"pip install 'Cython!={version}'" in message
    assert f"{_ext.ENV_VAR}=1" in message and "pip install -e ." in message


def test_other_builds_are_not_refused(tmp_path):
    assert _ext.refusal(_fake_build(tmp_path / "good", "3.3.1")) is None
    assert _ext.refusal(_fake_build(tmp_path / "unrecorded", None)) is None  # built before builds were recorded
    assert _ext.refusal(_fake_build(tmp_path / "pure", "3.3.0", extensions=False)) is None  # nothing compiled
    assert _ext.bad_cython("3.3.1") is None and _ext.bad_cython("3.2.9") is None


def test_setup_refuses_to_build_with_a_bad_release(tmp_path):
    """``setup.py`` with a (fake) Cython 3.3.0 importable stops before anything is built."""
    setup_py = ROOT / "setup.py"
    if not setup_py.exists():
        pytest.skip("no source checkout")
    pytest.importorskip("setuptools")  # in a venv of Python 3.11; not of 3.12 and later
    version = sorted(_ext.BAD_CYTHON)[0]
    fake = tmp_path / "Cython"
    (fake / "Build").mkdir(parents=True)
    (fake / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (fake / "Build" / "__init__.py").write_text("def cythonize(*a, **k):\n    raise AssertionError('translated')\n")
    env = {k: v for k, v in os.environ.items() if k != _ext.ENV_VAR} | {"PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(setup_py), "--version"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"panama: {_ext.bad_cython(version)}"
    assert "translated" not in proc.stderr


def test_importing_a_refused_build_raises_and_the_command_says_it_in_one_line(tmp_path):
    """A process whose compiled modules are refused: every compiled module fails to import with
    BadBuildError; ``panama simulate`` prints one line and exits 2 (the rest of ``panama`` works)."""
    code = textwrap.dedent(
        f"""
        import sys
        from panama import _ext
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, (_ext._PureFinder, _ext._RefuseFinder))]
        _ext.refusal = lambda: "built with Cython 3.3.0 (test)"
        _ext.install_pure_finder()
        try:
            import panama.core.accelerator
        except _ext.BadBuildError as exc:
            print("refused:", exc, file=sys.stderr)
        from panama.cli import main  # imports no compiled module
        main(["simulate", "--out", {str(tmp_path / "out")!r}])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != _ext.ENV_VAR}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("panama: warning:")]  # a stale build
    assert lines == [
        "refused: built with Cython 3.3.0 (test)",
        "panama: error: built with Cython 3.3.0 (test)",
    ]
    assert not (tmp_path / "out").exists()


def test_the_switch_still_runs_a_refused_build_pure(monkeypatch):
    monkeypatch.setenv(_ext.ENV_VAR, "1")
    monkeypatch.setattr(_ext, "refusal", lambda: "refused")
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, _ext._PureFinder)])
    _ext.install_pure_finder()
    assert isinstance(sys.meta_path[0], _ext._PureFinder)
    assert not any(isinstance(f, _ext._RefuseFinder) for f in sys.meta_path)


def test_the_finder_refuses_compiled_modules_only():
    finder = _ext._RefuseFinder("one line")
    for name in _ext.COMPILED_MODULES:
        with pytest.raises(_ext.BadBuildError, match="^one line$"):
            finder.find_spec(name)
    assert finder.find_spec("panama.cli") is None and finder.find_spec("panama.runtime.net._mmsg") is None


def test_this_build_recorded_a_release_that_is_not_bad():
    """Where the extensions are built (CI builds them), setup.py recorded the Cython it used."""
    if not _ext.extensions_built():
        pytest.skip("the compiled extensions are not built (pure-Python install)")
    version = _ext.built_with_cython()
    assert version is not None and re.match(r"\d+\.\d+", version), version
    assert version not in _ext.BAD_CYTHON and _ext.refusal() is None
