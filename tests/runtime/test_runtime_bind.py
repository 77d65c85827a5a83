"""A rank bound where its first hop cannot be reached gets an error that names both ends."""

from __future__ import annotations

import pytest

from panama.runtime.control.messages import FirstHop, RegisterReply
from panama.runtime.worker.communicator import Communicator, CommunicatorError


def test_a_loopback_rank_with_a_first_hop_on_another_machine_is_told_what_to_bind(monkeypatch):
    comm = Communicator("127.0.0.1:9", "j", 0, 2, timeout_s=1.0)
    try:
        # The controller's reply, as for a switch daemon on another machine (TEST-NET-1: a
        # UDP connect sends nothing; the kernel refuses a 127.0.0.1 source for that route).
        reply = RegisterReply(
            job="j",
            job_id=1,
            admitted=True,
            reason="",
            first_hop=FirstHop(udp="192.0.2.1:40001", switch="leaf0"),
            key="1",
            payload_elems=359,
        )
        monkeypatch.setattr(comm, "_register", lambda: reply)
        with pytest.raises(
            CommunicatorError,
            match=r"cannot send from 127\.0\.0\.1:\d+ to first-hop switch leaf0 "
            r"\(192\.0\.2\.1:40001\).*PANAMA_BIND_HOST",
        ):
            comm.connect()
    finally:
        comm.close()
