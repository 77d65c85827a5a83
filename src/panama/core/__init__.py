"""Pure PANAMA protocol logic: no sockets, no clocks, no threads, no global randomness.

Time is an integer number of picoseconds passed in by the driver (``now``).
"""

from panama.core.packet import (
    CE,
    ECT0,
    ECT1,
    FLAG_ECE,
    FLAG_RESULT,
    FLAG_RETRANSMIT,
    MAX_CWND_CAP,
    NOT_ECT,
    Packet,
)
from panama.core.units import ms, ns, s, tx_time_ps, us

__all__ = [
    "CE",
    "ECT0",
    "ECT1",
    "NOT_ECT",
    "FLAG_ECE",
    "FLAG_RESULT",
    "FLAG_RETRANSMIT",
    "MAX_CWND_CAP",
    "Packet",
    "ms",
    "ns",
    "s",
    "tx_time_ps",
    "us",
]
