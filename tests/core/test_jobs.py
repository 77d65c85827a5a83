"""The job lifecycle table: every legal transition, and every illegal one raises naming job, input and state."""

import pytest

from panama.core.jobs import FINAL, TRANSITIONS, JobInput, JobLifecycle, JobState, JobStateError, next_state

S, In = JobState, JobInput


def test_a_job_that_runs_and_completes():
    job = JobLifecycle("j1")
    assert job.state is S.REGISTERING
    assert job.fire(In.ALL_IN) is S.INSTALLING
    assert job.fire(In.INSTALLED) is S.RUNNING
    assert job.fire(In.ALL_LEFT) is S.COMPLETED
    assert job.final and [s for _, s in job.history] == [S.INSTALLING, S.RUNNING, S.COMPLETED]


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", list(In))
def test_every_pair_is_either_in_the_table_or_raises(state, event):
    if (state, event) in TRANSITIONS:
        assert next_state("x", state, event) is TRANSITIONS[(state, event)]
        return
    with pytest.raises(JobStateError) as info:
        next_state("my-job", state, event)
    msg = str(info.value)
    assert "'my-job'" in msg and f"input {event.value}" in msg and f"state {state.value}" in msg
    assert info.value.state is state and info.value.event is event


def test_final_states_accept_nothing_and_install_cannot_be_deleted_midway():
    for state in FINAL:
        assert not any(s is state for s, _ in TRANSITIONS)
    assert (S.INSTALLING, In.DELETED) not in TRANSITIONS
    job = JobLifecycle("k", S.INSTALLING)
    assert not job.accepts(In.DELETED)
    with pytest.raises(JobStateError):
        job.fire(In.DELETED)
    assert job.state is S.INSTALLING  # an illegal input changes nothing


def test_a_recovered_job_is_running_and_a_failed_rank_fails_the_job():
    job = JobLifecycle("r")
    assert job.fire(In.RECOVERED) is S.RUNNING
    assert job.fire(In.RANK_FAILED) is S.FAILED
