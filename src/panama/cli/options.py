"""Command-line options derived from settings models (``panama.settings``): declared once.

``model_options(Model)`` is a decorator that adds one click option per field of
``Model``: the option ``--a-b`` for the field ``a_b`` (extra, older names from
``aliases``), its type from the annotation (``int``, ``float``, ``str``, ``Path``,
``Literal[...]`` as a choice, ``X | None`` as ``X`` with no default, addresses as
``HOST:PORT`` text), its default from the field (shown in ``--help``) and its help text
from the field's description. ``model_from_options(Model, values)`` validates what the
options gave with the model and turns a :class:`~panama.settings.SettingsError` into a
one-line usage error that names the option (exit code 2).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from panama.cli.common import usage_error
from panama.settings import Settings, SettingsError

__all__ = ["model_options", "model_from_options", "option_name"]

S = TypeVar("S", bound=Settings)


def option_name(field: str) -> str:
    """``packet_memory`` -> ``--packet-memory``."""
    return "--" + field.replace("_", "-")


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``None`` and ``Annotated``; and whether None was allowed."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            annotation = args[0] if len(args) == 1 else str
        else:
            return annotation, optional


def _click_type(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(annotation)], case_sensitive=False)
    if annotation in (int, float, str):
        return annotation
    if annotation is Path:
        return click.Path(path_type=Path)
    return str  # addresses and other text the model parses


def _shown_default(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2:  # an address
        return f"{value[0]}:{value[1]}"
    return value


def model_options(
    model: type[Settings],
    *,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
    aliases: Mapping[str, Iterable[str]] | None = None,
    defaults: Mapping[str, Any] | None = None,
    required: Iterable[str] = (),
) -> Callable[[Callable], Callable]:
    """Decorate a click command with one option per field of ``model`` (see the module docstring).

    ``defaults`` replaces a field's default for this command only (``panama cluster up``
    has other defaults than the daemons it starts); ``required`` fields must be given.
    """
    skip = set(exclude)
    keep = None if only is None else list(only)
    aliases = dict(aliases or {})
    defaults = dict(defaults or {})
    required = set(required)
    fields = [(n, f) for n, f in model.model_fields.items() if n not in skip and (keep is None or n in keep)]
    if keep is not None:
        fields.sort(key=lambda item: keep.index(item[0]))

    def decorate(command: Callable) -> Callable:
        for name, info in reversed(fields):
            annotation, optional = _unwrap(info.annotation)
            names = [option_name(name), *aliases.get(name, ()), name]
            kwargs: dict[str, Any] = {"help": info.description or ""}
            if name in defaults:
                default = defaults[name]
            elif info.is_required():
                default = None
            else:
                default = info.get_default(call_default_factory=True)
            must = name in required or (info.is_required() and name not in defaults)
            if annotation is bool:
                names[0] = f"{option_name(name)}/--no-{name.replace('_', '-')}"
                kwargs.update(default=bool(default), show_default=True)
            elif isinstance(default, (dict, list)):
                continue  # structured settings come from files, not options
            else:
                kwargs["type"] = _click_type(annotation)
                kwargs["required"] = must
                if default is not None:
                    kwargs.update(default=_shown_default(default), show_default=True)
                elif optional and not must:
                    kwargs["default"] = None
            command = click.option(*names, **kwargs)(command)
        return command

    return decorate


def model_from_options(model: type[S], values: Mapping[str, Any], prefix: str = "", **extra: Any) -> S:
    """``model`` from the options' ``values`` (fields only; others ignored) and ``extra``;
    a bad value is a usage error naming its option."""
    data = {name: values[name] for name in model.model_fields if name in values}
    data.update(extra)
    try:
        return model(**data)
    except SettingsError as exc:
        raise option_error(exc, prefix) from None


def option_error(exc: SettingsError, prefix: str = "") -> click.UsageError:
    """A settings error as a usage error naming the option (``switch.batch`` -> ``--batch``)."""
    field = exc.field.removeprefix(prefix).split(".")[0]
    return usage_error(option_name(field) if field.isidentifier() else exc.field, exc.detail)
