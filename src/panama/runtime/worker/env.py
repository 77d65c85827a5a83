"""Where a worker finds its PANAMA cluster and job: environment variables and job names.

Read by the ``panama`` torch.distributed backend (:mod:`panama.distributed`) and by
:meth:`Communicator.from_env <panama.runtime.worker.communicator.Communicator.from_env>` (a PANAMA
communicator for programs that do not use torch.distributed):

- ``PANAMA_CONTROLLER``: ``HOST:PORT`` of a running controller (``panama cluster up``,
  ``panama controller serve``); unset, the backend starts a local cluster on rank 0;
- ``PANAMA_TOKEN``: the cluster's bearer token (``panama cluster status --json``);
- ``PANAMA_JOB_TOKEN``: the token of the run, shared by its ranks (read by ``Communicator``
  itself; ranks in several processes need one: a job name binds one run);
- ``PANAMA_JOB``: the job name (``Communicator.from_env`` only; the backend makes its own);
- ``PANAMA_TIMEOUT_S``: bound of every PANAMA wait (registration, one allreduce); the one
  rule (:func:`timeout_s`): this variable when set, else :class:`CommunicatorConfig`'s
  ``timeout_s`` default, lowered to the caller's own bound (the torch group's timeout) when
  that is shorter;
- ``PANAMA_SIZE_BYTES``: the gradient size announced to the controller's admission
  (default: the size of the first all_reduce);
- ``PANAMA_BIND_HOST``: the IPv4 address of this machine the rank's UDP socket binds, the
  address its leaf daemon sends results to (default: the source address the kernel picks
  to reach ``PANAMA_CONTROLLER``, so 127.0.0.1 for a controller on loopback and this
  machine's LAN address for one on another machine; see docs/several-machines.md);
- ``RANK``, ``WORLD_SIZE``, ``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``: set
  by torchrun.

:func:`communicator_config` gathers the variables that are communicator settings into one
:class:`~panama.runtime.settings.CommunicatorConfig` (what the backend builds its
communicators from); :func:`communicator_kwargs_from_env` adds the rank's identity for
:meth:`Communicator.from_env`. Which cluster a process uses (this controller, or a local
one it starts): :func:`panama.runtime.cluster.find_or_start_cluster`.
"""

from __future__ import annotations

import re
import socket
from typing import Any

from panama import environment
from panama.environment import EnvError
from panama.runtime.control.messages import JOB_NAME_MAX
from panama.runtime.net.udp import parse_addr
from panama.runtime.settings import CommunicatorConfig

__all__ = [
    "CONTROLLER_ENV",
    "EnvError",
    "bind_host_for",
    "communicator_config",
    "communicator_kwargs_from_env",
    "controller_from_env",
    "job_name",
    "sanitize",
    "size_hint_from_env",
    "timeout_s",
    "token_from_env",
]

CONTROLLER_ENV = environment.CONTROLLER  # the names live in panama.environment

_JOB_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def controller_from_env() -> str | None:
    """``$PANAMA_CONTROLLER`` checked as ``HOST:PORT``, or None when unset or empty."""
    value = environment.controller()
    if value is None:
        return None
    try:
        parse_addr(value, field=environment.CONTROLLER)
    except ValueError as exc:
        raise EnvError(environment.CONTROLLER, getattr(exc, "detail", str(exc))) from None
    return value


def token_from_env() -> str | None:
    """``$PANAMA_TOKEN``, or None."""
    return environment.token()


def bind_host_for(controller: str) -> str:
    """The address a rank's :class:`Communicator` binds: ``$PANAMA_BIND_HOST``, else the
    source address of this machine's route to ``controller`` (``HOST:PORT``).

    The kernel's choice for a UDP socket connected to the controller (nothing is sent):
    127.0.0.1 for a controller on loopback, as before; the address of the interface that
    reaches it otherwise, which the switch daemons on that network can send results to. Where
    the daemons are on another network than the controller, set ``$PANAMA_BIND_HOST``. No
    route (or an unresolvable host) gives 127.0.0.1: registration then fails naming the
    controller.
    """
    value = environment.bind_host()
    if value is not None:
        return value
    try:
        host, port = parse_addr(controller, field=CONTROLLER_ENV)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port or 9))  # a route lookup only: UDP connect sends nothing
            return s.getsockname()[0]
    except (OSError, ValueError):  # a malformed controller is refused by the Communicator, naming it
        return "127.0.0.1"


