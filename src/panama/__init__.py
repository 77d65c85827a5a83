"""PANAMA in Python: in-network gradient aggregation for shared ML clusters.

Layers (imports point downward only):

- ``panama.core``: pure protocol logic (packet model and codec, aggregation
  accelerator, worker transport and congestion control, controller logic).
- ``panama.fabric``, ``panama.sim``, ``panama.runtime``: drivers of that core
  (in-memory fabric, packet-level simulator, real UDP runtime).
- ``panama.cli``, ``panama.experiments``: commands and experiments on top.
"""

__version__ = "0.1.0"

from panama import _ext

# PANAMA_NO_EXTENSIONS=1 (or extensions older than their sources): load the simulator's
# compiled modules from their .py files. Must run before any of them is imported.
_ext.install_pure_finder()


def __getattr__(name: str):
    # The communicator pulls in sockets and (optionally) torch; import it lazily so
    # ``import panama`` stays cheap and the core stays usable without the runtime.
    if name == "Communicator":
        from panama.runtime.worker.communicator import Communicator

        return Communicator
    raise AttributeError(f"module 'panama' has no attribute {name!r}")
