"""Build of the optional compiled fast path (everything else is in pyproject.toml).

The modules listed in ``src/panama/_ext.py`` are plain Python files; where a C compiler
is available, Cython compiles them (types from the ``.pxd`` files beside them) into
extension modules that replace them at import time. Without a compiler, or with
``PANAMA_NO_EXTENSIONS=1`` at install time, the package installs as pure Python and this
prints one line saying so. Editable installs build the extensions in place
(``src/panama/.../*.so``, git-ignored).
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


def _say(msg: str) -> None:
    print(f"panama: {msg}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails, and compiles the
    modules in parallel."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no Python headers, ...
            _say(f"compiled fast path not built ({type(e).__name__}: {e}); installing the pure-Python simulator")
            # All or nothing: the compiled modules share extension types.
            for ext in self.extensions:
                path = self.get_ext_fullpath(ext.name)
                if os.path.exists(path):
                    os.remove(path)


def ext_modules() -> list:
    if EXT["no_extensions"]():
        _say(f"{EXT['ENV_VAR']} is set: installing the pure-Python simulator")
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say("Cython is not available: installing the pure-Python simulator")
        return []
    sources = [os.path.join("src", *name.split(".")) + ".py" for name in EXT["COMPILED_MODULES"]]
    from setuptools import Extension

    exts = [Extension(name, [src]) for name, src in zip(EXT["COMPILED_MODULES"], sources)]
    try:
        return cythonize(exts, compiler_directives=DIRECTIVES, quiet=True)
    except Exception as e:  # a Cython version that cannot translate these sources
        _say(f"compiled fast path not built (Cython: {type(e).__name__}: {e}); installing the pure-Python simulator")
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
