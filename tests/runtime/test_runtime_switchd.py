"""The switch daemon's data plane in-process: ECN on real datagrams, backlog marking, counters."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from rt_helpers import recv_packet

from panama.core import codec
from panama.core.packet import CE, ECT0, FLAG_ECE, FLAG_RESULT, Packet
from panama.runtime.net import mmsg
from panama.runtime.net.udp import PacketSocket, format_addr
from panama.runtime.switch.daemon import SwitchConfig, SwitchDaemon
from panama.settings import SettingsError

PE = 8


@pytest.fixture(
    params=[(False, "compiled"), (False, "python"), (True, None)],
    ids=["plain-loop", "plain-loop-python-io", "batched-loop"],
)
def daemon_factory(request, monkeypatch):
    """Daemons running the plain loop (one datagram per buffer; batched receives and
    multicast sends through panama.runtime.net.mmsg, compiled where built, and its pure-Python
    classes), or the GSO/GRO batched loop."""
    batched, io = request.param
    if io == "python":
        monkeypatch.setattr(mmsg, "Receiver", mmsg.PyReceiver)
        monkeypatch.setattr(mmsg, "Sender", mmsg.PySender)
        monkeypatch.setattr(mmsg, "BATCHED", False)
        monkeypatch.setattr(mmsg, "IMPLEMENTATION", "python")
    made = []

    def make(**kw):
        d = SwitchDaemon(SwitchConfig(switch_id="sw", packet_memory=64, payload_elems=PE, offload=batched, **kw))
        if batched and not d.batched:
            d.close()
            pytest.skip(f"no UDP offload here: {d.sock.offload.reason}")
        assert d.batched == batched
        if not batched:
            assert d.stats()["io"] == mmsg.IMPLEMENTATION
            assert isinstance(d.sock._sender, mmsg.Sender)  # noqa: SLF001 - the implementation under test
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def _contribution(seq, value, ecn=ECT0, job=1, tree=0):
    return Packet(job, tree, seq, 1, PE, 0, ecn=ecn, payload=np.full(PE, value, np.float32))


def test_root_sums_and_folds_ce_into_ece_without_marking_the_ip_header(daemon_factory):
    d = daemon_factory(ecn_threshold_pkts=0)
    a, b = PacketSocket(), PacketSocket()
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)], "parent": None}])
    d.start_data_plane()
    a.send(_contribution(0, 1.5, ecn=CE), d.udp_addr)  # marked upstream of this switch
    b.send(_contribution(0, 2.0), d.udp_addr)
    for s in (a, b):
        pkt, src = recv_packet(s)
        assert src == d.udp_addr
        assert pkt.flags & FLAG_RESULT and pkt.flags & FLAG_ECE  # tree-wide echo
        assert pkt.ecn == ECT0  # but the IP codepoint of results is not CE (no echo loop)
        assert np.all(pkt.payload == 3.5)
    st = d.stats()
    assert st["ce_received"] == 1 and st["ce_marked"] == 0
    assert st["rx_packets"] == 2 and st["tx_packets"] == 2


def test_intermediate_relays_ce_of_results_and_marks_partials(daemon_factory):
    d = daemon_factory(ecn_threshold_pkts=0)
    a, b, parent = PacketSocket(), PacketSocket(), PacketSocket()
    d.install_job(
        1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)], "parent": format_addr(parent.addr)}]
    )
    d.start_data_plane()
    a.send(_contribution(0, 1.0, ecn=CE), d.udp_addr)
    b.send(_contribution(0, 1.0), d.udp_addr)
    partial, _ = recv_packet(parent)
    assert not partial.flags & FLAG_RESULT and partial.ecn == CE  # the OR of what it aggregated
    result = Packet(1, 0, 0, 1, PE, FLAG_RESULT, payload=np.full(PE, 7.0, np.float32))
    parent.send(result, d.udp_addr, ecn=CE)  # marked on the way down
    for s in (a, b):
        pkt, _ = recv_packet(s)
        assert pkt.ecn == CE and np.all(pkt.payload == 7.0)


def _marks_after_a_queued_burst(d: SwitchDaemon, seqs: int = 20) -> list[bool]:
    """Queue ``seqs`` contributions from each of 2 children before the data plane runs; CE of each result."""
    kids = [PacketSocket() for _ in range(2)]
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(k.addr) for k in kids], "parent": None}])
    for seq in range(seqs):
        for k in kids:
            k.send(_contribution(seq, 1.0), d.udp_addr)
    time.sleep(0.05)
    d.start_data_plane()
    return [recv_packet(kids[0])[0].ecn == CE for _ in range(seqs)]


def test_backlog_above_threshold_marks_ce(daemon_factory):
    d = daemon_factory(ecn_threshold_pkts=4, batch=64)
    marks = _marks_after_a_queued_burst(d)  # 40 contributions: the first batch sees a backlog
    assert any(marks) and not all(marks)  # early results (deep backlog) marked, last ones not
    assert d.stats()["ce_marked"] > 0
    assert d.stats()["max_backlog_pkts"] > 4


def test_backlog_counts_what_still_waits_in_the_kernel_after_a_full_batch(daemon_factory):
    """A batch of 2 can never hold 6 datagrams behind the first: the socket queue must count."""
    from panama.runtime.switch.dataplane import _datagram_truesize

    if not _datagram_truesize(codec.wire_size(PE)):
        pytest.skip("SO_MEMINFO is not available on this kernel (the backlog then counts the batch only)")
    d = daemon_factory(ecn_threshold_pkts=6, batch=2)
    marks = _marks_after_a_queued_burst(d)
    assert marks[0] and not marks[-1]  # deep queue first, drained at the end
    st = d.stats()
    assert (
        30 <= st["max_backlog_pkts"] <= 45
    )  # 40 queued: 1 in the batch behind the first + ~38 in the kernel (estimated)
    assert st["ce_marked"] > 0


def test_malformed_and_oversize_datagrams_are_counted_not_fatal(daemon_factory):
    d = daemon_factory(drop_prob=0.0)
    kids = [PacketSocket() for _ in range(2)]
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(k.addr) for k in kids], "parent": None}])
    d.start_data_plane()
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.sendto(b"", d.udp_addr)
    raw.sendto(b"\x50\x41\x09" + bytes(33), d.udp_addr)  # bad version
    raw.sendto(codec.encode(_contribution(0, 1.0))[:-3], d.udp_addr)
    big = Packet(1, 0, 0, 1, PE * 4, 0, payload=np.ones(PE * 4, np.float32))
    raw.sendto(codec.encode(big), d.udp_addr)  # larger than the daemon's slots
    raw.close()
    # Still serving: a real slot completes afterwards.
    for k in kids:
        k.send(_contribution(0, 2.0), d.udp_addr)
    for k in kids:
        pkt, _ = recv_packet(k)
        assert np.all(pkt.payload == 4.0)
    st = d.stats()
    assert st["malformed"] == {"short": 1, "bad_version": 1, "count_mismatch": 1}
    assert st["drops"].get("oversize", 0) + st["drops"].get("too_large", 0) == 1


def test_datagrams_with_a_wrong_key_are_dropped_and_results_carry_the_key(daemon_factory):
    d = daemon_factory(ecn_threshold_pkts=0)
    a, b = PacketSocket(), PacketSocket()
    key = 0xFEEDFACECAFEBEEF
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)], "parent": None}], key)
    d.start_data_plane()
    a.set_key(key)
    b.send(_contribution(0, 100.0), d.udp_addr)  # b does not know the key: refused
    a.send(_contribution(0, 1.0), d.udp_addr)
    b.set_key(key)
    b.send(_contribution(0, 2.0), d.udp_addr)
    for s in (a, b):
        s.settimeout(5.0)
        buf = bytearray(65536)
        n, ecn, _ = s.recv_into(buf)
        pkt = codec.decode(bytes(buf[:n]), ecn, keys={1: key})  # the result carries the job's key
        assert np.all(pkt.payload == 3.0)
    assert d.stats()["malformed"] == {"bad_key": 1}


def test_send_errors_never_end_the_data_plane(daemon_factory):
    """A destination the kernel refuses (EACCES: broadcast) is counted by destination; the daemon serves on."""
    d = daemon_factory(ecn_threshold_pkts=0)
    a, b = PacketSocket(), PacketSocket()
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)], "parent": None}])
    # What a bad install could once leave behind: a parent the socket cannot send to.
    d.acc.install_tree(1, 1, (a.addr, b.addr), ("255.255.255.255", 9))
    d.start_data_plane()
    for s in (a, b):  # tree 1's partial goes up to the broadcast parent: refused by the kernel
        s.send(_contribution(0, 1.0, tree=1), d.udp_addr)
    for s in (a, b):
        s.send(_contribution(0, 2.0, tree=0), d.udp_addr)
    for s in (a, b):
        pkt, _ = recv_packet(s)
        assert pkt.tree_id == 0 and np.all(pkt.payload == 4.0)
    st = d.stats()
    assert st["data_plane"]["alive"] and st["send_errors"] >= 1
    assert (
        "255.255.255.255:9" in st["send_errors_by_dest"] and "EACCES" in st["send_errors_by_dest"]["255.255.255.255:9"]
    )
    assert "255.255.255.255:9" in st["data_plane"]["last_send_error"]


def test_an_unexpected_data_plane_error_is_counted_and_the_loop_goes_on(daemon_factory, monkeypatch):
    d = daemon_factory(ecn_threshold_pkts=0)
    a, b = PacketSocket(), PacketSocket()
    d.install_job(1, [{"tree_id": 0, "children": [format_addr(a.addr), format_addr(b.addr)], "parent": None}])
    real = d.acc.receive
    calls = {"n": 0}

    def flaky(packet, src):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected bug")
        return real(packet, src)

    monkeypatch.setattr(d.acc, "receive", flaky)
    d.start_data_plane()
    a.send(_contribution(0, 1.0), d.udp_addr)  # lost to the bug; the retransmission gets through
    deadline = time.monotonic() + 10
    while d.stats()["data_plane"]["errors"] == 0:
        assert time.monotonic() < deadline, "the injected error was never hit"
        time.sleep(0.01)
    a.send(_contribution(0, 1.0), d.udp_addr)
    b.send(_contribution(0, 2.0), d.udp_addr)
    pkt, _ = recv_packet(a)
    assert np.all(pkt.payload == 3.0)
    st = d.stats()["data_plane"]
    assert st["alive"] and st["errors"] == 1 and "injected bug" in st["last_error"]


@pytest.mark.parametrize(
    "trees,field",
    [
        ([{"tree_id": 0, "children": ["127.0.0.1:1"], "parent": "255.255.255.255:9"}], "trees[0].parent"),
        ([{"tree_id": 0, "children": ["127.0.0.1:0"]}], "trees[0].children"),
        ([{"tree_id": 0, "children": ["0.0.0.0:5"]}], "trees[0].children"),
        ([{"tree_id": 0, "children": ["239.1.2.3:5"]}], "trees[0].children"),  # a multicast address (issue 38)
        ([{"tree_id": 0, "children": ["127.0.0.1:1", "127.0.0.1:1"]}], "trees[0].children"),
        ([{"tree_id": 0, "children": ["127.0.0.1:1"]}, {"tree_id": 0, "children": ["127.0.0.1:2"]}], "trees"),
        ([{"tree_id": 0, "children": ["127.0.0.1:1"], "colour": 1}], "trees[0].colour"),
        # issue 35: IPv4 literals only, never resolved (a name meant gethostbyname in the event loop)
        ([{"tree_id": 0, "children": ["localhost:5"]}], "trees[0].children"),
        ([{"tree_id": 0, "children": ["127.0.0.1:1"], "parent": "127.0.0.1\nFORGED:9"}], "trees[0].parent"),
        ([], "trees"),
    ],
)
def test_a_bad_install_is_refused_before_anything_is_applied(daemon_factory, trees, field):
    d = daemon_factory()
    with pytest.raises(ValueError) as info:
        d.install_job(3, trees, key=5)
    assert str(info.value).startswith(field), str(info.value)
    assert d.acc.jobs() == set() or 3 not in d.acc.jobs()
    assert 3 not in d.keys and 3 not in d.jobs_installed


def test_config_validation_names_the_field():
    for kw, field in (
        ({"packet_memory": 0}, "packet_memory"),
        ({"payload_elems": 10**6}, "payload_elems"),
        ({"drop_prob": 1.0}, "drop_prob"),
        ({"ecn_threshold_pkts": -1}, "ecn_threshold_pkts"),
        ({"batch": 0}, "batch"),
        ({"udp": "nohost"}, "udp"),
        ({"udp": ("127.0.0.1", 70000)}, "udp"),
        ({"bogus": 1}, "bogus"),
    ):
        with pytest.raises(SettingsError, match=f"^{field}") as info:
            SwitchConfig(switch_id="x", **kw)
        assert info.value.field.split(".")[0] == field
