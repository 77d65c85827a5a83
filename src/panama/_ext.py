"""The compiled fast path: which modules are compiled, and the switch that turns it off.

What ``setup.py`` compiles (Cython, where a C compiler is available) into extension
modules that the import system prefers to the ``.py`` beside them:

* components with two implementations of one contract (:data:`COMPONENTS`): a pure-Python
  ``name.py`` and a C ``name.pyx`` (declarations in ``name.pxd``): the simulator's event
  queue, :mod:`panama.sim.heap`, its switch FIFOs (a lossless port's release ring, a
  switch's hook delay line), :mod:`panama.sim.fifos`, and where its packets sit in
  memory, :mod:`panama.sim.placement`. The ``.py`` twin never runs compiled.
* the other modules of :data:`COMPILED_MODULES`, the simulator's hot modules and the core
  modules it drives, compiled from their own ``.py`` with the C types declared in the
  ``.pxd`` beside them: extension types with C fields, ``cpdef``/``cdef`` functions and
  methods with typed locals, C constants. The code is the same on both paths: no module
  branches on which one runs (``tests/test_layering.py`` checks the core); where the
  compiled path needs a construction of its own, it is written once so that it is fast
  interpreted too (``panama.core.packet.new_packet``, ``panama.sim.packet.panama_sim_packet``:
  every field set on a bare instance, no argument parsing), or it is a component.

The ``.py`` files run interpreted when no extension was built, when some extension is
older than its sources (one warning line on stderr), or when the environment variable
``PANAMA_NO_EXTENSIONS`` is set to a non-empty value other than ``0`` (as aiohttp's
``AIOHTTP_NO_EXTENSIONS``): then a finder placed in front of the import system loads
every module of :data:`COMPILED_MODULES` from its ``.py`` even where the ``.so`` exist.
Both paths give bit-identical simulation results (``tests/sim/test_compiled.py``).

``setup.py`` also builds ``panama.runtime.net._mmsg`` (the runtime's batched socket I/O, a
``.pyx``): it is not one of these modules, since its fallback is other code
(:mod:`panama.runtime.net.mmsg`), not its own source; :func:`compiled` does not cover it,
``PANAMA_NO_EXTENSIONS`` switches it off too, and ``panama.runtime.net.mmsg.IMPLEMENTATION``
says which runs.

Cython releases known to miscompile these modules (:data:`BAD_CYTHON`) are kept out three
ways: ``pyproject.toml``'s build requirements exclude them, ``setup.py`` refuses to build
with one (:func:`bad_cython`: the install fails with one line naming it and the fix), and
the build records the Cython that translated it (:data:`BUILD_RECORD`, git-ignored beside
this file), so that compiled modules built by a release found bad later are refused at
import: importing one raises :class:`BadBuildError` (one line naming the release and the
fix; the ``panama`` command prints it and exits 2) instead of letting it crash.
``PANAMA_NO_EXTENSIONS=1`` runs the ``.py`` files as ever.

This module is read by ``setup.py`` (with ``runpy``): it imports the standard library
only.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import sys

__all__ = [
    "BAD_CYTHON",
    "BUILD_RECORD",
    "BadBuildError",
    "COMPILED_MODULES",
    "COMPONENTS",
    "ENV_VAR",
    "child_env",
    "source_of",
    "no_extensions",
    "bad_cython",
    "built_with_cython",
    "write_build_record",
    "refusal",
    "install_pure_finder",
    "warn_stale",
    "extensions_built",
    "module_is_compiled",
    "compiled",
    "compiled_modules",
]

# Components with a pure-Python .py and a C .pyx (see the module docstring).
COMPONENTS: tuple[str, ...] = ("panama.sim.heap", "panama.sim.fifos", "panama.sim.placement")

# Modules compiled by setup.py: the simulator's hot path and the core modules it drives
# (the components included). All or none of them run compiled.
COMPILED_MODULES: tuple[str, ...] = (
    "panama.sim.heap",
    "panama.sim.fifos",
    "panama.sim.placement",
    "panama.sim.engine",
    "panama.sim.packet",
    "panama.sim.nodes",
    "panama.sim.ports",
    "panama.sim.lossless",
    "panama.sim.dctcp",
    "panama.sim.sampler",
    "panama.sim.routing",
    "panama.sim.pswitch",
    "panama.sim.panama_host",
    "panama.sim.qahead",
    "panama.core.packet",
    "panama.core.accelerator",
    "panama.core.transport",
    "panama.core.cc",
)

ENV_VAR = "PANAMA_NO_EXTENSIONS"

# Cython releases that miscompile these modules, and what goes wrong (pyproject.toml's build
# requirements exclude each: tests/sim/test_compiled.py checks it).
BAD_CYTHON: dict[str, str] = {
    # A loop over an attribute of a def function's argument annotated with an extension type
    # (`for slot in tree.slots.values()` with `tree: _Tree`, annotation_typing off) iterates
    # over NULL: the attribute is never loaded. Every PANAMA simulation segfaulted in
    # Accelerator._release. The sources no longer have that shape (a test keeps it out).
    "3.3.0": "segfaults",
}

# The module setup.py writes beside this one once it has built the compiled modules
# (git-ignored): ``CYTHON_VERSION = "..."``, the Cython that translated them.
BUILD_RECORD = "_build_info"


def source_of(name: str) -> str:
    """The file ``setup.py`` compiles for module ``name``: the ``.pyx`` of a component
    (its C implementation), else the module's ``.py``."""
    base = os.path.join(_PACKAGE_DIR, *name.split(".")[1:])
    return base + (".pyx" if name in COMPONENTS else ".py")


