"""Controller and daemon HTTP APIs: bad requests get 4xx and change nothing; metrics format."""

from __future__ import annotations

import http.client
import json
import os

import pytest

from panama.runtime.control.client import request_json
from panama.runtime.control.tokens import new_token
from panama.runtime.controller.cluster_file import ClusterFileError, load_cluster, spread_hosts


def _raw(addr, method, path, body: bytes | None, ctype="application/json", token: str | None = None):
    conn = http.client.HTTPConnection(addr[0], addr[1], timeout=5)
    headers = {"Content-Type": ctype} if body is not None else {}
    token = os.environ["PANAMA_TOKEN"] if token is None else token
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data.startswith(b"{") else data.decode()


BAD_REGISTER = [
    (b"{not json", 400, "body"),
    (b"[1, 2]", 400, "body"),
    (json.dumps({"world_size": 4, "udp": "127.0.0.1:5000"}).encode(), 400, "rank"),
    (json.dumps({"rank": "0", "world_size": 4, "udp": "127.0.0.1:5000"}).encode(), 400, "rank"),
    (json.dumps({"rank": 0, "world_size": 4.5, "udp": "127.0.0.1:5000"}).encode(), 400, "world_size"),
    (json.dumps({"rank": 5, "world_size": 4, "udp": "127.0.0.1:5000"}).encode(), 400, "rank"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "nowhere"}).encode(), 400, "udp"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "localhost:5000"}).encode(), 400, "udp"),  # names are not resolved
    (json.dumps({"rank": 0, "world_size": 4, "udp": "127.0.0.1\n:5000"}).encode(), 400, "udp"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "0.0.0.0:5000"}).encode(), 400, "udp"),  # no one sends there
    (json.dumps({"rank": 0, "world_size": 4, "udp": "239.1.2.3:5000"}).encode(), 400, "udp"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "127.0.0.1:0"}).encode(), 400, "udp"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "127.0.0.1:5000", "size_bytes": -1}).encode(), 400, "size_bytes"),
    (json.dumps({"rank": 0, "world_size": 4, "udp": "127.0.0.1:5000", "wait_s": "soon"}).encode(), 400, "wait_s"),
    (json.dumps({"rank": 0, "world_size": 999, "udp": "127.0.0.1:5000"}).encode(), 400, "world_size"),
    (json.dumps({"rank": True, "world_size": 4, "udp": "127.0.0.1:5000"}).encode(), 400, "rank"),
]


@pytest.mark.parametrize("body,status,field", BAD_REGISTER)
def test_bad_register_requests_get_4xx_naming_the_field(cluster, body, status, field):
    before = cluster.controller_call("GET", "/v1/jobs")[1]
    got, reply = _raw(cluster.controller_addr, "POST", "/v1/jobs/badjob/register", body)
    assert got == status
    assert reply["error"].startswith(field), reply
    assert cluster.controller_call("GET", "/v1/jobs")[1] == before


def test_unknown_jobs_and_ranks_get_404(cluster):
    addr = cluster.controller_addr
    assert request_json(addr, "GET", "/v1/jobs/nope")[0] == 404
    assert request_json(addr, "DELETE", "/v1/jobs/nope")[0] == 404
    status, reply = request_json(addr, "POST", "/v1/jobs/nope/heartbeat", {"rank": 0})
    assert status == 404 and "nope" in reply["error"]
    assert request_json(addr, "POST", "/v1/jobs/nope/leave", {"rank": 0})[0] == 404
    status, reply = request_json(addr, "POST", "/v1/jobs/nope/heartbeat", {"rank": "x"})
    assert status == 400 and reply["error"].startswith("rank")
    assert request_json(addr, "GET", "/v1/nothing-here")[0] == 404
    assert request_json(addr, "PUT", "/v1/jobs/x/register", {})[0] == 405


