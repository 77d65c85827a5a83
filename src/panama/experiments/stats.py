"""Small statistics helpers: Student-t quantiles and confidence intervals of means.

scipy is not a dependency of PANAMA-py, so the two-sided t quantile is computed here from
the closed-form CDF of Student's t with an integer number of degrees of freedom
(Abramowitz & Stegun 26.7.3 / 26.7.4) and bisection. Sweeps aggregate a handful of seeds,
so the degrees of freedom are always small positive integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def t_two_sided_prob(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with ``df`` (integer >= 1) degrees of freedom."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df!r}")
    if t <= 0:
        return 0.0
    if math.isinf(t):
        return 1.0
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2 == 1:
        # A&S 26.7.3: odd df
        total, term = 0.0, c
        for k in range(1, (df - 1) // 2 + 1):
            if k > 1:
                term *= c2 * (2 * k - 2) / (2 * k - 1)
            total += term
        return min(1.0, 2.0 / math.pi * (theta + s * total))
    # A&S 26.7.4: even df
    total, term = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return min(1.0, s * total)


def t_quantile_two_sided(confidence: float, df: int) -> float:
    """The ``t`` with ``P(|T| <= t) = confidence``; e.g. 12.706 for (0.95, 1), 2.776 for (0.95, 4)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    lo, hi = 0.0, 1.0
    while t_two_sided_prob(hi, df) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_two_sided_prob(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


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
    xs = sorted(float(v) for v in values)
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    i = math.floor(pos)
    frac = pos - i
    if i + 1 >= len(xs):
        return xs[-1]
    return xs[i] + (xs[i + 1] - xs[i]) * frac
