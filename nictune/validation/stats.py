"""Summary statistics for A/B runs: mean ± 95 % confidence interval and Welch's t-test."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as _st

ALPHA = 0.05


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "half_width": self.half_width}


def summarize(values: Sequence[float]) -> Summary:
    """Mean and a two-sided t confidence interval (NaN where undefined: the sd and the
    interval of a single value, everything of none)."""
    xs = _clean(values)
    n = len(xs)
    nan = float("nan")
    if n == 0:
        return Summary(0, nan, nan, nan, nan)
    mean = sum(xs) / n
    if n == 1:
        return Summary(1, mean, nan, nan, nan)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(_st.t.ppf(1 - ALPHA / 2, n - 1)) * sd / math.sqrt(n)
    return Summary(n, mean, sd, mean - half, mean + half)


@dataclass(frozen=True)
class Comparison:
    """Optimized (b) against default (a); `change` is relative: (b - a) / a."""

    metric: str
    default: Summary
    optimized: Summary
    change: float
    change_ci: tuple[float, float]  # 95 % CI of the relative change: delta method, Welch dof
    t: float
    p_value: float
    significant: bool
    higher_is_better: bool
    verdict: str  # "improvement", "regression", "no significant difference"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "default": self.default.to_json(),
                "optimized": self.optimized.to_json(), "change_ci": list(self.change_ci)}


def compare(metric: str, default: Sequence[float], optimized: Sequence[float],
            higher_is_better: bool = True) -> Comparison:
    """Welch's two-sample t-test (unequal variances) of optimized against default."""
    a, b = summarize(default), summarize(optimized)
    nan = float("nan")
    if a.n < 2 or b.n < 2:
        t, p = nan, nan
    elif a.sd == 0 and b.sd == 0:
        t, p = (0.0, 1.0) if a.mean == b.mean else (math.copysign(math.inf, b.mean - a.mean),
                                                    0.0)
    else:
        with warnings.catch_warnings():  # nearly identical runs: scipy warns, result stands
            warnings.simplefilter("ignore", RuntimeWarning)
            res = _st.ttest_ind(_clean(optimized), _clean(default), equal_var=False)
        t, p = float(res.statistic), float(res.pvalue)
    diff = b.mean - a.mean
    change = diff / a.mean if a.mean else nan
    ci = _relative_ci(a, b)
    significant = bool(math.isfinite(p) and p < ALPHA)
    better = diff > 0 if higher_is_better else diff < 0
    if not significant:
        verdict = "no significant difference"
    else:
        verdict = "improvement" if better else "regression"
    return Comparison(metric, a, b, change, ci, t, p, significant, higher_is_better, verdict)


def _relative_ci(a: Summary, b: Summary) -> tuple[float, float]:
    """CI of b.mean / a.mean - 1 by the delta method: variance vb/ma² + mb²·va/ma⁴ (both
    means uncertain), t quantile at the Welch-Satterthwaite degrees of freedom of those
    two terms. NaN with fewer than two values per arm or a zero default mean."""
    if a.n < 2 or b.n < 2 or not a.mean:
        return math.nan, math.nan
    r = b.mean / a.mean - 1
    from_b = b.sd ** 2 / b.n / a.mean ** 2
    from_a = b.mean ** 2 * a.sd ** 2 / a.n / a.mean ** 4
    var = from_a + from_b
    if var == 0:
        return r, r
    dof = var ** 2 / (from_a ** 2 / (a.n - 1) + from_b ** 2 / (b.n - 1))
    half = float(_st.t.ppf(1 - ALPHA / 2, dof)) * math.sqrt(var)
    return r - half, r + half


def _clean(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]
