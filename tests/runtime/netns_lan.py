"""Network namespaces standing in for machines on one LAN (tests that need root and ``ip``).

:func:`lan` makes one namespace per "machine" plus one holding a bridge (the LAN's switch,
no address of its own). Each machine gets a veth pair: one end on the bridge, the other
inside the machine's namespace, renamed ``eth0`` and given ``SUBNET.N/24``; ``lo`` is up.
So every datagram and request between two machines crosses two interfaces and the bridge,
as between hosts, while a process talking to its own machine's address stays inside it.

Processes are started in a machine with ``ip netns exec NS ...`` (``exec``: the same PID, so
signals reach them). Deleting a namespace removes its veth ends (and their peers); callers
stop their processes first (a namespace lives on while a process is inside it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterator

import pytest

IFNAME = "eth0"  # every machine's LAN interface (GLOO_SOCKET_IFNAME for torch)

needs_root_and_ip = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (ip netns)"
)


@dataclass(frozen=True)
class Machine:
    """One stand-in machine: its namespace and its LAN address."""

    name: str
    netns: str
    ip: str

    def cmd(self, *argv: str) -> list[str]:
        """``argv`` run inside this machine (``ip netns exec``)."""
        return ["ip", "netns", "exec", self.netns, *argv]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def delete_netns(names: list[str]) -> None:
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


@contextlib.contextmanager
def lan(hosts: dict[str, int], subnet: str = "10.77.0") -> Iterator[dict[str, Machine]]:
    """``{name: last octet}`` -> ``{name: Machine}`` joined by one bridge (``SUBNET.0/24``).

    Namespaces are named ``pn<pid><name>`` and deleted on exit; a host where they cannot be
    made (no CAP_SYS_ADMIN in a container, no veth driver) skips the test with ``ip``'s message.
    """
    tag = f"pn{os.getpid()}"
    bridge_ns = f"{tag}lan"
    machines = {name: Machine(name, f"{tag}{name}", f"{subnet}.{octet}") for name, octet in hosts.items()}
    made: list[str] = []
    try:
        for ns in [bridge_ns, *(m.netns for m in machines.values())]:
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge_ns, "link", "set", "br0", "up")
        for i, m in enumerate(machines.values()):
            # made in this namespace under unique names (<= 15 characters), then moved
            host_end, lan_end = f"pv{os.getpid()}h{i}"[-15:], f"pv{os.getpid()}b{i}"[-15:]
            ip("link", "add", host_end, "type", "veth", "peer", "name", lan_end)
            ip("link", "set", host_end, "netns", m.netns)
            ip("link", "set", lan_end, "netns", bridge_ns)
            ip("-n", bridge_ns, "link", "set", lan_end, "master", "br0", "up")
            ip("-n", m.netns, "link", "set", host_end, "name", IFNAME)
            ip("-n", m.netns, "addr", "add", f"{m.ip}/24", "dev", IFNAME)
            ip("-n", m.netns, "link", "set", IFNAME, "up")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        delete_netns(made)
        stderr = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"cannot build network namespaces here: {stderr.decode(errors='replace').strip() or exc}")
    try:
        yield machines
    finally:
        delete_netns(made)