def timeout_s(limit_s: float | None = None) -> float:
    """The bound of every PANAMA wait of this process: ``$PANAMA_TIMEOUT_S`` (> 0) when set,
    else :class:`CommunicatorConfig`'s default ``timeout_s``, lowered to ``limit_s`` (a bound
    the caller must not outlast, e.g. the torch group's timeout) when that is shorter."""
    default = CommunicatorConfig.model_fields["timeout_s"].default
    if limit_s is not None:
        default = min(default, limit_s)
    return environment.timeout_s(default)


def communicator_config(controller: str, limit_s: float | None = None, **overrides: Any) -> CommunicatorConfig:
    """The :class:`CommunicatorConfig` of a rank of this process reaching ``controller``:
    ``timeout_s`` by :func:`timeout_s` (``limit_s``), ``size_bytes`` from
    ``$PANAMA_SIZE_BYTES``, ``bind_host`` by :func:`bind_host_for`; ``overrides`` (any other
    field, or these) win. A malformed variable raises :class:`EnvError` naming it."""
    fields: dict[str, Any] = {
        "timeout_s": timeout_s(limit_s),
        "size_bytes": size_hint_from_env(),
        "bind_host": bind_host_for(controller),
    }
    fields.update(overrides)
    return CommunicatorConfig(**fields)


def size_hint_from_env() -> int | None:
    """``$PANAMA_SIZE_BYTES`` (>= 0), or None."""
    return environment.size_bytes()


def _required_int(name: str, value: int | None) -> int:
    if value is None:
        raise EnvError(name, "not set (run under torchrun, or set it)")
    return value


def sanitize(part: str, limit: int = 48) -> str:
    """``part`` reduced to job-name characters (letters, digits, ``. _ -``), at most ``limit``."""
    return _JOB_CHARS.sub("-", part).strip("-._")[:limit]


def job_name(group: str, nonce: str) -> str:
    """The PANAMA job name of one process group in one run.

    ``torch-<run id>-r<restart>-<nonce>-g<group>``: the torchrun run id (``TORCHELASTIC_RUN_ID``,
    ``none`` outside torchrun), the elastic restart count, a random ``nonce`` drawn by the
    group's rank 0 for this run (so a rerun with a fixed ``--rdzv-id``, or one after a
    crash, never meets the old job's name), and the torch group name.
    """
    run = sanitize(environment.run_id() or "none")
    restart = sanitize(environment.restart_count(), 8) or "0"
    name = f"torch-{run}-r{restart}-{sanitize(nonce, 16)}-g{sanitize(group, 40) or 'x'}"
    return name[:JOB_NAME_MAX]


def communicator_kwargs_from_env(**overrides: Any) -> dict[str, Any]:
    """The :class:`~panama.runtime.worker.communicator.Communicator` arguments of this process, read
    from the environment (what :meth:`Communicator.from_env` passes).

    Controller ``$PANAMA_CONTROLLER`` (required), token ``$PANAMA_TOKEN``, job
    ``$PANAMA_JOB`` (else ``torch-<TORCHELASTIC_RUN_ID>``, unique per torchrun run), rank
    ``$RANK``, world size ``$WORLD_SIZE``, timeout ``$PANAMA_TIMEOUT_S``, size hint
    ``$PANAMA_SIZE_BYTES``, bind address ``$PANAMA_BIND_HOST`` (else :func:`bind_host_for`
    the controller). Keyword arguments override any of them and pass any other
    :class:`Communicator` option. A missing or malformed variable raises :class:`EnvError`
    naming it.
    """
    kw: dict[str, Any] = {}
    if "controller" not in overrides:
        controller = controller_from_env()
        if controller is None:
            raise EnvError(
                environment.CONTROLLER, "not set (HOST:PORT of the PANAMA controller, e.g. from panama cluster status)"
            )
        kw["controller"] = controller
    if "job" not in overrides:
        job = environment.job()
        if job is None:
            run = environment.run_id()
            if run is None:
                raise EnvError(environment.JOB, "not set (a job name shared by the ranks; or run under torchrun)")
            job = f"torch-{sanitize(run)}"
        kw["job"] = job
    if "rank" not in overrides:
        kw["rank"] = _required_int(environment.RANK, environment.rank())
    if "world_size" not in overrides:
        kw["world_size"] = _required_int(environment.WORLD_SIZE, environment.world_size())
    if "token" not in overrides:
        kw["token"] = token_from_env()
    controller = overrides.get("controller", kw.get("controller"))
    fields = set(CommunicatorConfig.model_fields)
    config = communicator_config(controller, **{k: v for k, v in overrides.items() if k in fields})
    kw.update({k: v for k, v in dict(config).items() if k in ("timeout_s", "size_bytes", "bind_host")})
    kw.update(overrides)
    return kw
