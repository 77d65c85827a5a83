"""Build of the optional compiled fast path (everything else is in pyproject.toml).

The modules listed in ``src/panama/_ext.py`` are compiled, where a C compiler is
available, into extension modules that replace them at import time: a module with a
``.pyx`` beside its ``.py`` (a component such as ``panama.sim.heap``) from that C
implementation, the others from their ``.py`` with the types of the ``.pxd`` beside
them (the same code that runs interpreted: no module branches on which path runs).
Cython writes the generated ``.c`` files under ``build/cython/``, never into ``src``
(``.c`` files found there are leftovers of older builds: git-ignored, safe to delete).
Without a compiler, or with ``PANAMA_NO_EXTENSIONS=1`` at install time, the package
installs as pure Python and this prints one line saying so. Editable installs build the extensions in place
(``src/panama/.../*.so``, git-ignored).

Apart from those, and optional on its own: ``panama.runtime.net._mmsg`` (a ``.pyx``, Linux
only), the runtime's batched ``recvmmsg``/``sendmmsg`` I/O. Its failure to build leaves
the other extensions in place; :mod:`panama.runtime.net.mmsg` then uses its pure-Python
classes.
"""

from __future__ import annotations

import os
import runpy
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
EXT = runpy.run_path(os.path.join(HERE, "src", "panama", "_ext.py"))

# Cython directives: Python semantics everywhere (integer division and modulo, overflow
# checks on conversion, annotations not used as C types), so the compiled modules give
# bit-identical results; only the .pxd declarations change how values are stored.
DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,
    "boundscheck": False,
    "wraparound": True,
    "cdivision": False,
    "initializedcheck": False,
    "embedsignature": True,
}


# Where Cython writes the .c files it generates (git-ignored, as all of build/).
BUILD_DIR = os.path.join("build", "cython")


def _say(msg: str) -> None:
    print(f"panama: {msg}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails, and compiles the
    modules in parallel."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extension(self, ext) -> None:
        if ext.name not in OPTIONAL_MODULES:
            super().build_extension(ext)
            return
        try:
            super().build_extension(ext)
        except Exception as e:  # e.g. a libc without recvmmsg: the runtime's Python I/O is used
            _say(f"{ext.name} not built ({type(e).__name__}: {e}); the runtime uses its pure-Python I/O")

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no Python headers, ...
            _say(f"compiled fast path not built ({type(e).__name__}: {e}); installing the pure-Python simulator")
            # All or nothing: the compiled modules share extension types.
            for ext in self.extensions:
                if ext.name in OPTIONAL_MODULES:
                    continue
                path = self.get_ext_fullpath(ext.name)
                if os.path.exists(path):
                    os.remove(path)


# Built apart from COMPILED_MODULES and optional one by one (see the docstring).
OPTIONAL_MODULES = ("panama.runtime.net._mmsg",)


def optional_modules() -> list:
    """The runtime's compiled I/O helper (Linux: recvmmsg/sendmmsg), or nothing."""
    if not sys.platform.startswith("linux"):
        return []
    from Cython.Build import cythonize
    from setuptools import Extension

    try:
        return cythonize(
            [Extension("panama.runtime.net._mmsg", [os.path.join("src", "panama", "runtime", "net", "_mmsg.pyx")])],
            compiler_directives=DIRECTIVES,
            build_dir=BUILD_DIR,
            quiet=True,
        )
    except Exception as e:  # noqa: BLE001 - optional
        why = f"Cython: {type(e).__name__}: {e}"
        _say(f"panama.runtime.net._mmsg not built ({why}); the runtime uses its pure-Python I/O")
        return []


def ext_modules() -> list:
    if EXT["no_extensions"]():
        _say(f"{EXT['ENV_VAR']} is set: installing the pure-Python simulator")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say("Cython is not available: installing the pure-Python simulator")
        return []
    sources = [os.path.relpath(EXT["source_of"](name), HERE) for name in EXT["COMPILED_MODULES"]]
    from setuptools import Extension

    exts = [Extension(name, [src]) for name, src in zip(EXT["COMPILED_MODULES"], sources)]
    try:
        built = cythonize(exts, compiler_directives=DIRECTIVES, build_dir=BUILD_DIR, quiet=True)
    except Exception as e:  # a Cython version that cannot translate these sources
        _say(f"compiled fast path not built (Cython: {type(e).__name__}: {e}); installing the pure-Python simulator")
        built = []
    return built + optional_modules()


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
