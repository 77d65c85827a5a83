"""Per-tree congestion control of PANAMA workers, chosen by name.

A controller owns one window (in packets) for one aggregation tree of one worker. The
transport calls ``on_result`` for every result (the implicit ACK of one packet it sent),
``on_timeout`` when a retransmission timer fired, and reads ``window`` before sending.
Every window is clamped to the latest ``cwnd_cap`` carried by results, so accelerator
memory cannot overflow whatever the algorithm does.

Registry: ``dctcp-or`` (the source's reaction: DCTCP on the tree-wide OR of ECN marks;
``dctcp`` is the same class under its earlier name), ``dctcp-path`` (the same reaction
above a floor set by the tree's path, :mod:`panama.core.paths`, and held at that path
window while the echo is quiet),
``fixed`` (constant window, as in switch-ASIC systems without congestion control),
``none`` (always the full cwnd_cap).
"""

from __future__ import annotations

from panama.core.packet import MAX_CWND_CAP


class CongestionControl:
    """Window of one tree, in packets (a float; the transport uses ``int(window)``).

    Abstract (subclasses implement ``on_result``); not an ``abc.ABC``, so that the
    compiled fast path can make the controllers extension types (``cc.pxd``)."""

    name = "abstract"

    def __init__(self, initial_window: float = 10.0):
        if initial_window < 1:
            raise ValueError(f"initial_window must be >= 1, got {initial_window}")
        self.cwnd = float(initial_window)
        self.cwnd_cap = MAX_CWND_CAP

    @property
    def window(self) -> int:
        return self.win()

    def win(self) -> int:
        """The window (``window``, as a method: a C call when compiled)."""
        w = int(self.cwnd)
        if w > self.cwnd_cap:
            w = self.cwnd_cap
        return w if w > 1 else 1

    def limit_to_cap(self, cap: int) -> None:
        """Take a ``cwnd_cap`` learned outside a result (the controller's plan, before the first result)."""
        self.cwnd_cap = max(1, min(MAX_CWND_CAP, cap))

    def limit_to_path(self, window: int) -> None:
        """Take the tree's path window (:func:`panama.core.paths.path_windows`); only
        ``dctcp-path`` uses it, every other controller ignores it."""

    def _clamp(self, cap: int) -> None:
        self.cwnd_cap = max(1, cap)
        if self.cwnd > self.cwnd_cap:
            self.cwnd = float(self.cwnd_cap)

    def on_result(self, seq: int, ece: bool, cwnd_cap: int, snd_nxt: int) -> None:
        """One result arrived: ``seq`` it acknowledges, tree-wide ECN echo, cap, next seq to send."""
        raise NotImplementedError

    def on_timeout(self) -> None:
        """A retransmission timer of this tree fired."""


class DctcpOr(CongestionControl):
    """DCTCP (RFC 8257) mapped onto a tree; results are the ACKs, ``FLAG_ECE`` the echo.

    - alpha <- (1 - g) * alpha + g * F once per window of results, F the marked
      fraction of that window (RFC 8257 section 3.3), g = 1/16;
    - the first echo after the previous reduction's window has been acknowledged
      cuts cwnd <- cwnd * (1 - alpha / 2) at once, at most once per window of data
      (RFC 8257 section 3.4, RFC 3168 section 6.1.2), as the hosts' DCTCP does;
    - every other result grows the window: slow start (+1 per result) below
      ssthresh, additive increase (+1/cwnd per result) above it (RFC 5681).
      Reacting at the end of the window instead, or not growing on marked results,
      leaves a tree with about half its fair share against DCTCP flows
      (tests/sim/test_friendliness.py);
    - timeout: ssthresh <- cwnd / 2, cwnd <- 1 (RFC 5681 section 3.1).
    All workers of a tree see the same results with the same echo and cap, so their
    windows evolve in lock-step.
    """

    name = "dctcp-or"

    def __init__(self, initial_window: float = 10.0, g: float = 1 / 16, initial_alpha: float = 1.0):
        super().__init__(initial_window)
        if not 0 < g <= 1:
            raise ValueError(f"g must be in (0, 1], got {g}")
        self.g = g
        self.alpha = initial_alpha
        self.ssthresh = float(MAX_CWND_CAP)
        self._acked = 0
        self._marked = 0
        self._window_end = 0
        self._cwr_end = 0

    def on_result(self, seq: int, ece: bool, cwnd_cap: int, snd_nxt: int) -> None:
        self._acked += 1
        if ece:
            self._marked += 1
        if seq >= self._window_end:
            # One observation window (about one RTT of results) is over.
            fraction = self._marked / self._acked
            self.alpha = (1 - self.g) * self.alpha + self.g * fraction
            self._acked = 0
            self._marked = 0
            self._window_end = snd_nxt
        if ece and seq >= self._cwr_end:
            self.cwnd = max(1.0, self.cwnd * (1 - self.alpha / 2))
            self.ssthresh = self.cwnd
            self._cwr_end = snd_nxt
        elif self.cwnd < self.ssthresh:
            self.cwnd += 1.0
        else:
            self.cwnd += 1.0 / self.cwnd
        self._clamp(cwnd_cap)

    def on_timeout(self) -> None:
        self.ssthresh = max(2.0, self.cwnd / 2)
        self.cwnd = 1.0