def test_conflicting_world_size_is_refused(cluster):
    import threading

    addr = cluster.controller_addr
    first: dict = {}
    run = new_token()  # both registrations are of one run (another run would be refused first)

    def register_rank0():
        first["r"] = request_json(
            addr,
            "POST",
            "/v1/jobs/conflict/register",
            {"rank": 0, "world_size": 2, "udp": "127.0.0.1:5000", "wait_s": 1.0, "job_token": run},
            timeout_s=10,
        )

    t = threading.Thread(target=register_rank0)
    t.start()
    import time

    for _ in range(100):  # wait until rank 0 is registered
        jobs = request_json(addr, "GET", "/v1/jobs")[1]["jobs"]
        if any(j["job"] == "conflict" for j in jobs):
            break
        time.sleep(0.01)
    body = {"rank": 1, "world_size": 3, "udp": "127.0.0.1:5001", "job_token": run}
    status, reply = request_json(addr, "POST", "/v1/jobs/conflict/register", body)
    assert status == 409 and reply["error"].startswith("world_size")
    body = {"rank": 0, "world_size": 2, "udp": "127.0.0.1:5002", "job_token": run}
    status, reply = request_json(addr, "POST", "/v1/jobs/conflict/register", body)
    assert status == 409 and reply["error"].startswith("rank") and "already registered" in reply["error"]
    t.join(timeout=10)
    assert first["r"][0] == 504 and "ranks [1]" in first["r"][1]["error"]
    assert all(j["job"] != "conflict" for j in request_json(addr, "GET", "/v1/jobs")[1]["jobs"])


def test_daemon_control_api_rejects_bad_requests(cluster):
    control = cluster.procs["leaf0"].control
    before = cluster.switch_stats("leaf0")["jobs"]
    assert _raw(control, "PUT", "/jobs/abc", b"{}")[0] == 400
    assert _raw(control, "PUT", "/jobs/0", b"{}")[0] == 400
    assert _raw(control, "PUT", "/jobs/5", b"{oops")[0] == 400
    status, reply = _raw(control, "PUT", "/jobs/5", json.dumps({"trees": [{"tree_id": 0, "children": []}]}).encode())
    assert status == 400 and "children" in reply["error"]
    status, reply = _raw(
        control, "PUT", "/jobs/5", json.dumps({"trees": [{"tree_id": 0, "children": ["127.0.0.1:1", "bad"]}]}).encode()
    )
    assert status == 400 and "children" in reply["error"]
    status, reply = _raw(
        control,
        "PUT",
        "/jobs/5",
        json.dumps(
            {"trees": [{"tree_id": 0, "children": ["127.0.0.1:1"]}, {"tree_id": 0, "children": ["127.0.0.1:2"]}]}
        ).encode(),
    )
    assert status == 400 and reply["error"].startswith("trees")  # duplicate tree: refused before anything is applied
    assert _raw(control, "DELETE", "/jobs/12345", None)[0] == 404
    assert cluster.switch_stats("leaf0")["jobs"] == before


def test_daemon_metrics_are_prometheus_text(cluster):
    import urllib.request

    control = cluster.procs["spine0"].control
    auth = {"Authorization": f"Bearer {os.environ['PANAMA_TOKEN']}"}
    with urllib.request.urlopen(
        urllib.request.Request(f"http://{control[0]}:{control[1]}/metrics", headers=auth), timeout=5
    ) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples
    for line in samples:
        name_labels, value = line.rsplit(" ", 1)
        float(value)
        assert name_labels.startswith("panama_switch_") and 'switch="spine0"' in name_labels
    for name in ("rx_packets_total", "rx_bytes_total", "drops_total", "occupancy_slots", "malformed_total"):
        assert f"# TYPE panama_switch_{name} " in text
    ctl = cluster.controller_addr
    with urllib.request.urlopen(
        urllib.request.Request(f"http://{ctl[0]}:{ctl[1]}/metrics", headers=auth), timeout=5
    ) as resp:
        assert "panama_controller_switch_up" in resp.read().decode()


