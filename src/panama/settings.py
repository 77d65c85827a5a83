"""The base of every settings model: declared once, validated once, errors that name the field.

A settings model (:class:`Settings`, a pydantic model) is the one declaration of a
component's knobs: their names, types, bounds, defaults (taken from named constants of
the layer that owns them) and one-line descriptions. Everything else is derived from it:
the command line (``panama.cli.options`` turns each field into an option), the JSON
config file a daemon is started with (:meth:`Settings.load` / :meth:`Settings.dump`) and
the docs (``--help``).

Contract:

* unknown keys are refused (``extra="forbid"``), instances are immutable (``frozen``);
  :meth:`Settings.replace` makes a changed copy, validated again;
* constructing, loading or replacing with a bad value raises :class:`SettingsError`, a
  :class:`~panama.core.errors.FieldError` whose ``field`` is the dotted key
  (``switch.packet_memory``) and ``detail`` says what is wrong and what was given; it
  never raises pydantic's own error type;
* ``dump()`` gives plain JSON types, and ``load(dump())`` gives an equal model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from panama.core.errors import FieldError

__all__ = ["Settings", "SettingsError", "settings_error"]

S = TypeVar("S", bound="Settings")


class SettingsError(FieldError):
    """A settings value (or a settings file) is invalid; ``field`` is the dotted key."""


def settings_error(exc: ValidationError) -> SettingsError:
    """The first error of a pydantic ``ValidationError`` as a :class:`SettingsError`."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, SettingsError):  # a nested model's own error (its __init__ ran inside validation)
        return SettingsError(f"{loc}.{inner.field}" if loc else inner.field, inner.detail)
    field = loc or "settings"
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return SettingsError(field, "unknown key")
    if kind == "missing":
        return SettingsError(field, "required")
    detail = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    value = first.get("input")
    if not isinstance(value, (dict, list)):
        detail = f"{detail} (got {value!r})"
    return SettingsError(field, detail)


class Settings(BaseModel):
    """Base of the settings models (see the module docstring for the contract)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise settings_error(exc) from None

    @classmethod
    def from_dict(cls: type[S], data: Any) -> S:
        """Validate a mapping (e.g. parsed JSON); raise :class:`SettingsError`."""
        if not isinstance(data, dict):
            raise SettingsError(cls.__name__, f"expected a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise settings_error(exc) from None

    @classmethod
    def load(cls: type[S], path: str | Path) -> S:
        """Read a JSON settings file; a missing file or bad JSON is a :class:`SettingsError` too."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SettingsError(str(path), f"cannot read settings file: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SettingsError(str(path), f"not JSON: {exc}") from None
        return cls.from_dict(data)

    def dump(self) -> dict[str, Any]:
        """Plain JSON types (addresses as ``"HOST:PORT"``, paths as strings)."""
        return self.model_dump(mode="json")

    def save(self, path: str | Path) -> Path:
        """Write :meth:`dump` as JSON (mode 0644, like every output file; settings hold no secret)."""
        path = Path(path)
        path.write_text(json.dumps(self.dump(), indent=2) + "\n")
        path.chmod(0o644)
        return path

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` applied and validated again."""
        return type(self)(**{**self.model_dump(), **changes})
