"""Start-up of a daemon process, shared by the switch daemon and the controller service.

:func:`prepare` applies a :class:`~panama.runtime.settings.ProcessSettings` (logging to
stderr at its level, the ``exit_with`` lifeline) and returns the control API's bearer
token (from ``token_file``, else ``$PANAMA_TOKEN``; a daemon never serves without one).
:func:`main_from_file` is the ``python -m ... CONFIG.json`` entry point of both daemons:
it loads the settings file and runs the daemon; a bad file, a bad value or a missing token
is one line on stderr naming the field, exit code 2, and a bind failure exit code 1 — never
a traceback. Their logs are one line per record: :class:`OneLineFormatter` escapes control
characters in every message (a job name or an address a client sent cannot forge a line).
:func:`write_ready_file` is how both tell their supervisor they listen.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from panama import environment
from panama.core.errors import FieldError
from panama.runtime.control.tokens import TOKEN_ENV, check_token, read_token_file
from panama.runtime.files import write_private_file
from panama.runtime.lifeline import exit_with as tie_to
from panama.runtime.settings import ProcessSettings

P = TypeVar("P", bound=ProcessSettings)


def process_token(settings: ProcessSettings) -> str:
    """The token in ``token_file``, else ``$PANAMA_TOKEN``; :class:`FieldError` if neither."""
    if settings.token_file is not None:
        return read_token_file(settings.token_file)
    env = environment.token()
    if env is not None:
        return check_token(env, TOKEN_ENV)
    raise FieldError(
        "token-file", f"required (or set ${TOKEN_ENV}): the control API only answers requests that carry its token"
    )


# C0 controls, DEL and C1 controls, written as Python escapes (\n, \x00, \x85, ...).
_CONTROL = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def one_line(text: str) -> str:
    """``text`` with every control character (newline, carriage return, NUL, escape, ...) and
    the Unicode line separators written as escapes: what it prints is one line."""
    return text.translate(_CONTROL)


class OneLineFormatter(logging.Formatter):
    """A formatter whose messages are one line each: :func:`one_line` on the message with its
    arguments filled in (fields from requests: job names, addresses, errors). A traceback
    appended to a record stays as Python prints it."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = one_line(record.message)
        return super().formatMessage(record)


def write_ready_file(path: str, info: dict) -> None:
    """Tell a supervisor that a daemon listens: ``info`` (its addresses, pid) as JSON in
    ``path``, written atomically, mode 0600 (:func:`~panama.runtime.files.write_private_file`)."""
    write_private_file(path, json.dumps(info))


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])


def prepare(settings: ProcessSettings) -> str:
    """Token first (so a refused start changes nothing), then logging and the lifeline."""
    token = process_token(settings)
    setup_logging(settings.log_level)
    if settings.exit_with is not None:
        tie_to(settings.exit_with)
    return token


def main_from_file(argv: Sequence[str], settings_type: type[P], run: Callable[[P, str], None], program: str) -> int:
    """``program CONFIG.json``: load ``settings_type`` from the file, :func:`prepare`, ``run``.

    Returns the exit code (0 after a clean stop, 1 when the daemon cannot bind, 2 for bad
    input), printing one line on stderr for each failure.
    """
    if len(argv) != 1:
        usage = f"usage: {program} CONFIG.json (a {settings_type.__name__} as JSON, see docs/runtime.md)"
        print(usage, file=sys.stderr)
        return 2
    try:
        settings = settings_type.load(argv[0])
        run(settings, prepare(settings))
    except FieldError as exc:  # the file, the token, or a file the daemon reads (a controller's cluster file)
        print(f"{program}: {exc.field}: {exc.detail}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{program}: cannot bind: {exc}", file=sys.stderr)
        return 1
    return 0
