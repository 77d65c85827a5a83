"""A rank's heartbeat to the controller (a background thread of :class:`Communicator`).

Each beat (``POST /v1/jobs/{job}/heartbeat``) carries the rank's progress: ``calls``
(allreduces completed) and, while one is under way, ``call`` (its index) and ``elems``
(its size), so the controller can name a size mismatch between ranks. The answer carries
the job's state and the ranks that left cleanly (``left``: rank -> calls completed).

What ends the job for this rank (:attr:`Heartbeat.failure`) is only the controller's word:
a state other than ``running``, or an answer that says the job or rank is unknown. A
controller that is unreachable or answers 503/5xx (busy, restarting, a connection flood)
is retried with back-off (0.1 s doubling up to ``interval_s``), logged once when it
starts and once when it ends (the communicator sets ``interval_s`` to at most a quarter
of the controller's ``heartbeat_timeout_s`` and each attempt's timeout to half of it, so
the retries outlast a momentary crowd at the controller); the rank's own ``timeout_s`` bounds its waits meanwhile.
:attr:`Heartbeat.unreachable_since` lets the communicator conclude sooner when the
cluster is gone altogether (controller refuses connections *and* the first hop answers
ICMP port unreachable).

While a call is slow (:meth:`Heartbeat.hurry`), beats go every ``HURRY_S`` so that a
mismatch or a peer's clean leave is known within a second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from panama.runtime.control.client import HttpError, error_text
from panama.runtime.control.messages import HeartbeatReply, ProgressBody

log = logging.getLogger("panama.communicator")

HURRY_S = 0.25  # beat interval while a call is slow
CLUSTER_GONE_S = 1.5  # controller unreachable and first hop port-unreachable this long: the cluster is gone
FIRST_RETRY_S = 0.1


class Heartbeat:
    """The heartbeat thread of one rank (see the module docstring)."""

    def __init__(
        self,
        post: Callable[[ProgressBody], HeartbeatReply],
        progress: Callable[[], ProgressBody],
        interval_s: float,
        name: str,
        who: str,
        job_label: str,
    ):
        self._post = post  # HttpError: status None when the controller cannot be reached, else its answer
        self._progress = progress
        self.interval_s = interval_s
        self.who = who
        self.job_label = job_label  # "job NAME (job_id N)"
        self.failure: str | None = None
        self.peers_left: dict[int, int | None] = {}
        self.unreachable_since: float | None = None
        self.unreachable_error = ""
        self.busy = 0  # answers 503/5xx retried
        self.alert = False  # True once failure, peers_left or unreachable_since is set (a cheap check)
        self._hurry = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def hurry(self, on: bool = True) -> None:
        """Beat every ``HURRY_S`` (now first) while ``on``: a call is taking long."""
        if on and not self._hurry:
            self._hurry = True
            self._wake.set()
        elif not on:
            self._hurry = False

    def stop_reason(self, rank: int, calls: int, refused_at: float, first_hop: str | None) -> str | None:
        """Why rank ``rank``, in its allreduce number ``calls + 1``, cannot complete it, else None.

        The controller ended the job; a peer left cleanly after fewer calls (its contribution
        to this one never comes); or the controller has been unreachable for
        ``CLUSTER_GONE_S`` while the first hop answered ICMP port unreachable lately
        (``refused_at``, monotonic).
        """
        if self.failure is not None:
            return self.failure
        for peer, done in sorted(self.peers_left.items()):
            if peer != rank and done is not None and done <= calls:
                return (
                    f"rank {peer} left the job cleanly after {done} allreduce(s); this rank's allreduce "
                    f"#{calls + 1} needs its contribution and cannot complete"
                )
        since = self.unreachable_since
        now = time.monotonic()
        if since is not None and now - since >= CLUSTER_GONE_S and now - refused_at < CLUSTER_GONE_S:
            return (
                f"the cluster is gone: the controller has been unreachable for {now - since:.1f} s "
                f"({self.unreachable_error}) and first-hop switch {first_hop} answers ICMP port unreachable "
                "(no daemon on its port: did the process that started the cluster exit?)"
            )
        return None

    def _run(self) -> None:
        retry = FIRST_RETRY_S
        wait = self.interval_s
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            reply: HeartbeatReply | None = None
            answer: Any = None  # an error answer's body
            try:
                reply = self._post(self._progress())
            except HttpError as exc:
                status, answer = exc.status, exc.body
                if status is None:
                    if self.unreachable_since is None:
                        self.unreachable_since = time.monotonic()
                        self.alert = True
                        log.warning("%s: controller unreachable, retrying: %s", self.who, exc)
                    self.unreachable_error = str(exc)
                    wait, retry = retry, min(retry * 2, self.interval_s)
                    continue
                if status == 429 or status >= 500:  # busy or restarting: not the job's end
                    self.busy += 1
                    if self.busy == 1 or self.busy % 100 == 0:
                        log.warning(
                            "%s: controller answered HTTP %d (retrying): %s", self.who, status, error_text(answer)
                        )
                    wait, retry = retry, min(retry * 2, self.interval_s)
                    continue
            if self.unreachable_since is not None:
                log.warning(
                    "%s: controller reachable again after %.1f s", self.who, time.monotonic() - self.unreachable_since
                )
            self.unreachable_since = None
            retry = FIRST_RETRY_S
            wait = min(HURRY_S, self.interval_s) if self._hurry else self.interval_s
            if reply is not None:
                if reply.left:
                    self.peers_left = {int(r): c for r, c in reply.left.items() if r.isdigit()}
                    self.alert = self.alert or bool(self.peers_left)
                if reply.state == "running":
                    continue
            reason = reply.reason if reply is not None else error_text(answer)
            self.failure = f"controller ended {self.job_label}: {reason}"
            self.alert = True
            return