class DctcpPath(DctcpOr):
    """A tree window that never drops below its path window and exceeds it only while the
    echo shows queues held at the marking threshold: DCTCP above that floor.

    - **Path window** (:func:`panama.core.paths.path_windows`): the packets in flight that
      keep the tree's bottleneck share busy with no queue anywhere, from the link rates,
      delays and hops the controller knows. The window starts there (no slow start: the
      path is known).
    - **While the echo is quiet** (DCTCP's ``alpha`` below ``g``: fewer than about one
      result in sixteen marked) the window stays at the path window: above it a window
      only builds a queue of the tree's own, which is what delayed other flows behind
      aggregation traffic (docs/experiments.md, "What holds PANAMA's tail").
    - **While it is not**, some path holds a queue at the marking threshold that the tree
      did not build alone (at its path window it cannot), so its round trip is longer
      than the path's base one and the path window no longer fills its share: the window
      may then grow above it and is governed by :class:`DctcpOr`'s reaction, unchanged.
    - **Never below the path window** (``floor_share`` of it; 1 by default). The echo is
      the OR of marks on all of a tree's paths, so on a busy fabric nearly every window
      carries one whatever the tree does (loss path multiplicity), and the source's
      reaction then holds a tree far below its path (docs/design.md, "ECN"). At its path
      window a tree cannot hold a standing queue on its own, and where other flows hold
      one at the threshold it gets less than a flow of that path would.
    Path window, ``alpha`` (from the echo) and the cap come from the plan and the results,
    the same on every worker of a tree, so the workers stay in lock-step. Without a path
    window (``limit_to_path`` never called) it is :class:`DctcpOr` (started at ``alpha = 0``).
    """

    name = "dctcp-path"

    def __init__(
        self, initial_window: float = 10.0, g: float = 1 / 16, initial_alpha: float = 0.0, floor_share: float = 1.0
    ):
        super().__init__(initial_window, g, initial_alpha)
        if not 0 <= floor_share <= 1:
            raise ValueError(f"floor_share must be in [0, 1], got {floor_share}")
        self.floor_share = floor_share
        self.ceiling = float(MAX_CWND_CAP)
        self.floor = 1.0

    def limit_to_path(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"a path window must be >= 1, got {window}")
        self.ceiling = float(window)
        self.floor = max(1.0, float(int(self.ceiling * self.floor_share)))
        self.cwnd = self.ceiling
        self.ssthresh = self.ceiling
        if self.cwnd > self.cwnd_cap:
            self.cwnd = float(self.cwnd_cap)

    def on_result(self, seq: int, ece: bool, cwnd_cap: int, snd_nxt: int) -> None:
        DctcpOr.on_result(self, seq, ece, cwnd_cap, snd_nxt)
        if self.cwnd > self.ceiling and self.alpha < self.g:
            self.cwnd = self.ceiling
        elif self.cwnd < self.floor:
            self.cwnd = self.floor
        self._clamp(cwnd_cap)


class Fixed(CongestionControl):
    """Constant window (switch-ASIC style): no ECN reaction, still clamped to cwnd_cap."""

    name = "fixed"

    def __init__(self, initial_window: float = 64.0):
        super().__init__(initial_window)

    def on_result(self, seq: int, ece: bool, cwnd_cap: int, snd_nxt: int) -> None:
        self.cwnd_cap = max(1, cwnd_cap)


class NoControl(CongestionControl):
    """Always the largest window the accelerators allow (the latest cwnd_cap)."""

    name = "none"

    def __init__(self, initial_window: float = 10.0):
        super().__init__(initial_window)

    def win(self) -> int:
        return self.cwnd_cap if self.cwnd_cap < MAX_CWND_CAP else max(1, int(self.cwnd))

    def on_result(self, seq: int, ece: bool, cwnd_cap: int, snd_nxt: int) -> None:
        self.cwnd_cap = max(1, cwnd_cap)


REGISTRY: dict[str, type[CongestionControl]] = {cls.name: cls for cls in (DctcpOr, DctcpPath, Fixed, NoControl)}
REGISTRY["dctcp"] = DctcpOr  # the source's reaction under its earlier name (still accepted)


def make_cc(name: str, **options) -> CongestionControl:
    """Build a congestion controller by registry name; unknown names raise ValueError."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; choose from {sorted(REGISTRY)}") from None
    return cls(**options)