def no_extensions() -> bool:
    """True when ``PANAMA_NO_EXTENSIONS`` asks for the pure-Python path."""
    return os.environ.get(ENV_VAR, "") not in ("", "0")


def child_env(pure: bool, **extra: str) -> dict[str, str]:
    """The environment for a child Python process that runs the pure-Python path
    (``pure``: ``PANAMA_NO_EXTENSIONS=1``) or the compiled one where it is built (the
    variable removed, whatever this process was given); ``extra`` variables added."""
    env = dict(os.environ, **extra)
    env.pop(ENV_VAR, None)
    if pure:
        env[ENV_VAR] = "1"
    return env


def _fix(version: str) -> str:
    return (
        f"install another Cython (pip install 'Cython!={version}') and rebuild panama (pip install -e .), "
        f"or set {ENV_VAR}=1 to run pure Python"
    )


def bad_cython(version: str) -> str | None:
    """Why Cython ``version`` must not build the compiled modules, as one line naming it and the
    fix (``setup.py`` stops with it), or None for a release not known to be bad."""
    why = BAD_CYTHON.get(version)
    return None if why is None else f"Cython {version} miscompiles panama's compiled modules ({why}): {_fix(version)}"


def write_build_record(package_dir: str, cython_version: str | None) -> None:
    """Record in ``package_dir`` (the ``panama`` directory the extensions were built into) the
    Cython that translated them (``setup.py``, once they are built); None removes the record."""
    path = os.path.join(package_dir, BUILD_RECORD + ".py")
    if cython_version is None:
        if os.path.exists(path):
            os.remove(path)
        return
    doc = "Written by setup.py when it built the compiled modules (git-ignored): the Cython that translated them."
    with open(path, "w") as f:
        f.write(f'"""{doc}"""\n\nCYTHON_VERSION = "{cython_version}"\n')


def built_with_cython(package_dir: str | None = None) -> str | None:
    """The Cython release the build of the compiled modules recorded, or None (no record: no
    build, or one made before builds were recorded)."""
    path = os.path.join(package_dir or _PACKAGE_DIR, BUILD_RECORD + ".py")
    try:
        with open(path) as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["CYTHON_VERSION"]:
            value = node.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return None


def refusal(package_dir: str | None = None) -> str | None:
    """The one line refusing the extensions built in ``package_dir`` (default: this package)
    when the release that built them is known to miscompile them (:data:`BAD_CYTHON`), else None."""
    package_dir = package_dir or _PACKAGE_DIR
    if not any(_built_extension(name, package_dir) is not None for name in COMPILED_MODULES):
        return None
    version = built_with_cython(package_dir)
    if version not in BAD_CYTHON:
        return None
    return (
        f"panama's compiled modules were built with Cython {version}, which miscompiles them "
        f"({BAD_CYTHON[version]}): {_fix(version)}"
    )


