"""Helpers shared by CLI modules: turning validation errors into one-line usage errors."""

from __future__ import annotations

import json
from typing import Any

import click


def usage_error(field: str, message: str) -> click.UsageError:
    """A usage error that names the offending field (exit code 2, one line)."""
    return click.UsageError(f"{field}: {message}")


def pydantic_error(exc: Any, prefix: str = "") -> click.UsageError:
    """Convert a ``pydantic.ValidationError`` into a one-line usage error naming the field."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "config"
    return usage_error(prefix + loc, first.get("msg", "invalid value"))


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))
