"""The controller's calls to switch daemons: what one unanswered call means (issue 35 item 4).

Before, one ``PUT /jobs/{id}`` timeout (a slow daemon, e.g. a blocking resolver in its
event loop) marked the daemon down, and the monitor then failed every other job on it
within a probe interval; the health probes already tolerated three timeouts in a row.
"""

from __future__ import annotations

import asyncio

from panama.runtime.control.client import HttpError
from panama.runtime.controller.daemons import PROBE_TIMEOUTS_DOWN
from panama.runtime.controller.jobs import Job
from panama.runtime.controller.service import ControllerService, load_cluster
from panama.runtime.settings import ControllerOptions


def _service() -> ControllerService:
    spec = load_cluster(
        {
            "leaves": 1,
            "spines": 1,
            "hosts_per_leaf": 2,
            "switches": {
                "leaf0": {"udp": "127.0.0.1:9", "control": "127.0.0.1:9"},
                "spine0": {"udp": "127.0.0.1:9", "control": "127.0.0.1:9"},
            },
        }
    )
    return ControllerService(spec, ControllerOptions(startup_wait_s=0))


def _install(service: ControllerService, exc: HttpError) -> list[str]:
    async def unanswered(addr, method, path, body=None):  # the client's answer to an unanswered call
        raise exc

    service.daemons.client.request = unanswered
    job = Job("j", 2, 0.0)
    job.job_id, job.key = 7, 1
    errors: list[str] = []
    trees = [{"tree_id": 0, "children": ["127.0.0.1:10", "127.0.0.1:11"], "parent": None}]
    asyncio.run(service._put_job(job, "leaf0", trees, {}, [], errors))
    return errors


def _timeout() -> HttpError:
    return HttpError("TimeoutError", timed_out=True)


def test_one_install_timeout_fails_that_install_but_does_not_mark_the_switch_down():
    service = _service()
    leaf = service.switches["leaf0"]
    errors = _install(service, _timeout())
    assert len(errors) == 1 and "switch leaf0" in errors[0] and "timed out after 2 s" in errors[0]
    assert leaf.up  # the other jobs on leaf0 go on
    for _ in range(PROBE_TIMEOUTS_DOWN - 2):
        _install(service, _timeout())
    assert leaf.up
    _install(service, _timeout())  # the probes' tolerance: this many in a row
    assert not leaf.up and leaf.error


def test_a_refused_install_connection_marks_the_switch_down_at_once():
    service = _service()
    errors = _install(service, HttpError("[Errno 111] Connection refused"))
    assert "unreachable" in errors[0] and not service.switches["leaf0"].up
