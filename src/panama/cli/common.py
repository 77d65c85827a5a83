"""Helpers shared by CLI modules: turning validation errors into one-line usage errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

#: The experiments' default output root (``panama experiment ... --out``).
DEFAULT_OUT = Path("panama-out")


def usage_error(field: str, message: str) -> click.UsageError:
    """A usage error that names the offending field (exit code 2, one line)."""
    return click.UsageError(f"{field}: {message}")


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


class OutDir(click.Path):
    """An output directory option (``--out``): refused with one line, exit 2, when it is a
    file, or lies under a file or in a directory this user cannot write (instead of a
    traceback when the command first writes there)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        probe = Path(path).absolute()
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            self.fail(f"{probe} is a file, not a directory: cannot create {path} under it", param, ctx)
        if not os.access(probe, os.W_OK | os.X_OK):
            self.fail(f"cannot write in {probe} (permission denied)", param, ctx)
        return path
