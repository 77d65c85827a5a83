import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # fake_device, worker_ops

import pytest  # noqa: E402

from panama.runtime.cluster import LocalCluster  # noqa: E402

TEST_PAYLOAD_ELEMS = 1000  # as tests/runtime/conftest.py


@pytest.fixture(scope="session")
def cluster():
    """2 leaves x 2 spines, 2 hosts per leaf (the runtime suite's cluster, for the DDP hook's tests)."""
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
