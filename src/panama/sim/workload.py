"""Background traffic: flow-size distributions and Poisson flow arrivals.

Flow sizes follow a piecewise-linear CDF (sizes in bytes, cumulative probabilities in
[0, 1], interpolated linearly), either a built-in one (``web-search``, ``data-mining``,
``fb-hadoop``, ``ali-storage``; files in ``panama/data/workloads``) or a text file with
one ``size_bytes cdf`` pair per line (``#`` starts a comment; a CDF column in percent,
i.e. ending at 100, is accepted too).

Arrivals are a Poisson process per source host with rate ``link_rate * load /
(8 * mean_flow_size)``, i.e. mean inter-arrival ``mean_size * 8 / (link_rate * load)``
(so each host offers ``load`` of its link rate on average); destinations are uniform
over the other eligible hosts. Everything random comes from the ``numpy.random.Generator``
passed in: give the workload its own generator and the flows are identical whatever
else (scheme, job placement) changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

BUILTIN_WORKLOADS = {
    "web-search": "web_search.txt",
    "data-mining": "data_mining.txt",
    "fb-hadoop": "fb_hadoop.txt",
    "ali-storage": "ali_storage.txt",
}


class WorkloadError(ValueError):
    """A flow-size distribution or workload parameter is invalid."""


@dataclass(frozen=True)
class FlowSizeCdf:
    """Piecewise-linear flow-size CDF: ``sizes_bytes`` increasing, ``cdf`` from 0 to 1."""

    name: str
    sizes_bytes: np.ndarray
    cdf: np.ndarray

    def __post_init__(self) -> None:
        s, c = self.sizes_bytes, self.cdf
        if s.ndim != 1 or s.shape != c.shape or s.shape[0] < 2:
            raise WorkloadError(f"{self.name}: need at least two (size, cdf) points")
        if np.any(np.diff(s) < 0) or np.any(np.diff(c) < 0):
            raise WorkloadError(f"{self.name}: sizes and CDF values must be non-decreasing")
        if s[0] < 0:
            raise WorkloadError(f"{self.name}: sizes must be >= 0")
        if c[0] < 0 or abs(c[-1] - 1.0) > 1e-6:
            raise WorkloadError(f"{self.name}: CDF must end at 1 (got {c[-1]:g})")

    @property
    def mean_bytes(self) -> float:
        """Mean flow size under linear interpolation (mass below the first point sits at it)."""
        s, c = self.sizes_bytes, self.cdf
        return float(c[0] * s[0] + np.sum(np.diff(c) * (s[1:] + s[:-1]) / 2))

    def quantile(self, u: np.ndarray | float) -> np.ndarray:
        """Inverse CDF (linear interpolation), in bytes (float)."""
        return np.interp(u, self.cdf, self.sizes_bytes)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` flow sizes in whole bytes (at least 1)."""
        return np.maximum(1, np.rint(self.quantile(rng.random(n)))).astype(np.int64)


def parse_cdf_text(text: str, name: str = "cdf") -> FlowSizeCdf:
    """Parse ``size cdf`` lines (``#`` comments, blank lines ignored)."""
    sizes: list[float] = []
    probs: list[float] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        if len(parts) < 2:
            raise WorkloadError(f"{name}:{lineno}: expected 'size_bytes cdf', got {raw.strip()!r}")
        try:
            sizes.append(float(parts[0]))
            probs.append(float(parts[1]))
        except ValueError:
            raise WorkloadError(f"{name}:{lineno}: not numbers: {raw.strip()!r}") from None
    if not probs:
        raise WorkloadError(f"{name}: no (size, cdf) points")
    cdf = np.asarray(probs, dtype=float)
    if cdf[-1] > 1.0 + 1e-6:  # percent scale
        cdf = cdf / 100.0
    return FlowSizeCdf(name, np.asarray(sizes, dtype=float), cdf)


def load_cdf(name_or_path: str) -> FlowSizeCdf:
    """A built-in distribution by name (see ``BUILTIN_WORKLOADS``) or a CDF text file."""
    if name_or_path in BUILTIN_WORKLOADS:
        text = (resources.files("panama") / "data" / "workloads" / BUILTIN_WORKLOADS[name_or_path]).read_text()
        return parse_cdf_text(text, name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise WorkloadError(
            f"unknown workload {name_or_path!r}: not a built-in ({', '.join(BUILTIN_WORKLOADS)}) nor a file"
        )
    return parse_cdf_text(path.read_text(), str(path))


@dataclass(frozen=True)
class FlowSpec:
    """One background flow to start: ``size_bytes`` from ``src`` to ``dst`` at ``start_ps``."""

    flow_id: int
    src: str
    dst: str
    size_bytes: int
    start_ps: int


def poisson_flows(
    rng: np.random.Generator,
    cdf: FlowSizeCdf,
    hosts: list[str],
    *,
    link_rate_bps: float,
    load: float,
    start_ps: int,
    stop_ps: int,
    destinations: list[str] | None = None,
    first_flow_id: int = 0,
) -> list[FlowSpec]:
    """Flows arriving in ``[start_ps, stop_ps)`` at every host of ``hosts``, sorted by start time.

    Each source host runs its own Poisson process with mean inter-arrival
    ``cdf.mean_bytes * 8 / (link_rate_bps * load)``; its destination is uniform over
    ``destinations`` (default: ``hosts``) minus itself. Hosts are processed in the given
    order, so the result depends only on the arguments and the generator state.
    """
    if not 0 <= load <= 1.5:
        raise WorkloadError(f"load must be in [0, 1.5], got {load}")
    if load == 0 or stop_ps <= start_ps or not hosts:
        return []
    dests = list(destinations) if destinations is not None else list(hosts)
    mean_gap_ps = cdf.mean_bytes * 8 / (link_rate_bps * load) * 1e12
    span = stop_ps - start_ps
    rows: list[tuple[int, int, str, str, int]] = []
    for src_index, src in enumerate(hosts):
        others = [d for d in dests if d != src]
        if not others:
            continue
        # Draw enough exponential gaps in one go (mean + 6 sigma), extend if short.
        expected = span / mean_gap_ps
        n = int(expected + 6 * np.sqrt(expected) + 16)
        gaps = rng.exponential(mean_gap_ps, n)
        times = np.cumsum(gaps)
        while times[-1] < span:
            more = np.cumsum(rng.exponential(mean_gap_ps, n)) + times[-1]
            times = np.concatenate([times, more])
        times = times[times < span]
        k = times.shape[0]
        sizes = cdf.sample(rng, k)
        dst_idx = rng.integers(0, len(others), k)
        for t, size, d in zip(times.tolist(), sizes.tolist(), dst_idx.tolist()):
            rows.append((start_ps + int(t), src_index, src, others[d], int(size)))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [FlowSpec(first_flow_id + i, r[2], r[3], r[4], r[0]) for i, r in enumerate(rows)]