def test_cluster_file_errors_name_the_field(tmp_path):
    good = {
        "leaves": 1,
        "spines": 1,
        "hosts_per_leaf": 2,
        "switches": {
            "leaf0": {"udp": "127.0.0.1:1", "control": "127.0.0.1:2"},
            "spine0": {"udp": "127.0.0.1:3", "control": "127.0.0.1:4"},
        },
    }
    spec = load_cluster(good)
    assert set(spec.switches) == {"leaf0", "spine0"} and spec.switches["spine0"].role == "spine"
    cases = [
        ({**good, "colour": 1}, "colour"),
        ({k: v for k, v in good.items() if k != "spines"}, "spines"),
        ({**good, "switches": {"leaf0": good["switches"]["leaf0"]}}, "switches.spine0"),
        (
            {**good, "switches": {**good["switches"], "leaf0": {"udp": "x", "control": "127.0.0.1:2"}}},
            "switches.leaf0.udp",
        ),
        ({**good, "switches": {**good["switches"], "spine9": good["switches"]["leaf0"]}}, "switches.spine9"),
        ({**good, "leaves": 0}, "topology.leaves"),
        (
            {**good, "switches": {**good["switches"], "leaf0": {"udp": "0.0.0.0:1", "control": "127.0.0.1:2"}}},
            "switches.leaf0.udp",
        ),
    ]
    for data, field in cases:
        with pytest.raises(ClusterFileError) as info:
            load_cluster(data)
        assert str(info.value).startswith(field), str(info.value)
    path = tmp_path / "c.toml"
    path.write_text("leaves = [")
    with pytest.raises(ClusterFileError, match="TOML"):
        load_cluster(path)


def test_spread_hosts_fills_leaves_evenly():
    from panama.core.topology import leaf_spine

    assert spread_hosts(leaf_spine(2, 2, 3)) == ["h0", "h3", "h1", "h4", "h2", "h5"]


@pytest.mark.parametrize(
    "model,data,field",
    [
        ("InstallBody", {}, "trees: required"),
        ("InstallBody", {"trees": {}}, "trees: Input should be a valid list"),
        ("InstallBody", {"trees": []}, "trees: List should have at least 1 item"),
        ("InstallBody", {"trees": [{"tree_id": True, "children": ["a:1"]}]}, "trees[0].tree_id"),
        ("InstallBody", {"trees": [{"tree_id": 70000, "children": ["a:1"]}]}, "trees[0].tree_id"),
        ("InstallBody", {"trees": [{"tree_id": 0, "children": ["a:1"]}, {"tree_id": 1}]}, "trees[1].children"),
        ("InstallBody", {"trees": [{"tree_id": 0, "children": [1]}]}, "trees[0].children[0]"),
        ("InstallBody", {"trees": [{"tree_id": 0, "children": ["a:1"]}], "key": "xyz"}, "key: expected 1-16 hex"),
        ("InstallBody", {"trees": [{"tree_id": 0, "children": ["a:1"]}], "key": "1" * 17}, "key: expected"),
        ("InstallBody", {"trees": [{"tree_id": 0, "children": ["a:1"]}], "join": []}, "join: List should"),
        (
            "InstallBody",
            {"trees": [{"tree_id": 0, "children": ["a:1"]}], "multicast": {"group": "g"}},
            "multicast.members",
        ),
        ("RegisterBody", {"world_size": 2, "udp": "a:1"}, "rank: required"),
        ("RegisterBody", {"rank": 0, "world_size": 2, "udp": "a:1", "wait_s": 601}, "wait_s"),
        ("RegisterBody", {"rank": 0, "world_size": 2, "udp": "a:1", "trees": 0}, "trees"),
        ("RegisterBody", {"rank": 0, "world_size": 2, "udp": "a:1", "payload_elems": 10**6}, "payload_elems"),
        ("RegisterBody", {"rank": 2**60, "world_size": 2, "udp": "a:1"}, "rank"),
        ("ProgressBody", {"rank": 0, "calls": -1}, "calls"),
        ("UnicastBody", {"rank": 0, "reason": "x" * 301}, "reason"),
    ],
)
def test_request_bodies_name_the_field(model, data, field):
    """The bodies of both control APIs are pydantic models; errors name the field, indices in brackets."""
    from panama.core.errors import FieldError
    from panama.runtime.control import messages as bodies

    with pytest.raises(FieldError) as info:
        getattr(bodies, model).parse(data)
    assert str(info.value).startswith(field), str(info.value)


def test_progress_bodies_ignore_keys_they_do_not_know():
    """Heartbeat, leave and unicast bodies take extra keys as before (other workers' versions)."""
    from panama.runtime.control.messages import InstallBody, ProgressBody

    body = ProgressBody.parse({"rank": 1, "job_id": 3, "calls": 2, "future": True})
    assert (body.rank, body.job_id, body.calls, body.last) == (1, 3, 2, None)
    assert InstallBody.parse({"trees": [{"tree_id": 0, "children": ["a:1"]}], "key": "ff"}).key_value == 255
