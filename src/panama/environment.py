"""Every environment variable the package reads: named once, one typed reader each.

Each variable is a constant here (its name) and a function (its value, parsed and checked;
an unset or empty variable reads as "not given": None, or the reader's default). Every
other module reads the environment through these functions and names a variable, in a
message or in the environment it hands a child process, through these constants
(``tests/test_environment.py`` fails on a ``"PANAMA_..."`` string anywhere else). Two
exceptions: :mod:`panama._ext` reads ``PANAMA_NO_EXTENSIONS`` itself (``setup.py`` runs
it alone, standard library only; :data:`NO_EXTENSIONS` is its name), and settings and
help texts mention variables in prose.

A malformed value raises :class:`EnvError` (a :class:`~panama.core.errors.FieldError`
whose ``field`` is the variable's name). This module imports the standard library, the
error base, :mod:`panama._ext` and the address rule (:mod:`panama.addresses`, standard
library only), so every layer may use it.

PANAMA's own variables:

* ``PANAMA_CONTROLLER``: ``HOST:PORT`` of a running controller (workers, the torch backend);
* ``PANAMA_TOKEN``: the cluster's bearer token (clients; daemons without a token file);
* ``PANAMA_JOB_TOKEN``: the token of a worker's run, shared by its ranks (``Communicator``);
* ``PANAMA_JOB``: a worker's job name (``Communicator.from_env``);
* ``PANAMA_TIMEOUT_S``: bound of every wait of a worker, in seconds;
* ``PANAMA_SIZE_BYTES``: the gradient size a worker announces to admission;
* ``PANAMA_BIND_HOST``: the IPv4 address a worker binds (default: its route to the controller);
* ``PANAMA_UDP_OFFLOAD``: ``0`` (``off``, ``false``, ``no``) turns UDP GSO/GRO off everywhere;
* ``PANAMA_CLUSTER_STATE``: the state file of ``panama cluster up``;
* ``PANAMA_CODE_VERSION``: the code revision reports record (runs from an exported tree);
* ``PANAMA_NO_EXTENSIONS``: non-empty and not ``0``: run the pure-Python paths.

Set by torchrun, read by the worker library and the torch backend: ``RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``.
"""

from __future__ import annotations

import os
from pathlib import Path

from panama import _ext
from panama.addresses import is_ipv4, reachable
from panama.core.errors import FieldError

__all__ = [
    "BIND_HOST",
    "CLUSTER_STATE",
    "CODE_VERSION",
    "CONTROLLER",
    "EnvError",
    "JOB",
    "JOB_TOKEN",
    "LOCAL_WORLD_SIZE",
    "NO_EXTENSIONS",
    "RANK",
    "RESTART_COUNT",
    "RUN_ID",
    "SIZE_BYTES",
    "TIMEOUT_S",
    "TOKEN",
    "UDP_OFFLOAD",
    "WORLD_SIZE",
    "bind_host",
    "cluster_state",
    "code_version",
    "controller",
    "job",
    "job_token",
    "local_world_size",
    "no_extensions",
    "rank",
    "restart_count",
    "run_id",
    "size_bytes",
    "timeout_s",
    "token",
    "udp_offload",
    "world_size",
]

CONTROLLER = "PANAMA_CONTROLLER"
TOKEN = "PANAMA_TOKEN"
JOB = "PANAMA_JOB"
JOB_TOKEN = "PANAMA_JOB_TOKEN"
TIMEOUT_S = "PANAMA_TIMEOUT_S"
SIZE_BYTES = "PANAMA_SIZE_BYTES"
BIND_HOST = "PANAMA_BIND_HOST"
UDP_OFFLOAD = "PANAMA_UDP_OFFLOAD"
CLUSTER_STATE = "PANAMA_CLUSTER_STATE"
CODE_VERSION = "PANAMA_CODE_VERSION"
NO_EXTENSIONS = _ext.ENV_VAR  # "PANAMA_NO_EXTENSIONS", named by the build helper
RANK = "RANK"
WORLD_SIZE = "WORLD_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
RUN_ID = "TORCHELASTIC_RUN_ID"
RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"

