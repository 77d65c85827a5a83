import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # fake_device, worker_ops
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))  # suite_cluster

import pytest  # noqa: E402
from suite_cluster import suite_cluster  # noqa: E402


@pytest.fixture(scope="session")
def cluster():
    """The runtime suite's cluster (tests/runtime/suite_cluster.py), for the DDP hook's tests."""
    with suite_cluster() as lc:
        yield lc
