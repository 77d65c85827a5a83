"""The cluster every runtime test shares, and the DDP hook's tests too (one definition).

``tests/runtime/conftest.py`` and ``tests/distributed/conftest.py`` each expose it as the
session fixture ``cluster``; tests size their arrays with :data:`TEST_PAYLOAD_ELEMS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from panama.runtime.cluster import LocalCluster

# Small datagrams so that small arrays still span many packets and both trees.
TEST_PAYLOAD_ELEMS = 1000


@contextmanager
def suite_cluster() -> Iterator[LocalCluster]:
    """2 leaves x 2 spines, 2 hosts per leaf: 4 ranks, 2 trees, 2 tiers of daemons."""
    with LocalCluster(
        leaves=2,
        spines=2,
        hosts_per_leaf=2,
        packet_memory=256,
        payload_elems=TEST_PAYLOAD_ELEMS,
        heartbeat_timeout_s=3.0,
        log_level="INFO",
    ) as lc:
        yield lc
