import os
import secrets
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from panama.runtime.cluster import LocalCluster  # noqa: E402

# One bearer token for every cluster these tests start, and every client they make
# (spawned workers inherit it); tests of authentication send none or a wrong one.
os.environ.setdefault("PANAMA_TOKEN", secrets.token_urlsafe(32))

# Small datagrams so that small arrays still span many packets and both trees.
TEST_PAYLOAD_ELEMS = 1000


@pytest.fixture(scope="session")
def cluster():
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
