"""One rule for "an address peers can send to" (panama.addresses), and every place
that checks one asks it (issue 38, item 4)."""

from __future__ import annotations

import pytest

from panama import environment
from panama.addresses import (
    BROADCAST,
    MULTICAST,
    PORT_ZERO,
    UNSPECIFIED,
    is_ipv4,
    reachable,
    unreachable_reason,
)
from panama.environment import EnvError
from panama.runtime.controller.cluster_file import ClusterFileError, load_cluster
from panama.runtime.settings import ClusterConfig, CommunicatorConfig
from panama.settings import SettingsError

RULE = [
    # host, port, reason (None: peers can send there)
    ("127.0.0.1", None, None),
    ("10.0.0.2", 5000, None),
    ("192.0.2.255", 9, None),  # a subnet's broadcast: only a route lookup can tell
    ("localhost", 5, None),  # a name: resolved by whoever sends
    ("127.0.0.1", 0, PORT_ZERO),
    ("0.0.0.0", None, UNSPECIFIED),
    ("0.0.0.0", 0, PORT_ZERO),  # the port first
    ("", None, UNSPECIFIED),
    ("224.0.0.1", None, MULTICAST),
    ("239.80.0.1", 7000, MULTICAST),
    ("239.255.255.255", None, MULTICAST),
    ("255.255.255.255", 9, BROADCAST),
]


@pytest.mark.parametrize("host,port,reason", RULE)
def test_the_rule(host, port, reason):
    assert unreachable_reason(host, port) == reason
    assert reachable(host, port) is (reason is None)


@pytest.mark.parametrize(
    "host,literal", [("10.0.0.2", True), ("0.0.0.0", True), ("localhost", False), ("10.0.0.256", False), ("", False)]
)
def test_ipv4_literals(host, literal):
    assert is_ipv4(host) is literal


BIND_HOSTS = [
    # host, refused by ClusterConfig.host and $PANAMA_BIND_HOST (IPv4 literals), by CommunicatorConfig.bind_host
    ("127.0.0.1", False, False),
    ("0.0.0.0", True, True),
    ("239.1.2.3", True, True),
    ("255.255.255.255", True, True),
    ("localhost", True, False),  # the communicator binds a name as given
]


@pytest.mark.parametrize("host,literal_refused,bind_refused", BIND_HOSTS)
def test_every_bind_host_follows_the_rule(host, literal_refused, bind_refused, monkeypatch):
    for make, field, refused in (
        (lambda: ClusterConfig(host=host), "host", literal_refused),
        (lambda: CommunicatorConfig(bind_host=host), "bind_host", bind_refused),
    ):
        if refused:
            with pytest.raises(SettingsError) as info:
                make()
            assert info.value.field == field
        else:
            make()
    monkeypatch.setenv(environment.BIND_HOST, host)
    if literal_refused:
        with pytest.raises(EnvError) as env_info:
            environment.bind_host()
        assert env_info.value.field == environment.BIND_HOST
    else:
        assert environment.bind_host() == host


@pytest.mark.parametrize(
    "udp,refused",
    [("127.0.0.1:1", False), ("0.0.0.0:1", True), ("127.0.0.1:0", True), ("239.1.2.3:1", True), ("localhost:1", False)],
)
def test_the_cluster_file_follows_the_rule(udp, refused):
    data = {
        "leaves": 1,
        "spines": 1,
        "hosts_per_leaf": 2,
        "switches": {
            "leaf0": {"udp": udp, "control": "127.0.0.1:2"},
            "spine0": {"udp": "127.0.0.1:3", "control": "127.0.0.1:4"},
        },
    }
    if not refused:
        assert load_cluster(data).switches["leaf0"].udp[0] == udp.split(":")[0]
        return
    with pytest.raises(ClusterFileError) as info:
        load_cluster(data)
    assert info.value.field == "switches.leaf0.udp" and "not an address others can reach" in info.value.detail
