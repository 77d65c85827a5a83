"""The life of one job at the controller, as a pure state machine.

Rules (the whole table is :data:`TRANSITIONS`; anything not in it raises
:class:`JobStateError` naming the job, the input and the state)::

    state         input          -> state       who fires it
    registering   all_in         -> installing  last rank registered: admission starts
    registering   abandoned      -> failed      every waiting rank gave up (barrier timeout)
    registering   recovered      -> running     a restarted controller found the job running
    installing    installed      -> running     every daemon of the trees accepted it
    installing    refused        -> refused     the core controller said host-based / no room
    installing    install_failed -> failed      a daemon refused or did not answer (rolled back)
    running       all_left       -> completed   every rank left without an error
    running       rank_failed    -> failed      a rank left after an error (its reason kept)
    running       rank_lost      -> failed      a rank stopped heart-beating
    running       switch_lost    -> failed      a daemon of the trees is down, lost the job, or its data plane died
    running       deleted        -> failed      an operator deleted it
    registering   deleted        -> failed      an operator deleted it before admission

``completed``, ``failed`` and ``refused`` are final. A registering job cannot be deleted
while it is ``installing`` (the admission in progress decides first). The module is
pure: no clock, no I/O; the controller service (``panama.runtime.controller.service``)
fires the inputs.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    REGISTERING = "registering"
    INSTALLING = "installing"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value

    @property
    def final(self) -> bool:
        return self in FINAL


class JobInput(str, Enum):
    ALL_IN = "all_in"
    ABANDONED = "abandoned"
    RECOVERED = "recovered"
    INSTALLED = "installed"
    REFUSED = "refused"
    INSTALL_FAILED = "install_failed"
    ALL_LEFT = "all_left"
    RANK_FAILED = "rank_failed"
    RANK_LOST = "rank_lost"
    SWITCH_LOST = "switch_lost"
    DELETED = "deleted"

    def __str__(self) -> str:
        return self.value


S, In = JobState, JobInput

TRANSITIONS: dict[tuple[JobState, JobInput], JobState] = {
    (S.REGISTERING, In.ALL_IN): S.INSTALLING,
    (S.REGISTERING, In.ABANDONED): S.FAILED,
    (S.REGISTERING, In.RECOVERED): S.RUNNING,
    (S.REGISTERING, In.DELETED): S.FAILED,
    (S.INSTALLING, In.INSTALLED): S.RUNNING,
    (S.INSTALLING, In.REFUSED): S.REFUSED,
    (S.INSTALLING, In.INSTALL_FAILED): S.FAILED,
    (S.RUNNING, In.ALL_LEFT): S.COMPLETED,
    (S.RUNNING, In.RANK_FAILED): S.FAILED,
    (S.RUNNING, In.RANK_LOST): S.FAILED,
    (S.RUNNING, In.SWITCH_LOST): S.FAILED,
    (S.RUNNING, In.DELETED): S.FAILED,
}

FINAL = frozenset({S.COMPLETED, S.FAILED, S.REFUSED})


class JobStateError(RuntimeError):
    """An input that the job's current state does not accept."""

    def __init__(self, job: str, event: JobInput, state: JobState):
        allowed = sorted(str(e) for (s, e) in TRANSITIONS if s is state)
        super().__init__(
            f"job {job!r}: input {event} is illegal in state {state} (allowed: "
            f"{', '.join(allowed) or 'none, final state'})"
        )
        self.job = job
        self.event = event
        self.state = state


def next_state(job: str, state: JobState, event: JobInput) -> JobState:
    """The state after ``event``; raises :class:`JobStateError` if the table has no such transition."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise JobStateError(job, event, state) from None


class JobLifecycle:
    """The state of one named job; :meth:`fire` moves it along :data:`TRANSITIONS`."""

    __slots__ = ("name", "state", "history")

    def __init__(self, name: str, state: JobState = JobState.REGISTERING):
        self.name = name
        self.state = state
        self.history: list[tuple[JobInput, JobState]] = []

    def accepts(self, event: JobInput) -> bool:
        return (self.state, event) in TRANSITIONS

    def fire(self, event: JobInput) -> JobState:
        self.state = next_state(self.name, self.state, event)
        self.history.append((event, self.state))
        return self.state

    @property
    def final(self) -> bool:
        return self.state in FINAL
