"""What counts as an address peers can send to: one rule for the whole package.

Every place that takes an address which peers will be told to send to (or which it will
send to itself) asks :func:`unreachable_reason`; each keeps its own message, field name
and HTTP status and says what its reason means to its user. The rule:

* the port, when given, is not 0 (:data:`PORT_ZERO`). A *bind* address is checked without
  its port: port 0 there means "any free port", and peers are told the bound one;
* the host is not unspecified (:data:`UNSPECIFIED`: ``0.0.0.0`` or empty), not an IPv4
  multicast address (:data:`MULTICAST`: 224.0.0.0/4; results go to groups through their
  own settings, never as a peer's address) and not the limited broadcast
  (:data:`BROADCAST`: 255.255.255.255);
* a host name passes: whoever sends resolves it. Where no name may be resolved (a server's
  event loop, an address written into a request) or only an address of this machine
  makes sense (a bind host), the caller first requires an IPv4 literal
  (:func:`is_ipv4`, :func:`panama.runtime.net.udp.parse_ipv4_addr`).

The callers (``tests/runtime/test_address_rule.py`` checks the rule's table):

* ``ClusterConfig.host`` (``panama cluster up --host``) and ``$PANAMA_BIND_HOST``
  (:func:`panama.environment.bind_host`): a bind host, IPv4 literal only (an address of
  this machine); ``worker.env.bind_host_for`` takes the latter, else the source address of
  the route to the controller (concrete by construction);
* ``CommunicatorConfig.bind_host``: a bind host, bound as given (a name passes);
* ``panama switch --udp/--control``: bind addresses, the host only (port 0: any);
* the controller's cluster file (``switches.NAME.udp/control``): host and port (the
  controller connects to them and tells the daemons' peers; names pass);
* the switch daemon's tree children and parent (``PUT /jobs``) and a rank's ``udp`` in its
  registration with the controller (where the switches will send its results): IPv4
  literal, host and port (:func:`panama.runtime.net.udp.parse_destination`; 400 naming
  the field); the daemon then looks up the route from its data plane's socket (what only
  sending can tell).

The controller's own ``--listen`` may be ``0.0.0.0``: nobody is told that address.
Standard library only, so :mod:`panama.environment` (which every layer may use) uses it.
"""

from __future__ import annotations

import ipaddress

__all__ = ["BROADCAST", "MULTICAST", "PORT_ZERO", "UNSPECIFIED", "is_ipv4", "reachable", "unreachable_reason"]

PORT_ZERO = "port 0"
UNSPECIFIED = "unspecified address"
MULTICAST = "multicast address"
BROADCAST = "broadcast address"

_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def is_ipv4(host: str) -> bool:
    """True when ``host`` is an IPv4 literal (``"10.0.0.2"``; never a name)."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def unreachable_reason(host: str, port: int | None = None) -> str | None:
    """Why peers cannot send to ``host`` (and ``port``, when given), or None when they can:
    :data:`PORT_ZERO`, :data:`UNSPECIFIED`, :data:`MULTICAST` or :data:`BROADCAST` (the
    port is looked at first). A host name passes (see the module docstring)."""
    if port is not None and port == 0:
        return PORT_ZERO
    if host == "":
        return UNSPECIFIED
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        return None  # a name: resolved by whoever sends
    if ip.is_unspecified:
        return UNSPECIFIED
    if ip.is_multicast:
        return MULTICAST
    if ip == _LIMITED_BROADCAST:
        return BROADCAST
    return None


def reachable(host: str, port: int | None = None) -> bool:
    """True when peers can send to ``host`` (and ``port``): :func:`unreachable_reason` is None."""
    return unreachable_reason(host, port) is None
