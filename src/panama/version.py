"""The revision of the code that made a result: one function, stamped on every output."""

from __future__ import annotations

import subprocess
from pathlib import Path

from panama import environment

__all__ = ["code_version"]


def code_version() -> str:
    """Short git revision of the code, ``-dirty`` if tracked files of the package changed;
    ``$PANAMA_CODE_VERSION`` when set (runs from an exported tree); ``unknown`` outside a
    checkout or without git."""
    given = environment.code_version()
    if given is not None:
        return given
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", str(here)],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
