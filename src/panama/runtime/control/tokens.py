"""Bearer tokens of the control plane: the cluster's operator token and each job's own.

Token flow (docs/runtime.md, "Trust model"): every control request carries
``Authorization: Bearer <token>``. The *cluster token* (made by :func:`new_token` for a
local cluster, read from ``--token-file`` or ``$PANAMA_TOKEN`` by the daemons) belongs to
operators; a *job token* is drawn by the controller when a job's first rank registers and
is what that job's other requests need. Clients take ``token=`` or, when it is None,
``$PANAMA_TOKEN`` (:func:`resolve_token`).
"""

from __future__ import annotations

import hmac
import re
import secrets
import stat
from pathlib import Path

from panama import environment
from panama.core.errors import FieldError

__all__ = [
    "TOKEN_BYTES",
    "JOB_TOKEN_ENV",
    "TOKEN_ENV",
    "check_token",
    "new_token",
    "read_token_file",
    "resolve_job_token",
    "resolve_token",
    "same_token",
]

TOKEN_ENV = environment.TOKEN  # named in panama.environment
JOB_TOKEN_ENV = environment.JOB_TOKEN
TOKEN_BYTES = 32  # 256 bits of randomness, 43 url-safe characters
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,512}$")


def new_token() -> str:
    """A fresh random secret (a cluster's, or a job's)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def check_token(token: str, field: str = "token") -> str:
    """``token`` when it has a token's shape; :class:`FieldError` naming ``field`` otherwise."""
    if not isinstance(token, str) or not _TOKEN_RE.match(token):
        raise FieldError(field, "expected 16-512 characters of [A-Za-z0-9._~+/=-]")
    return token


def same_token(got: str | bytes | None, expected: str) -> bool:
    """Whether ``got`` is ``expected``, compared in constant time (False for None)."""
    if got is None:
        return False
    raw = got if isinstance(got, bytes) else got.encode("utf-8", "replace")
    return hmac.compare_digest(raw, expected.encode())


def resolve_job_token(token: str | None) -> str | None:
    """``token``, or ``$PANAMA_JOB_TOKEN`` when it is None (None if neither is set)."""
    if token is not None:
        return token
    return environment.job_token()


def resolve_token(token: str | None) -> str | None:
    """``token``, or ``$PANAMA_TOKEN`` when it is None (None if neither is set)."""
    if token is not None:
        return token
    return environment.token()


def read_token_file(path: str | Path) -> str:
    """The token in ``path`` (surrounding whitespace ignored); refuses files others can read."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text().strip()
    except OSError as exc:
        raise FieldError("token-file", f"cannot read {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise FieldError("token-file", f"{path} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    return check_token(text, "token-file")