class BadBuildError(ImportError):
    """A compiled module was imported from a build made by a Cython release known to miscompile
    it; the message is one line naming the release and the fix."""


class _RefuseFinder:
    """Meta-path finder: importing any compiled module raises :class:`BadBuildError`."""

    def __init__(self, message: str):
        self.message = message

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname in COMPILED_MODULES:
            raise BadBuildError(self.message, name=fullname)
        return None


class _PureFinder:
    """Meta-path finder: loads the compiled modules from their ``.py`` sources."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname not in COMPILED_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or spec.origin.endswith(".py"):
            return spec
        source = os.path.join(os.path.dirname(spec.origin), fullname.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


def _built_extension(name: str, package_dir: str | None = None) -> str | None:
    """Path of the extension module built for ``name`` beside its source, if any."""
    base = os.path.join(package_dir or _PACKAGE_DIR, *name.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def _stale_extensions() -> list[str]:
    """Compiled modules whose ``.py`` or ``.pxd`` is newer than their extension (an
    edited source in an editable install that was not rebuilt)."""
    stale = []
    for name in COMPILED_MODULES:
        built = _built_extension(name)
        if built is None:
            continue
        base, ext = os.path.splitext(source_of(name))
        exts = (ext, ".pxd")  # the .py twin of a component is not compiled
        t = os.path.getmtime(built)
        if any(os.path.exists(base + ext) and os.path.getmtime(base + ext) > t for ext in exts):
            stale.append(name)
    return stale


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def install_pure_finder() -> None:
    """Put the pure-Python finder in front of the import system if the switch is set,
    or if some extension is older than its source (``_stale_extensions()``; the compiled
    modules share extension types, so they run compiled all together or not at all); with
    the switch unset, the refusing finder instead if a release known to miscompile them
    built them (:func:`refusal`). Called by ``panama/__init__.py`` before any compiled
    module is imported."""
    if any(isinstance(f, (_PureFinder, _RefuseFinder)) for f in sys.meta_path):
        return
    if no_extensions():
        sys.meta_path.insert(0, _PureFinder())
        return
    refused = refusal()
    if refused is not None:
        sys.meta_path.insert(0, _RefuseFinder(refused))
        return
    stale = _stale_extensions()
    if not stale:
        return
    # One line, once per process: the pure path is about 13x slower, which nobody should
    # find out from a slow run. (``compiled()``, and the "compiled" key of summary.json
    # and bench output, say which path ran.)
    warn_stale([n.rpartition(".")[2] for n in stale], "the pure-Python simulator")
    sys.meta_path.insert(0, _PureFinder())


def warn_stale(names: list[str], fallback: str) -> None:
    """The one stderr line saying that the extensions ``names`` are older than their sources,
    so ``fallback`` runs instead (the simulator here, the runtime's socket I/O in
    :mod:`panama.runtime.net.mmsg`)."""
    print(
        f"panama: warning: compiled extensions older than their sources ({', '.join(names)}); running "
        f"{fallback}. Rebuild: python setup.py build_ext --inplace",
        file=sys.stderr,
    )


def extensions_built() -> bool:
    """True when every module of the fast path has an up-to-date extension beside its
    source (whether or not this process uses them)."""
    return all(_built_extension(name) is not None for name in COMPILED_MODULES) and not _stale_extensions()


def module_is_compiled(name: str) -> bool:
    """Whether module ``name`` (imported here if needed) was loaded from an extension."""
    mod = importlib.import_module(name)
    origin = getattr(mod, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> dict[str, bool]:
    """Every module of the fast path and whether it runs compiled."""
    return {name: module_is_compiled(name) for name in COMPILED_MODULES}


def compiled() -> bool:
    """True when every module of the fast path runs compiled (the ``"compiled"`` key of
    ``summary.json`` and ``panama bench sim --json``)."""
    return all(compiled_modules().values())
