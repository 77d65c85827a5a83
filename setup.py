"""Build of the optional compiled fast path (everything else is in pyproject.toml).

The modules listed in ``src/panama/_ext.py`` are compiled, where a C compiler is
available, into extension modules that replace them at import time: a module with a
``.pyx`` beside its ``.py`` (a component such as ``panama.sim.heap``) from that C
implementation, the others from their ``.py`` with the types of the ``.pxd`` beside
them (the same code that runs interpreted: no module branches on which path runs).
Cython writes the generated ``.c`` files under ``build/cython/``, never into ``src``
(``.c`` files found there are leftovers of older builds: git-ignored, safe to delete).
Without a compiler, or with ``PANAMA_NO_EXTENSIONS=1`` at install time, the package
installs as pure Python and this prints one line saying so. A Cython release known to
miscompile the modules (``BAD_CYTHON`` in ``_ext.py``; the build requirements exclude it,
but a build without isolation uses whatever is installed) stops the build with one line
naming it and the fix. Once the modules are built, ``panama/_build_info.py`` (git-ignored)
records the Cython that translated them, so that ``panama`` refuses builds made by a
release found bad later. Editable installs build the extensions in place
(``src/panama/.../*.so``, git-ignored).

Apart from those, and optional on its own: ``panama.runtime.net._mmsg`` (a ``.pyx``, Linux
only), the runtime's batched ``recvmmsg``/``sendmmsg`` I/O. Its failure to build leaves
the other extensions in place; :mod:`panama.runtime.net.mmsg` then uses its pure-Python
classes.

Progress: pip runs this script with its output captured and shows it only with ``-v`` (or
when the build fails), and the README installs with ``-q``; compiling takes minutes. So
each step (Cython translating a module, the C compiler finishing one, the total) prints
one line ``panama: ...`` to the terminal pip runs in (``/dev/tty``) when there is one, else
to stderr (a CI log, ``pip -v``). ``PANAMA_BUILD_PROGRESS=0`` sends them to stderr only.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time

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


def _terminal():
    """The terminal pip was started from, if any (pip captures this script's stdout and
    stderr, and shows them only with -v or on failure); None in CI, or when stderr is it."""
    if os.environ.get("PANAMA_BUILD_PROGRESS", "1") == "0" or sys.stderr.isatty():
        return None
    try:
        return open("/dev/tty", "w")  # noqa: SIM115 - kept open for the build's lines
    except OSError:  # no controlling terminal (CI, a service)
        return None


_TTY = _terminal()


_said = False


def _say(msg: str) -> None:
    """One line where the person installing sees it (the terminal, else stderr).

    On the terminal the first line of this process starts on a new line and the others
    at the line's start: without -q, pip's spinner is at the end of its "Building ..."
    line and then at the start of the next one, where each line overwrites it.
    """
    global _said
    line = f"panama: {msg}"
    if _TTY is not None:
        try:
            _TTY.write(("\r" if _said else "\n") + line + "\n")
            _TTY.flush()
            _said = True
            return
        except OSError:
            pass
    print(line, file=sys.stderr, flush=True)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s // 60:.0f} min {s % 60:02.0f} s"


_translated = 0  # modules Cython translated in this process (not the ones it found up to date)


def _cythonize_saying(cythonize, ext, which: str) -> list:
    """``cythonize`` one extension; one line once it is done, if it had to be translated.

    pip runs this script three times (requirements, metadata, build), each running
    cythonize: the first translates, the others find the ``.c`` up to date and say nothing.
    """
    global _translated
    t0, wall0 = time.monotonic(), time.time()
    built = cythonize([ext], compiler_directives=DIRECTIVES, build_dir=BUILD_DIR, quiet=True)
    took = time.monotonic() - t0
    c_files = [src for e in built for src in e.sources if src.endswith(".c")]
    if any(os.path.exists(c) and os.path.getmtime(c) >= wall0 - 1.0 for c in c_files):  # written just now
        if not _translated:
            _say(f"translating modules to C with Cython into {BUILD_DIR}/ (then the C compiler builds them)")
        _translated += 1
        _say(f"[Cython {which}] {ext.name} ({_duration(took)})")
    return built


def _cython_version() -> str | None:
    try:
        import Cython
    except ImportError:
        return None
    return Cython.__version__


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails, and compiles the
    modules in parallel."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1
        self._done = 0
        self._lock = threading.Lock()

    def build_extension(self, ext) -> None:
        t0 = time.monotonic()
        outcome = "failed"
        try:
            if ext.name not in OPTIONAL_MODULES:
                super().build_extension(ext)
                outcome = _duration(time.monotonic() - t0)
                return
            try:
                super().build_extension(ext)
                outcome = _duration(time.monotonic() - t0)
            except Exception as e:  # e.g. a libc without recvmmsg: the runtime's Python I/O is used
                _say(f"{ext.name} not built ({type(e).__name__}: {e}); the runtime uses its pure-Python I/O")
        finally:
            with self._lock:  # modules are compiled in parallel threads
                self._done += 1
                n = self._done
            _say(f"[C {n:2d}/{len(self.extensions)}] {ext.name} ({outcome})")

    def _record(self, cython_version: str | None) -> None:
        """Write (None: remove) the record of the Cython that built the compiled modules, in the
        package directory they were built into (``src/panama`` in place, else the build's)."""
        package_dir = os.path.dirname(self.get_ext_fullpath("panama." + EXT["BUILD_RECORD"]))
        EXT["write_build_record"](package_dir, cython_version)

    def run(self) -> None:
        t0 = time.monotonic()
        built = any(ext.name not in OPTIONAL_MODULES for ext in self.extensions)
        if self.extensions:
            _say(
                f"compiling {len(self.extensions)} modules with the C compiler, {self.parallel} at a time "
                f"(minutes; PANAMA_NO_EXTENSIONS=1 at install skips this: pure Python)"
            )
        try:
            super().run()
            took = _duration(time.monotonic() - t0)
            if built:
                self._record(_cython_version())
                _say(f"compiled fast path built ({took} of C compilation)")
            elif self.extensions:  # the simulator's modules were not translated (said above)
                _say(f"runtime I/O helper built ({took} of C compilation); the simulator's modules were not (above)")
        except Exception as e:  # no compiler, no Python headers, ...
            _say(f"compiled fast path not built ({type(e).__name__}: {e}); installing the pure-Python simulator")
            self._record(None)
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
        ext = Extension("panama.runtime.net._mmsg", [os.path.join("src", "panama", "runtime", "net", "_mmsg.pyx")])
        return _cythonize_saying(cythonize, ext, "runtime I/O")
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
    refused = EXT["bad_cython"](_cython_version())
    if refused is not None:  # the build requirements exclude it; a build without isolation may still find it
        raise SystemExit(f"panama: {refused}")
    sources = [os.path.relpath(EXT["source_of"](name), HERE) for name in EXT["COMPILED_MODULES"]]
    from setuptools import Extension

    exts = [Extension(name, [src]) for name, src in zip(EXT["COMPILED_MODULES"], sources)]
    built = []
    try:
        for i, ext in enumerate(exts, 1):  # one at a time, to say which
            built += _cythonize_saying(cythonize, ext, f"{i:2d}/{len(exts)}")
    except Exception as e:  # a Cython version that cannot translate these sources
        _say(f"compiled fast path not built (Cython: {type(e).__name__}: {e}); installing the pure-Python simulator")
        built = []
    return built + optional_modules()


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
