"""Integer picosecond time helpers shared by every driver of the core."""

PS_PER_NS = 1_000
PS_PER_US = 1_000_000
PS_PER_MS = 1_000_000_000
PS_PER_S = 1_000_000_000_000


def ns(value: float) -> int:
    """Nanoseconds to integer picoseconds."""
    return round(value * PS_PER_NS)


def us(value: float) -> int:
    """Microseconds to integer picoseconds."""
    return round(value * PS_PER_US)


def ms(value: float) -> int:
    """Milliseconds to integer picoseconds."""
    return round(value * PS_PER_MS)


def s(value: float) -> int:
    """Seconds to integer picoseconds."""
    return round(value * PS_PER_S)


def tx_time_ps(size_bytes: int, rate_bps: float) -> int:
    """Serialisation time of ``size_bytes`` at ``rate_bps``, in picoseconds (rounded up)."""
    bits_ps = size_bytes * 8 * PS_PER_S
    rate = int(rate_bps)
    return -(-bits_ps // rate)
