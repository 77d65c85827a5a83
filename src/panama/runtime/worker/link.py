"""A rank's requests to the controller: its job's paths, the credential each carries, the
registration that waits out a busy controller, and the job token of a process's runs.

Registration carries the cluster token when the process has one (a new job is admitted
by it) and the run's job token in its body; every other request of the job (heartbeat,
leave, unicast, reading the job) carries the job token only (docs/runtime.md, "Trust
model").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from panama.runtime.control.client import HttpError, call, job_path
from panama.runtime.control.messages import Body, RegisterBody, RegisterReply, Reply
from panama.runtime.control.tokens import new_token
from panama.runtime.net.udp import Address

R = TypeVar("R", bound=Reply)
BUSY_RETRY_S = 0.2  # between registrations refused by a controller at its connection limit

_PROCESS_JOB_TOKEN: tuple[int, str] | None = None  # (pid, token): a forked child draws its own
_PROCESS_JOB_TOKEN_LOCK = threading.Lock()


def process_job_token() -> str:
    """The job token of this process's runs: drawn once per process (a forked child draws
    its own), so the ranks of a job in threads of one process are one run; ranks in other
    processes share theirs through ``job_token=`` or ``$PANAMA_JOB_TOKEN`` (the torch
    backend through its store; ``panama train`` and ``panama bench allreduce`` hand one to
    their workers)."""
    global _PROCESS_JOB_TOKEN
    pid = os.getpid()
    with _PROCESS_JOB_TOKEN_LOCK:  # ranks in threads ask at once
        if _PROCESS_JOB_TOKEN is None or _PROCESS_JOB_TOKEN[0] != pid:
            _PROCESS_JOB_TOKEN = (pid, new_token())
        return _PROCESS_JOB_TOKEN[1]


class ControllerLink:
    """The requests of one rank of job ``job`` to the controller at ``controller``
    (``token``: the cluster's, or None; ``job_token``: the run's, default
    :func:`process_job_token`)."""

    def __init__(self, controller: Address, job: str, token: str | None, job_token: str | None):
        self.controller = controller
        self.job_path = f"/v1/jobs/{job_path(job)}"
        self.token = token
        self.job_token = job_token or process_job_token()

    def path(self, action: str) -> str:
        """The job's path plus ``/action``, or plus a ``?query``."""
        return f"{self.job_path}{action}" if action.startswith("?") else f"{self.job_path}/{action}"

    def call(self, method: str, action: str, body: Body | None, reply: type[R], timeout_s: float) -> R:
        """``method`` on the job's path, answered 200 with ``reply``; HttpError otherwise
        (``status`` None: unreachable)."""
        bearer = self.token if action == "register" and self.token else self.job_token
        path = self.path(action)
        return call(self.controller, method, path, body, reply, timeout_s=timeout_s, what="controller", token=bearer)

    def register(self, make_body: Callable[[float], RegisterBody], timeout_s: float) -> RegisterReply:
        """``POST register`` with ``make_body(wait_s)``, asked again while the controller is at
        its connection limit (503 before it read the request) until ``timeout_s`` has
        passed; HttpError for any other refusal or when it cannot be reached."""
        deadline = time.monotonic() + timeout_s
        wait_s = timeout_s
        while True:
            try:
                return self.call("POST", "register", make_body(wait_s), RegisterReply, timeout_s + 5.0)
            except HttpError as exc:
                if not exc.busy or time.monotonic() + BUSY_RETRY_S >= deadline:
                    raise
            time.sleep(BUSY_RETRY_S)
            wait_s = max(0.5, deadline - time.monotonic())
