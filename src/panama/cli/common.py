"""Helpers shared by CLI modules: turning validation errors into one-line usage errors."""

from __future__ import annotations

import json
from typing import Any

import click


def usage_error(field: str, message: str) -> click.UsageError:
    """A usage error that names the offending field (exit code 2, one line)."""
    return click.UsageError(f"{field}: {message}")


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))
