"""Tie a daemon's life to another process (the one that started it).

Daemons started by :class:`panama.runtime.cluster.LocalCluster` for a test or a training
run get ``--exit-with PID``: if that process disappears without stopping them (killed,
crashed), they stop themselves instead of lingering on their ports. ``panama cluster
up`` starts detached daemons without it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

from panama.core.errors import FieldError

log = logging.getLogger("panama.lifeline")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - exists, owned by someone else
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def exit_with(pid: int, poll_s: float = 0.5) -> threading.Thread:
    """Send SIGTERM to this process (its normal shutdown path) once process ``pid`` is gone."""
    if pid <= 0:
        raise FieldError("exit-with", f"not a process id: {pid}")

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(poll_s):
            if not pid_alive(pid):
                log.warning("process %d that started this daemon is gone: shutting down", pid)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, name=f"exit-with-{pid}", daemon=True)
    thread.start()
    return thread
