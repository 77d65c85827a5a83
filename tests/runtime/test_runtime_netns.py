"""Workers on other "machines": each rank in its own network namespace, the daemons in another.

The namespaces are joined by veth pairs on a bridge (10.77.0.0/24, ``netns_lan.lan``), so
every datagram and control request crosses a network interface instead of loopback. Needs
root and ``ip netns`` (CI runs as root); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from netns_lan import lan, needs_root_and_ip

from panama.runtime.cluster import LocalCluster
from panama.runtime.control.tokens import new_token

W = 4
SUBNET = "10.77.0"
SWITCH_IP = f"{SUBNET}.1"

pytestmark = needs_root_and_ip

WORKER = r"""
import json, sys
import numpy as np
from panama.runtime.worker.communicator import Communicator
controller, rank, world, ip, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
x = np.random.default_rng([7, rank]).standard_normal(n).astype(np.float32)
with Communicator(controller, "netns", rank, world, bind_host=ip, timeout_s=30) as comm:
    out = comm.allreduce(x)
    again = comm.allreduce(x)
    print(json.dumps({"rank": rank, "out": out.tobytes().hex(), "same": out.tobytes() == again.tobytes(),
                      "addr": comm.addr[0], "first_hop": comm.plan["first_hop"], "stats": comm.stats()}))
"""


@pytest.fixture
def namespaces():
    with lan({"sw": 1, **{f"w{i}": 11 + i for i in range(W)}}, SUBNET) as machines:
        yield machines["sw"].netns, [machines[f"w{i}"].netns for i in range(W)]


def test_allreduce_across_network_namespaces(namespaces):
    sw, workers = namespaces
    n = 25_013  # two 16369-float datagrams per rank, the second partial
    with LocalCluster(leaves=2, spines=2, hosts_per_leaf=2, host=SWITCH_IP, netns=sw, log_level="WARNING") as lc:
        assert lc.controller.startswith(SWITCH_IP + ":")
        run = new_token()
        procs = [
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    sys.executable,
                    "-c",
                    WORKER,
                    lc.controller,
                    str(r),
                    str(W),
                    f"{SUBNET}.{11 + r}",
                    str(n),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PANAMA_JOB_TOKEN=run),  # the ranks of one run share its token
            )
            for r, ns in enumerate(workers)
        ]
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err[-2000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    reports.sort(key=lambda r: r["rank"])
    assert [r["addr"] for r in reports] == [f"{SUBNET}.{11 + r}" for r in range(W)]
    assert {r["first_hop"]["udp"].split(":")[0] for r in reports} == {SWITCH_IP}
    assert {r["first_hop"]["switch"] for r in reports} == {"leaf0", "leaf1"}
    outs = [r["out"] for r in reports]
    assert len(set(outs)) == 1 and all(r["same"] for r in reports)  # bitwise identical, call after call
    ref = sum(np.random.default_rng([7, r]).standard_normal(n).astype(np.float64) for r in range(W))
    got = np.frombuffer(bytes.fromhex(outs[0]), dtype=np.float32)
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
    assert all(r["stats"]["results"] == 2 * 2 for r in reports)  # 2 packets per call, 2 calls