_OFF = ("0", "off", "false", "no")


class EnvError(FieldError):
    """An environment variable PANAMA reads is missing or malformed; ``field`` is its name."""


def _text(name: str) -> str | None:
    """The variable's value without surrounding blanks; None when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def controller() -> str | None:
    """``$PANAMA_CONTROLLER`` as given (``HOST:PORT``, checked by its reader in the worker library)."""
    return _text(CONTROLLER)


def token() -> str | None:
    """``$PANAMA_TOKEN``: the cluster's bearer token, or None."""
    return _text(TOKEN)


def job_token() -> str | None:
    """``$PANAMA_JOB_TOKEN``: the token of this worker's run (its ranks share it), or None."""
    return _text(JOB_TOKEN)


def job() -> str | None:
    """``$PANAMA_JOB``: the job name a worker joins, or None."""
    return _text(JOB)


def timeout_s(default: float) -> float:
    """``$PANAMA_TIMEOUT_S``: seconds, > 0 (``default`` when unset)."""
    value = _text(TIMEOUT_S)
    if value is None:
        return default
    try:
        x = float(value)
    except ValueError:
        raise EnvError(TIMEOUT_S, f"must be a number of seconds, got {value!r}") from None
    if not x > 0:
        raise EnvError(TIMEOUT_S, f"must be > 0, got {value!r}")
    return x


def size_bytes() -> int | None:
    """``$PANAMA_SIZE_BYTES``: the gradient size announced to admission (bytes, >= 0), or None."""
    value = _text(SIZE_BYTES)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise EnvError(SIZE_BYTES, f"must be an integer number of bytes, got {value!r}") from None
    if n < 0:
        raise EnvError(SIZE_BYTES, f"must be >= 0, got {n}")
    return n


def bind_host() -> str | None:
    """``$PANAMA_BIND_HOST``: an IPv4 address of this machine daemons can send results to, or None."""
    value = _text(BIND_HOST)
    if value is None:
        return None
    if not is_ipv4(value):
        raise EnvError(BIND_HOST, f"expected an IPv4 address of this machine, got {value!r}")
    if not reachable(value):  # the one rule: panama.addresses
        raise EnvError(BIND_HOST, f"{value} is not an address daemons can send results to")
    return value


def udp_offload() -> bool:
    """``$PANAMA_UDP_OFFLOAD``: False when it is ``0``, ``off``, ``false`` or ``no`` (GSO/GRO off)."""
    return (_text(UDP_OFFLOAD) or "1").lower() not in _OFF


def cluster_state() -> Path | None:
    """``$PANAMA_CLUSTER_STATE``: the state file of ``panama cluster up``, or None (the default one)."""
    value = _text(CLUSTER_STATE)
    return None if value is None else Path(value)


def code_version() -> str | None:
    """``$PANAMA_CODE_VERSION``: the code revision to record instead of asking git, or None."""
    return _text(CODE_VERSION)


def no_extensions() -> bool:
    """``$PANAMA_NO_EXTENSIONS``: True when it asks for the pure-Python paths (read by :mod:`panama._ext`)."""
    return _ext.no_extensions()


def _int(name: str) -> int | None:
    value = _text(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise EnvError(name, f"must be an integer, got {value!r}") from None


def rank() -> int | None:
    """``$RANK`` (torchrun): this process's rank, or None."""
    return _int(RANK)


def world_size() -> int | None:
    """``$WORLD_SIZE`` (torchrun): the number of ranks, or None."""
    return _int(WORLD_SIZE)


def local_world_size() -> int | None:
    """``$LOCAL_WORLD_SIZE`` (torchrun): the ranks on this host, or None."""
    return _int(LOCAL_WORLD_SIZE)


def run_id() -> str | None:
    """``$TORCHELASTIC_RUN_ID`` (torchrun): the run's id, or None outside torchrun."""
    return _text(RUN_ID)


def restart_count() -> str:
    """``$TORCHELASTIC_RESTART_COUNT`` (torchrun): the elastic restart count as given (``"0"`` when unset)."""
    return _text(RESTART_COUNT) or "0"
