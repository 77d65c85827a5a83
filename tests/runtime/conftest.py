import os
import secrets
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from suite_cluster import suite_cluster  # noqa: E402

# One bearer token for every cluster these tests start, and every client they make
# (spawned workers inherit it); tests of authentication send none or a wrong one.
os.environ.setdefault("PANAMA_TOKEN", secrets.token_urlsafe(32))


@pytest.fixture(scope="session")
def cluster():
    """The runtime suite's cluster (suite_cluster.py)."""
    with suite_cluster() as lc:
        yield lc
