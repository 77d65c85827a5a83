"""Statistics helpers on top of scipy and numpy: t confidence intervals of means,
percentiles, and bootstrap confidence intervals of ratios.

Sweeps aggregate a handful of seeds (t intervals of per-seed means); comparisons of two
schemes on the same flows are ratios of a statistic (mean, p99), whose interval comes
from a seeded percentile bootstrap (:func:`ratio_ci`): a ratio of positive statistics
never gets a negative bound, unlike a mean +- t interval of per-seed ratios.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from panama.core.errors import FieldError

# scipy >= 1.15 names the generator ``rng``; older releases ``random_state``
_RNG_ARG = "rng" if "rng" in inspect.signature(_st.bootstrap).parameters else "random_state"


def t_quantile_two_sided(confidence: float, df: int) -> float:
    """The ``t`` with ``P(|T| <= t) = confidence``; e.g. 12.706 for (0.95, 1), 2.776 for (0.95, 4)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df!r}")
    return float(_st.t.ppf(0.5 + confidence / 2.0, df))


@dataclass(frozen=True)
class MeanCI:
    """Sample mean with a two-sided t confidence interval ``[low, high]`` over ``n`` values.

    With ``n == 1`` the interval is degenerate (``low == high == mean``, ``half_width`` NaN):
    one seed says nothing about spread.
    """

    mean: float
    low: float
    high: float
    half_width: float
    n: int
    std: float

    def as_dict(self, prefix: str) -> dict[str, float | int]:
        return {
            f"{prefix}_mean": self.mean,
            f"{prefix}_ci_low": self.low,
            f"{prefix}_ci_high": self.high,
            f"{prefix}_n": self.n,
        }


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> MeanCI:
    """Mean and t-distribution confidence interval of finite ``values`` (NaNs are skipped)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        nan = float("nan")
        return MeanCI(nan, nan, nan, nan, 0, nan)
    mean = math.fsum(xs) / n
    if n == 1:
        return MeanCI(mean, mean, mean, float("nan"), 1, float("nan"))
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    std = math.sqrt(var)
    half = t_quantile_two_sided(confidence, n - 1) * std / math.sqrt(n)
    return MeanCI(mean, mean - half, mean + half, half, n, std)


def percentile(values: Sequence[float], q: float) -> float:
    """``q``-th percentile (0..100) with linear interpolation (numpy's default); NaN if empty."""
    xs = np.asarray([float(v) for v in values], dtype=float)
    if xs.size == 0:
        return float("nan")
    return float(np.percentile(xs, q))


@dataclass(frozen=True)
class RatioCI:
    """``statistic(scheme) / statistic(baseline)`` with a bootstrap interval ``[low, high]``
    (NaN bounds when either sample has fewer than 2 values: no interval from one value)."""

    ratio: float
    low: float
    high: float
    n_scheme: int
    n_baseline: int


def ratio_ci(
    scheme: Sequence[float],
    baseline: Sequence[float],
    statistic: Callable[[np.ndarray], float] | str = "mean",
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> RatioCI:
    """Ratio of a statistic of two independent samples and its percentile-bootstrap interval.

    ``statistic``: ``"mean"``, ``"p50"``, ``"p99"`` (any ``"pNN"``) or a function of a 1-d
    array. Both samples are resampled independently (``scipy.stats.bootstrap``, seeded
    ``numpy.random.default_rng(seed)``); with positive values every bound is positive.
    """
    a = np.asarray([float(v) for v in scheme if v is not None and math.isfinite(float(v))])
    b = np.asarray([float(v) for v in baseline if v is not None and math.isfinite(float(v))])
    if isinstance(statistic, str):
        if statistic == "mean":
            fn = np.mean
        elif statistic.startswith("p") and statistic[1:].replace(".", "", 1).isdigit():
            q = float(statistic[1:])
            fn = lambda x, axis=-1: np.percentile(x, q, axis=axis)  # noqa: E731
        else:
            raise FieldError("statistic", f"expected mean, pNN or a function, got {statistic!r}")
    else:
        fn = statistic
    nan = float("nan")
    if a.size == 0 or b.size == 0:
        return RatioCI(nan, nan, nan, int(a.size), int(b.size))
    ratio = float(fn(a) / fn(b))
    if a.size < 2 or b.size < 2:
        return RatioCI(ratio, nan, nan, int(a.size), int(b.size))

    def stat(x, y, axis=-1):
        return fn(x, axis=axis) / fn(y, axis=axis)

    res = _st.bootstrap(
        (a, b),
        stat,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        **{_RNG_ARG: np.random.default_rng(seed)},
    )
    return RatioCI(
        ratio, float(res.confidence_interval.low), float(res.confidence_interval.high), int(a.size), int(b.size)
    )
