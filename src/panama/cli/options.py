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


def _unwrap(annotation: Any) -> Any:
    """The annotation without ``None`` and ``Annotated`` (``int | None`` -> ``int``)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else str
        else:
            return annotation


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
    aliases: Mapping[str, Iterable[str]] | None = None,
) -> Callable[[Callable], Callable]:
    """Decorate a click command with one option per field of ``model`` but ``exclude``
    (see the module docstring); ``aliases`` gives fields older option names."""
    aliases = dict(aliases or {})
    fields = [(n, f) for n, f in model.model_fields.items() if n not in set(exclude)]

    def decorate(command: Callable) -> Callable:
        for name, info in reversed(fields):
            annotation = _unwrap(info.annotation)
            names = [option_name(name), *aliases.get(name, ()), name]
            kwargs: dict[str, Any] = {"help": info.description or ""}
            default = None if info.is_required() else info.get_default(call_default_factory=True)
            if annotation is bool:
                names[0] = f"{option_name(name)}/--no-{name.replace('_', '-')}"
                kwargs.update(default=bool(default), show_default=True)
            elif isinstance(default, (dict, list)):
                continue  # structured settings come from files, not options
            else:
                kwargs.update(type=_click_type(annotation), required=info.is_required())
                if not info.is_required():  # None: not given (click's own "unset" is not None)
                    kwargs.update(default=_shown_default(default), show_default=default is not None)
            command = click.option(*names, **kwargs)(command)
        return command

    return decorate


def model_from_options(model: type[S], values: Mapping[str, Any], **extra: Any) -> S:
    """``model`` from the options' ``values`` (fields only; others ignored) and ``extra``;
    a bad value is a usage error naming its option."""
    data = {name: values[name] for name in model.model_fields if name in values}
    data.update(extra)
    try:
        return model(**data)
    except SettingsError as exc:
        raise option_error(exc) from None


def option_error(exc: SettingsError) -> click.UsageError:
    """A settings error as a usage error naming the option (``batch`` -> ``--batch``)."""
    field = exc.field.split(".")[0]
    return usage_error(option_name(field) if field.isidentifier() else exc.field, exc.detail)
